"""Does the GEMM formula reproduce the measurement it is calibrated on?

Run: ``.venv/bin/python bench/gemm_shapes.py``. Each catalog GPU's ``gemm_efficiency`` is a
maximum achievable matmul (MAMF) measured at one best shape M x N x K
(bench/data/mamf_best_shapes.json, stas00/ml-engineering's table). The cost model prices a GEMM
as that efficiency x wave quantisation (``TILE_M`` x ``TILE_N`` output tiles, one per SM a wave)
x k / (k + ``gemm_saturation_dim``) (``solver.cost.compute.gemm_efficiency``). Evaluated at the
measured shape itself the formula should give the measured rate back; where it gives less, the
shape factors charge a loss the measurement says the GPU's GEMM library does not take there.

Prints, per measurement: the catalog's efficiency x peak (the MAMF again, to the table's
rounding), the formula's rate at the best shape, their ratio, and the two shape factors. It
measures, it changes nothing (docs/wip/README.md, session 28, keeps what it showed).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import catalog  # noqa: E402
from solver.cost.compute import gemm_efficiency, shape_factors  # noqa: E402
from solver.spec.training import Precision  # noqa: E402

DATA_PATH = Path(__file__).parent / "data" / "mamf_best_shapes.json"
TERA = 1e12


@dataclass(frozen=True)
class ShapeCheck:
    gpu: str
    precision: Precision
    shape: tuple[int, int, int]
    mamf_tflops: float  # measured at ``shape``
    catalog_tflops: float  # the catalog's efficiency x peak
    model_tflops: float  # the cost model's rate at ``shape``
    wave_factor: float
    k_factor: float

    @property
    def ratio(self) -> float:
        """The formula's rate at the measured shape over the measured rate."""
        return self.model_tflops / self.mamf_tflops


def load_rows(path: Path = DATA_PATH) -> list[dict]:
    return list(json.loads(path.read_text(encoding="utf-8"))["rows"])


def check(row: dict) -> ShapeCheck:
    gpu = catalog.get_gpu(row["gpu"])
    precision = Precision(row["precision"])
    m, n, k = row["best_shape"]
    wave, k_factor = shape_factors(gpu, m, n, k)
    return ShapeCheck(
        gpu=row["gpu"],
        precision=precision,
        shape=(m, n, k),
        mamf_tflops=float(row["mamf_tflops"]),
        catalog_tflops=gpu.efficiency(precision) * gpu.peak(precision) / TERA,
        model_tflops=gemm_efficiency(gpu, precision, m, n, k) * gpu.peak(precision) / TERA,
        wave_factor=wave,
        k_factor=k_factor,
    )


def checks() -> list[ShapeCheck]:
    return [check(row) for row in load_rows()]


def table(results: list[ShapeCheck]) -> str:
    lines = [
        f"{'gpu':16s} {'prec':5s} {'best shape M x N x K':>22s} {'MAMF':>8s} {'catalog':>8s} {'model':>8s} {'ratio':>6s} {'waves':>6s} {'k':>6s}"
    ]
    for r in results:
        shape = "x".join(str(d) for d in r.shape)
        lines.append(
            f"{r.gpu:16s} {r.precision.value:5s} {shape:>22s} {r.mamf_tflops:8.1f} {r.catalog_tflops:8.1f} "
            f"{r.model_tflops:8.1f} {r.ratio:6.3f} {r.wave_factor:6.3f} {r.k_factor:6.3f}"
        )
    low = [r for r in results if r.ratio < 0.9]
    lines.append("")
    lines.append(
        f"TFLOP/s; model = the cost model's GEMM rate at the measured best shape (ratio = model / MAMF). "
        f"{len(low)} of {len(results)} measurements are reproduced below 0.9 of themselves: "
        + ", ".join(f"{r.gpu} {r.precision.value} {r.ratio:.3f}" for r in low)
    )
    return "\n".join(lines)


def main() -> int:
    print(table(checks()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

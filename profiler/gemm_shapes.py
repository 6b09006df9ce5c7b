"""Time the GEMMs the cost model prices, at a training configuration's own shapes, on the local
device, beside the model's time for each (``partitura gemm-shapes``).

``solver.cost.analytic`` prices a transformer layer's four linear layers on one tensor-parallel
rank (fused QKV, the attention output projection, the MLP's up (and gate) and down projections)
as forward GEMMs of ``tokens`` rows through ``solver.cost.compute.gemm_time_s``, and each one's
backward as twice its forward (``BACKWARD_TO_FORWARD``: the input-gradient and weight-gradient
GEMMs, each taken as costly as the forward). This command times all three GEMMs of each linear
layer (forward m x k @ k x n; input gradient m x n @ n x k; weight gradient n x m @ m x k), and
the maximum-achievable-matmul best shapes the catalog's efficiency comes from
(bench/data/mamf_best_shapes.json, where the checkout has it), so one run on a GPU says how far
the shape model (wave quantisation, short-k penalty) and the backward ratio are from the device.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from profiler.calibrate import TERA, _time
from profiler.measure import DTYPES
from solver.cost.compute import gemm_time_s
from solver.spec.errors import SpecError
from solver.spec.hardware import GpuSpec
from solver.spec.model import MlpActivation, ModelSpec
from solver.spec.training import Precision

MAMF_SHAPES_PATH = Path(__file__).resolve().parent.parent / "bench" / "data" / "mamf_best_shapes.json"


@dataclass(frozen=True)
class GemmShape:
    """One GEMM, (m x k) @ (k x n); ``priced`` is the forward GEMM whose time the cost model
    charges for it (itself for a forward GEMM, the layer's forward for a backward one)."""

    name: str
    m: int
    n: int
    k: int
    priced: tuple[int, int, int]


@dataclass(frozen=True)
class GemmTiming:
    name: str
    m: int
    n: int
    k: int
    measured_s: float
    model_s: float

    @property
    def ratio(self) -> float:
        """Measured over the cost model's time (> 1: the model is optimistic)."""
        return self.measured_s / self.model_s

    @property
    def measured_tflops(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.measured_s / TERA


def layer_gemm_shapes(model: ModelSpec, tp_size: int, tokens: int) -> list[GemmShape]:
    """The forward, input-gradient and weight-gradient GEMMs of one layer's four linear layers on
    one TP rank, as ``analytic._layer_profile`` prices them (column-parallel outputs and
    row-parallel inputs split over ``tp_size``)."""
    if tokens < 1 or tp_size < 1:
        raise SpecError("tokens", f"tokens and tp_size must be positive, got {tokens} and {tp_size}")
    h, q, kv, f = model.hidden_size, model.q_width, model.kv_hidden_size, model.ffn_hidden_size
    up = (2 if model.mlp_activation is MlpActivation.SWIGLU else 1) * f
    linears = (("qkv", (q + 2 * kv) // tp_size, h), ("out_proj", h, q // tp_size), ("mlp_up", up // tp_size, h), ("mlp_down", h, f // tp_size))
    shapes = []
    for name, n, k in linears:
        forward = (tokens, n, k)
        shapes += [
            GemmShape(f"{name}.forward", tokens, n, k, forward),
            GemmShape(f"{name}.dgrad", tokens, k, n, forward),  # dY (m x n) @ W^T: the input's gradient
            GemmShape(f"{name}.wgrad", n, k, tokens, forward),  # dY^T (n x m) @ X: the weight's gradient
        ]
    return shapes


def mamf_shapes(gpu_name: str, precision: Precision, path: Path = MAMF_SHAPES_PATH) -> list[GemmShape]:
    """The catalog GPU's maximum-achievable-matmul best shape in ``precision``, if the checkout
    carries bench/data/mamf_best_shapes.json and it lists one."""
    if not path.exists():
        return []
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    found = []
    for row in rows:
        if row["gpu"] == gpu_name and row["precision"] == precision.value:
            m, n, k = row["best_shape"]
            found.append(GemmShape(f"mamf.{row['mamf_tflops']:g}", m, n, k, (m, n, k)))
    return found


# FP8 GEMMs go through torch._scaled_mm with per-tensor scales, as Transformer Engine's delayed and
# current-scaling recipes run them through cuBLASLt: E4M3 operands, a column-major second operand,
# a 16-bit output, every dimension a multiple of 16 (cuBLASLt's FP8 requirement).
FP8_ALIGNMENT = 16


def _gemm(torch, shape: GemmShape, precision: Precision, device, generator):
    """A callable running ``shape``'s (m x k) @ (k x n) GEMM in ``precision`` on ``device``."""
    if precision is Precision.FP8:
        if any(d % FP8_ALIGNMENT for d in (shape.m, shape.n, shape.k)):
            raise SpecError("shape", f"FP8 GEMMs need every dimension a multiple of {FP8_ALIGNMENT}, got {shape.name} {shape.m} x {shape.n} x {shape.k}")
        a = torch.randn(shape.m, shape.k, generator=generator).to(device=device, dtype=torch.float8_e4m3fn)
        b = torch.randn(shape.n, shape.k, generator=generator).to(device=device, dtype=torch.float8_e4m3fn).t()
        scale = torch.ones((), dtype=torch.float32, device=device)
        return functools.partial(torch._scaled_mm, a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    if precision not in DTYPES:
        raise SpecError("precision", f"{precision.value} GEMMs are not timed here (bf16, fp16 and fp8 are)")
    a = torch.randn(shape.m, shape.k, generator=generator).to(device=device, dtype=DTYPES[precision])
    b = torch.randn(shape.k, shape.n, generator=generator).to(device=device, dtype=DTYPES[precision])
    return functools.partial(torch.matmul, a, b)


def time_gemms(shapes: list[GemmShape], gpu: GpuSpec, precision: Precision, device: str, warmup: int, repeats: int) -> list[GemmTiming]:
    """Each shape's median time on ``device`` beside the cost model's time for what it prices."""
    import torch

    if not gpu.supports(precision):
        raise SpecError("precision", f"{gpu.name} has no {precision.value} peak to price against")
    torch_device = torch.device(device)
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", "CUDA was asked for but torch.cuda.is_available() is False")
    generator = torch.Generator(device="cpu").manual_seed(0)
    timings = []
    for shape in shapes:
        work = _gemm(torch, shape, precision, torch_device, generator)
        measured = _time(work, torch_device, warmup, repeats)
        del work
        timings.append(GemmTiming(shape.name, shape.m, shape.n, shape.k, measured, gemm_time_s(gpu, precision, *shape.priced)))
    return timings


def timings_table(timings: list[GemmTiming]) -> str:
    lines = [f"{'gemm':18s} {'m':>7s} {'n':>7s} {'k':>7s} {'measured ms':>12s} {'model ms':>10s} {'ratio':>6s} {'TFLOP/s':>8s}"]
    for t in timings:
        lines.append(
            f"{t.name:18s} {t.m:7d} {t.n:7d} {t.k:7d} {1e3 * t.measured_s:12.4f} {1e3 * t.model_s:10.4f} "
            f"{t.ratio:6.3f} {t.measured_tflops:8.1f}"
        )
    layer = [t for t in timings if not t.name.startswith("mamf.")]
    if layer:
        measured, model = sum(t.measured_s for t in layer), sum(t.model_s for t in layer)
        lines.append(
            f"layer's linear GEMMs, forward and backward: measured {1e3 * measured:.3f} ms, model {1e3 * model:.3f} ms "
            f"(ratio {measured / model:.3f}; the model's backward is twice each forward)"
        )
    return "\n".join(lines)


def timings_document(timings: list[GemmTiming], context: dict) -> dict:
    return {
        **context,
        "gemms": [{**asdict(t), "ratio": t.ratio, "measured_tflops": t.measured_tflops} for t in timings],
    }

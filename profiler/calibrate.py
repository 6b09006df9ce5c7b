"""Calibrate the analytic model's GPU knobs on the local device: a catalog override.

Measures (median of ``repeats`` timed runs after warm-up; CUDA events on a GPU, perf_counter on
a CPU):
- a GEMM sweep per precision: square GEMMs from small to large, and skinny ones (one dimension
  small, as in TP-split or small-micro-batch layers);
- a memory-bandwidth probe: a streaming element-wise add ``c = a + b`` over tensors far larger
  than any cache (3 bytes moved per byte of output element... read a, read b, write c).

Then fits the knobs of ``solver.cost.compute``'s GEMM model (``gemm_time_s``: roofline of
``peak x gemm_efficiency x wave quantisation x k / (k + gemm_saturation_dim)`` against HBM at
``hbm_efficiency``, plus a launch latency) to the measured GEMM times by a grid search on
(gemm_efficiency, gemm_saturation_dim) minimising the squared log error, so the catalog numbers
reproduce these measurements through the same formula the planner uses.

The result uses the keys of ``catalog/data/gpus.json`` (``name``, ``gemm_efficiency`` per
precision, ``gemm_saturation_dim``, ``hbm_efficiency``) with a ``sources`` entry saying how each
was measured, and the raw measurements under ``measured``.
"""

from __future__ import annotations

import datetime
import functools
import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from profiler.measure import DTYPES, device_name
from solver.cost.compute import gemm_time_s
from solver.spec.errors import SpecError
from solver.spec.hardware import GpuSpec
from solver.spec.training import Precision

GB = 1e9  # the catalog states bandwidth in decimal GB/s
TERA = 1e12

# Sweep shapes (m, n, k). GPUs: up to 8192, where H100-class parts reach their plateau
# (stas00/ml-engineering's mamf-finder sweeps the same range); CPUs: a smaller range.
GPU_SQUARE = (256, 512, 1024, 2048, 4096, 8192)
GPU_SKINNY_M = (16, 32, 64, 128, 256, 512)
GPU_SKINNY_NK = 8192
CPU_SQUARE = (64, 128, 256, 512, 1024)
CPU_SKINNY_M = (4, 8, 16, 32, 64)
CPU_SKINNY_NK = 1024
GPU_STREAM_BYTES = 2**30  # per tensor: far beyond any L2 (50 MiB on H100)
CPU_STREAM_BYTES = 2**26  # per tensor: beyond a server CPU's L3 slice

EFFICIENCY_GRID = np.round(np.arange(0.05, 1.0001, 0.005), 3)
SATURATION_GRID = np.unique(np.round(np.geomspace(1.0, 4096.0, 97), 1))


@dataclass(frozen=True)
class GemmSample:
    m: int
    n: int
    k: int
    seconds: float

    @property
    def tflops_per_s(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.seconds / TERA


def _time(work, device: torch.device, warmup: int, repeats: int) -> float:
    """Median seconds of ``work()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        work()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1000.0)
        else:
            began = time.perf_counter()
            work()
            samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def gemm_sweep(device: torch.device, precision: Precision, warmup: int, repeats: int) -> list[GemmSample]:
    """Measured seconds of square and skinny (m x k) @ (k x n) GEMMs in ``precision``."""
    dtype = DTYPES[precision]
    cuda = device.type == "cuda"
    shapes = [(d, d, d) for d in (GPU_SQUARE if cuda else CPU_SQUARE)]
    nk = GPU_SKINNY_NK if cuda else CPU_SKINNY_NK
    shapes += [(m, nk, nk) for m in (GPU_SKINNY_M if cuda else CPU_SKINNY_M)]
    generator = torch.Generator(device="cpu").manual_seed(0)
    samples = []
    for m, n, k in shapes:
        a = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
        b = torch.randn(k, n, generator=generator).to(device=device, dtype=dtype)
        samples.append(GemmSample(m, n, k, _time(functools.partial(torch.matmul, a, b), device, warmup, repeats)))
    return samples


def stream_bytes_per_s(device: torch.device, warmup: int, repeats: int) -> float:
    """Bytes/s of a streaming element-wise add c = a + b (2 reads and 1 write per element)."""
    elements = (GPU_STREAM_BYTES if device.type == "cuda" else CPU_STREAM_BYTES) // 2
    a = torch.ones(elements, dtype=torch.bfloat16, device=device)
    b = torch.ones(elements, dtype=torch.bfloat16, device=device)
    c = torch.empty_like(a)
    seconds = _time(lambda: torch.add(a, b, out=c), device, warmup, repeats)
    return 3 * elements * a.element_size() / seconds


def fit_gemm_model(gpu: GpuSpec, precision: Precision, samples: list[GemmSample]) -> tuple[float, float, float]:
    """(gemm_efficiency, gemm_saturation_dim, rms log error) that make ``solver.cost.compute.gemm_time_s``
    reproduce the measured GEMM times best (grid search, deterministic)."""
    measured = np.log([s.seconds for s in samples])
    best = (math.inf, 0.0, 0.0)
    for saturation in SATURATION_GRID:
        for efficiency in EFFICIENCY_GRID:
            candidate = replace(gpu, gemm_efficiency={precision: float(efficiency)}, gemm_saturation_dim=float(saturation))
            predicted = np.log([gemm_time_s(candidate, precision, s.m, s.n, s.k) for s in samples])
            error = float(np.mean((predicted - measured) ** 2))
            if error < best[0]:
                best = (error, float(efficiency), float(saturation))
    return best[1], best[2], math.sqrt(best[0])


def calibrate(
    gpu: GpuSpec,
    device: str = "cuda",
    precisions: tuple[Precision, ...] | None = None,
    warmup: int = 3,
    repeats: int = 10,
) -> dict[str, Any]:
    """A catalog override for ``gpu`` measured on ``device``: the gpus.json keys plus sources.

    ``gpu`` supplies the spec-sheet peaks and HBM bandwidth the efficiencies are fractions of
    (a catalog entry, or an inline spec for a device the catalog lacks). Returns
    ``{"gpus": [entry]}`` ready to be written as JSON.
    """
    torch_device = torch.device(device)
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", "CUDA was asked for but torch.cuda.is_available() is False")
    if precisions is None:
        precisions = tuple(p for p in (Precision.BF16, Precision.FP16) if gpu.supports(p))
    for precision in precisions:
        if precision not in DTYPES:
            raise SpecError("precision", f"{precision.value} GEMMs are not measured by plain PyTorch here")
        if not gpu.supports(precision):
            raise SpecError("precision", f"{gpu.name} has no {precision.value} peak to compare against")
    stream = stream_bytes_per_s(torch_device, warmup, repeats)
    hbm_efficiency = stream / gpu.hbm_bytes_per_s
    if not 0 < hbm_efficiency <= 1:
        raise SpecError(
            "gpu.hbm_gbytes_per_s",
            f"measured {stream / GB:.1f} GB/s exceeds the stated {gpu.hbm_bytes_per_s / GB:.1f} GB/s",
        )
    calibrated = replace(gpu, hbm_efficiency=hbm_efficiency)
    efficiencies: dict[str, float] = {}
    saturations: list[float] = []
    measured: dict[str, Any] = {"stream_gbytes_per_s": stream / GB, "gemms": {}}
    fit_errors: dict[str, float] = {}
    for precision in precisions:
        samples = gemm_sweep(torch_device, precision, warmup, repeats)
        efficiency, saturation, error = fit_gemm_model(calibrated, precision, samples)
        best = max(s.tflops_per_s for s in samples) * TERA / gpu.peak(precision)
        efficiencies[precision.value] = efficiency
        saturations.append(saturation)
        fit_errors[precision.value] = error
        measured["gemms"][precision.value] = [
            {"m": s.m, "n": s.n, "k": s.k, "seconds": s.seconds, "tflops_per_s": s.tflops_per_s} for s in samples
        ]
        measured[f"best_fraction_of_peak_{precision.value}"] = best
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    where = f"partitura calibrate on {device_name(torch_device)!r}, torch {torch.__version__}, {when}"
    return {
        "_about": "Catalog override measured by `partitura calibrate`; keys as in catalog/data/gpus.json.",
        "gpus": [
            {
                "name": gpu.name,
                "gemm_efficiency": efficiencies,
                "gemm_saturation_dim": statistics.median(saturations),
                "hbm_efficiency": round(hbm_efficiency, 4),
                "sources": {
                    "gemm_efficiency": f"{where}: fit of solver.cost.compute.gemm_time_s to a sweep of square "
                    f"and skinny GEMMs (rms log error {fit_errors}), fraction of the stated peak",
                    "gemm_saturation_dim": f"{where}: same fit (median over precisions)",
                    "hbm_efficiency": f"{where}: streaming bf16 add c = a + b over "
                    f"{(GPU_STREAM_BYTES if torch_device.type == 'cuda' else CPU_STREAM_BYTES) // 2**20} MiB "
                    f"tensors, {stream / GB:.1f} GB/s of the stated {gpu.hbm_bytes_per_s / GB:.1f} GB/s",
                },
                "measured": {"device": device_name(torch_device), "warmup": warmup, "repeats": repeats, **measured},
            }
        ],
    }

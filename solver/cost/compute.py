"""Kernel time on one GPU: GEMMs from FLOPs and a shape-aware efficiency, element-wise work from
bytes moved over HBM.

GEMM efficiency = measured large-GEMM efficiency (``GpuSpec.gemm_efficiency``, the maximum
achievable matmul measured on that GPU) x wave quantisation x a short-k penalty, following
NVIDIA's "Matrix Multiplication Background" performance guide (Deep Learning Performance docs):
- the output is cut into tiles (128 x 256 for large fp16/bf16 cuBLAS kernels); tiles run in
  waves of one per SM, so a partial last wave wastes the idle SMs' share;
- each tile loops over k; prologue and epilogue cost about ``GpuSpec.gemm_saturation_dim``
  iterations' worth of k, so a GEMM with small k (a TP-split or attention GEMM) runs further from
  peak: factor k / (k + k_sat).
A GEMM can never run faster than its operands stream from HBM (roofline). Element-wise kernels
(norms, softmax, activation functions, dropout, residual adds) are bound by HBM bandwidth at
``GpuSpec.hbm_efficiency`` of the spec sheet.
"""

from __future__ import annotations

import math

from solver.spec.hardware import GpuSpec
from solver.spec.training import Precision

BYTES_16BIT = 2  # fp16 / bf16 element


# Operand bytes per element of the block-scaled formats, scales included: MXFP8 stores one FP8
# byte per element and one E8M0 scale byte per 32-element block (OCP Microscaling Formats (MX)
# Specification v1.0: block size k = 32, shared E8M0 scale; Transformer Engine's MXFP8 recipe
# docs); NVFP4 half a byte per E2M1 element and one E4M3 scale byte per 16-element block (NVIDIA,
# "Pretraining Large Language Models with NVFP4", arXiv 2509.25149; its one FP32 per-tensor
# scale is negligible).
MXFP8_OPERAND_BYTES = 1 + 1 / 32
NVFP4_OPERAND_BYTES = 0.5 + 1 / 16
OPERAND_BYTES = {Precision.FP8: 1.0, Precision.MXFP8: MXFP8_OPERAND_BYTES, Precision.NVFP4: NVFP4_OPERAND_BYTES}


def bytes_per_element(precision: Precision) -> float:
    """GEMM operand size: 1 byte for FP8 GEMMs, 1 + 1/32 for MXFP8 and 0.5 + 1/16 for NVFP4
    (their block scales included), 2 bytes for fp16/bf16."""
    return OPERAND_BYTES.get(precision, BYTES_16BIT)


TILE_M, TILE_N = 256, 128  # output tile of large cuBLAS fp16/bf16 kernels (NVIDIA GEMM guide)


def shape_factors(gpu: GpuSpec, m: float, n: float, k: float, batch: float = 1.0) -> tuple[float, float]:
    """(wave quantisation, short-k factor) of ``batch`` (m x k) @ (k x n) GEMMs on ``gpu``: the
    share of the last wave's SMs that have a tile, and k / (k + ``gemm_saturation_dim``)."""
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N) * batch
    waves = tiles / gpu.num_sms
    return waves / math.ceil(waves), k / (k + gpu.gemm_saturation_dim)


def gemm_efficiency(gpu: GpuSpec, precision: Precision, m: float, n: float, k: float, batch: float = 1.0) -> float:
    """Fraction of dense peak reached by ``batch`` (m x k) @ (k x n) GEMMs (see module docstring)."""
    wave_efficiency, k_efficiency = shape_factors(gpu, m, n, k, batch)
    return gpu.efficiency(precision) * wave_efficiency * k_efficiency


def gemm_time_s(
    gpu: GpuSpec, precision: Precision, m: float, n: float, k: float, batch: float = 1.0
) -> float:
    """Seconds for ``batch`` independent (m x k) @ (k x n) GEMMs: max(compute, HBM) + launch."""
    flops = 2.0 * m * n * k * batch
    compute_s = flops / (gpu.peak(precision) * gemm_efficiency(gpu, precision, m, n, k, batch))
    operand_bytes = bytes_per_element(precision) * (m * k + k * n) + BYTES_16BIT * m * n
    memory_s = batch * operand_bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency)
    return max(compute_s, memory_s) + gpu.kernel_launch_s


def elementwise_time_s(gpu: GpuSpec, bytes_moved: float, kernels: int = 1) -> float:
    """Seconds for memory-bound kernels moving ``bytes_moved`` bytes (reads + writes) in total."""
    return bytes_moved / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency) + kernels * gpu.kernel_launch_s

"""What multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec 2.1; DeepSeek-V3, arXiv
2412.19437, Sec 2.1.1) costs beyond the h-wide attention projections a standard layer has, for
one micro-batch on one GPU of a tensor-parallel group of tp.

MLA replaces the fused QKV and output projections by a chain of smaller GEMMs: Q down to a
q_lora_rank latent and up to H heads of d_qk + d_rope; K and V jointly down to a kv_lora_rank
latent (plus one shared d_rope rope key) and up to H heads of d_qk (keys) and d_v (values); the
output projection from H d_v back to h. Megatron-core's ``MLASelfAttention`` runs the down
projections unsplit on every TP rank and the up and output projections split over the heads
(column- and row-parallel), as modelled here. In training the up-projected K and V are
materialised (no weight absorption, which is an inference trick), so attention itself runs on
H heads of d_qk + d_rope (scores) and d_v (values): ``ModelSpec.qk_head_width`` and
``v_head_width``, which ``solver.cost.analytic``'s attention core and ``flops.attention_score_flops``
read. ``solver.cost.analytic`` applies ``MlaCost`` to the layer it costs with h-wide projections.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.cost.compute import gemm_time_s
from solver.spec.hardware import GpuSpec
from solver.spec.model import ModelSpec
from solver.spec.training import Precision

BYTES_16BIT = 2


@dataclass(frozen=True)
class MlaCost:
    """MLA's projections against the h-wide ones of a standard layer (per micro-batch, one GPU)."""

    standard_gemm_forward_s: float  # fused QKV and output projections, to be taken out
    gemm_forward_s: float  # MLA's down, up and output projections, forward
    kept_bytes: float  # activation bytes kept for backward added (wider heads, latents), may be negative
    up_proj_kept_bytes: float  # of the kept bytes, the up-projected Q, K and V (what ``mla_up_proj`` recompute drops)
    up_proj_forward_s: float  # the Q and K/V up projections, forward (what ``mla_up_proj`` recompute runs again)


def mla_cost(model: ModelSpec, gpu: GpuSpec, precision: Precision, tokens: float, tp_size: int) -> MlaCost:
    """MLA's projection GEMMs and kept activations on one TP rank, against the standard ones
    (see the module docstring); ``tokens`` = b * s / cp."""
    t, h, heads = tp_size, model.hidden_size, model.num_attention_heads
    qk, v, rope = model.qk_head_width, model.v_head_width, model.qk_rope_head_dim
    q = model.q_width  # h: latent attention takes no head_dim (ModelSpec)
    standard = gemm_time_s(gpu, precision, tokens, (q + 2 * model.kv_hidden_size) / t, h) + gemm_time_s(gpu, precision, tokens, h, q / t)
    if model.q_lora_rank:
        query_up_s = gemm_time_s(gpu, precision, tokens, heads * qk / t, model.q_lora_rank)
        query_s = gemm_time_s(gpu, precision, tokens, model.q_lora_rank, h) + query_up_s
    else:
        query_up_s = 0.0  # no Q latent: the one Q projection reads the layer input
        query_s = gemm_time_s(gpu, precision, tokens, heads * qk / t, h)
    key_value_up_s = gemm_time_s(gpu, precision, tokens, heads * (model.qk_head_dim + v) / t, model.kv_lora_rank)
    key_value_s = gemm_time_s(gpu, precision, tokens, model.kv_lora_rank + rope, h) + key_value_up_s
    output_s = gemm_time_s(gpu, precision, tokens, h, heads * v / t)
    # Kept 16-bit tensors per token: Q and K of H x qk, V and the output projection's input of
    # H x v (split over tp), the two latents (unsplit), against the standard layer's Q, output
    # input (h each) and K, V (kv_hidden each) of Korthikanti et al.'s Table 2.
    mla_kept = (2 * heads * qk + 2 * heads * v) / t + model.q_lora_rank + model.kv_lora_rank + rope
    standard_kept = (2 * q + 2 * model.kv_hidden_size) / t
    # ``mla_up_proj`` recompute (Megatron-core multi_latent_attention.py at NVIDIA/Megatron-LM
    # 8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2: ``qkv_up_checkpoint = CheckpointWithoutOutput``
    # over ``qkv_up_proj_and_rope_apply``, then ``discard_output_and_register_recompute`` once the
    # attention core has run) keeps the latents it starts from and frees the up-projected Q, K and
    # V the attention kernel saved: H x (2 (d_qk + d_rope) + d_v) 16-bit elements per token; the
    # up projections (and RoPE) run again in backward.
    up_proj_kept = BYTES_16BIT * tokens * heads * (2 * qk + v) / t
    return MlaCost(
        standard_gemm_forward_s=standard,
        gemm_forward_s=query_s + key_value_s + output_s,
        kept_bytes=BYTES_16BIT * tokens * (mla_kept - standard_kept),
        up_proj_kept_bytes=up_proj_kept,
        up_proj_forward_s=query_up_s + key_value_up_s,
    )

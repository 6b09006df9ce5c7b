"""The softmax's exponentials in fused attention: one per score element each pass, on the special
function units (``GpuSpec.exp_per_s``), charged beside the tile's GEMMs
(``solver.cost.analytic.flash_exponential_s``). Blackwell Ultra doubles the MUFU.EX2 rate over
Blackwell (NVIDIA, "Making Softmax More Efficient with NVIDIA Blackwell Ultra")."""

from __future__ import annotations

import dataclasses

import pytest

from catalog.conversion import gpu_spec_from_dict
from catalog.loader import get_entry
from solver.cost.analytic import FUSED, _attention_core_s, flash_exponential_s
from solver.spec.hardware import GpuSpec
from solver.spec.model import ModelSpec
from solver.spec.training import TrainingSpec


def load_gpu(name: str) -> GpuSpec:
    return gpu_spec_from_dict(get_entry("gpus", name))


def _model() -> ModelSpec:
    return ModelSpec(name="llama3-70b-like", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                     ffn_hidden_size=28672, vocab_size=128256, seq_length=8192, mlp_activation="swiglu")


def test_catalog_rates_follow_the_sfu_count() -> None:
    # 16 MUFU.EX2 per clock per SM: H100 SXM5 at 132 SMs x 1.83 GHz is FlashAttention-3's 3.9 TFLOPS.
    assert load_gpu("h100-sxm5-80gb").exp_per_s == pytest.approx(3.9e12, rel=0.01)
    # Blackwell Ultra: twice the per-SM rate on 160 SMs.
    gb200, gb300 = load_gpu("gb200-186gb"), load_gpu("gb300-288gb")
    # Equal bf16 peaks, so equal SMs x clock: the ratio is the per-SM rate's, 2.
    assert gb300.exp_per_s / gb200.exp_per_s == pytest.approx(2.0, rel=0.01)
    assert load_gpu("mi300x").exp_per_s is None


def test_exponential_term_is_count_over_rate() -> None:
    gpu = load_gpu("gb200-186gb")
    assert flash_exponential_s(gpu, 1e12) == pytest.approx(1e12 / gpu.exp_per_s)
    assert flash_exponential_s(dataclasses.replace(gpu, exp_per_s=None), 1e12) == 0.0


def test_blackwell_ultra_attention_is_faster_at_equal_tensor_peak() -> None:
    model, training = _model(), TrainingSpec(global_batch_size=256, seq_length=8192, flash_attention=True)
    gb200, gb300 = load_gpu("gb200-186gb"), load_gpu("gb300-288gb")
    # Same num_sms, so only the SFU rate differs.
    gb300_same_sms = dataclasses.replace(gb300, num_sms=gb200.num_sms)
    heads, s = 2 * 64, 8192
    forward_200, backward_200, _ = _attention_core_s(model, gb200, training, heads, s, FUSED)
    forward_300, backward_300, _ = _attention_core_s(model, gb300_same_sms, training, heads, s, FUSED)
    scores = 0.5 * heads * s * s  # causal: half the s x s block
    assert forward_200 - forward_300 == pytest.approx(scores / gb200.exp_per_s - scores / gb300.exp_per_s, rel=1e-9)
    assert backward_200 - backward_300 == pytest.approx(forward_200 - forward_300, rel=1e-9)
    # Without an SFU rate the kernel costs its GEMMs alone.
    plain, _, _ = _attention_core_s(model, dataclasses.replace(gb200, exp_per_s=None), training, heads, s, FUSED)
    assert forward_200 - plain == pytest.approx(scores / gb200.exp_per_s, rel=1e-9)

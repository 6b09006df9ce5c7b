"""Squared-ReLU MLPs (Nemotron): the spec, the parameter counts against published and config
figures, and the cost model's FLOPs, times and kept bytes against a GELU MLP of the same shape."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from solver.cost.analytic import analytic_profile
from solver.cost.flops import (
    embedding_parameter_count,
    hardware_flops_per_iteration,
    head_parameter_count,
    layer_parameter_count,
    layer_parameter_tensor_count,
    model_flops_per_iteration,
    total_parameter_count,
)
from solver.cost.profile import ProfileShape
from solver.spec.errors import SpecError
from solver.spec.model import MlpActivation, ModelSpec
from solver.spec.training import Precision, Recompute, TrainingSpec

# NeMo-Framework-Launcher conf/training/nemotron/nemotron_15b.yaml (tag 24.07): 32 layers, hidden
# 6144, FFN 24576, 48 heads, 8 query groups, squared ReLU, no biases, untied, rotary; vocabulary
# 256,000 (Nemotron-4 15B report, arXiv 2402.16819 Sec 2).
NEMOTRON4_15B = ModelSpec(
    "nemotron4-15b", num_layers=32, hidden_size=6144, num_attention_heads=48, num_kv_heads=8, ffn_hidden_size=24576,
    vocab_size=256000, seq_length=4096, mlp_activation="squared_relu", tied_embeddings=False, position_embedding="none",
)


def _count_from_config(layers: int, hidden: int, ffn: int, vocab: int) -> int:
    """Parameters of a NeMo Nemotron config (multi-head attention, bias false, layernorm1p, untied
    embeddings, rotary), counted tensor by tensor as megatron-core builds the model:
    linear_qkv 3h x h, linear_proj h x h, linear_fc1 ffn x h, linear_fc2 h x ffn, two
    LayerNorms of weight and bias per layer, the final LayerNorm, the embedding and the output
    layer V x h each."""
    qkv, proj = 3 * hidden * hidden, hidden * hidden
    fc1, fc2 = ffn * hidden, hidden * ffn
    norms = 2 * (hidden + hidden)
    return layers * (qkv + proj + fc1 + fc2 + norms) + (hidden + hidden) + 2 * vocab * hidden


@pytest.mark.parametrize(("name", "layers", "hidden", "ffn"), [("nemotron3-8b", 32, 4096, 16384), ("nemotron3-22b", 40, 6144, 24576)])
def test_catalog_nemotron_counts_are_the_configs(name, layers, hidden, ffn):
    model = catalog.get_model(name)
    assert model.mlp_activation is MlpActivation.SQUARED_RELU
    assert (model.num_layers, model.hidden_size, model.ffn_hidden_size, model.vocab_size) == (layers, hidden, ffn, 256000)
    assert (model.num_kv_heads, model.tied_embeddings, model.seq_length) == (model.num_attention_heads, False, 4096)
    assert total_parameter_count(model) == _count_from_config(layers, hidden, ffn, 256000)


def test_catalog_nemotron_totals():
    # 8.54B ("8 billion parameters", the Nemotron-3 8B model card) and 21.27B (NeMo's "22B").
    assert total_parameter_count(catalog.get_model("nemotron3-8b")) == 8_540_135_424
    assert total_parameter_count(catalog.get_model("nemotron3-22b")) == 21_266_116_608


def test_nemotron4_15b_non_embedding_parameters_are_the_reports():
    # Nemotron-4 15B report (arXiv 2402.16819) Sec 2: "12.5 billion non-embedding parameters".
    non_embedding = total_parameter_count(NEMOTRON4_15B) - embedding_parameter_count(NEMOTRON4_15B) - 256000 * 6144
    assert non_embedding == 12_483_047_424
    assert round(non_embedding / 1e9, 1) == 12.5


def test_squared_relu_layers_have_no_biases_and_layernorms():
    gelu = ModelSpec("g", 4, 512, 8, 1000, 256, mlp_activation="gelu")
    relu2 = dataclasses.replace(gelu, mlp_activation=MlpActivation.SQUARED_RELU)
    swiglu = dataclasses.replace(gelu, mlp_activation=MlpActivation.SWIGLU)
    h, f = 512, 2048
    assert (relu2.linear_biases, relu2.norm_biases, relu2.mlp_gemm_count) == (False, True, 2)
    # GELU: 12h^2 + 13h; squared ReLU: the same weights, no biases (-9h), two LayerNorms kept (4h).
    assert layer_parameter_count(gelu) == 12 * h * h + 13 * h
    assert layer_parameter_count(relu2) == 4 * h * h + 2 * h * f + 4 * h
    assert layer_parameter_count(swiglu) == 4 * h * h + 3 * h * f + 2 * h
    # Tensors: QKV, proj, fc1, fc2 and two LayerNorms of weight and bias.
    assert (layer_parameter_tensor_count(gelu), layer_parameter_tensor_count(relu2), layer_parameter_tensor_count(swiglu)) == (12, 8, 7)
    assert head_parameter_count(relu2) == 2 * h  # tied: the final LayerNorm's weight and bias


def test_an_unknown_activation_is_refused():
    with pytest.raises(SpecError) as error:
        ModelSpec("m", 4, 512, 8, 1000, 256, mlp_activation="relu2")
    assert error.value.field == "model.mlp_activation"
    assert error.value.reason == "must be one of gelu, swiglu, squared_relu, got 'relu2'"


NEMOTRON_8B = catalog.get_model("nemotron3-8b")
GELU_TWIN = dataclasses.replace(NEMOTRON_8B, name="gelu-twin", mlp_activation=MlpActivation.GELU)


@pytest.mark.parametrize("recompute", list(Recompute))
def test_squared_relu_flops_are_gelus_for_the_same_shape(recompute):
    assert model_flops_per_iteration(NEMOTRON_8B, 4, 4096) == model_flops_per_iteration(GELU_TWIN, 4, 4096)
    assert hardware_flops_per_iteration(NEMOTRON_8B, 4, 4096, recompute) == hardware_flops_per_iteration(GELU_TWIN, 4, 4096, recompute)
    # Megatron's 72 L h^2 (1 + s/6h + V/12hL) per sample of s tokens (Korthikanti et al. 2022 eq. 7).
    L, h, s, V = 32, 4096, 4096, 256000
    assert model_flops_per_iteration(NEMOTRON_8B, 1, s) == pytest.approx(72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L)), rel=1e-12)


@pytest.mark.parametrize("precision", [Precision.BF16, Precision.FP8])
@pytest.mark.parametrize("shape", [ProfileShape(2, 4, True), ProfileShape(1, 1, False)])
def test_squared_relu_layer_costs_and_keeps_what_gelu_does(precision, shape):
    cluster = catalog.get_cluster("dgx-h100-x8")
    training = TrainingSpec(global_batch_size=256, seq_length=4096, precision=precision)
    relu2 = analytic_profile(NEMOTRON_8B, cluster, training, shape).transformer_layers[0]
    gelu = analytic_profile(GELU_TWIN, cluster, training, shape).transformer_layers[0]
    for field in ("forward_s", "backward_s", "activation_bytes", "selective_activation_bytes", "checkpoint_bytes",
                  "output_bytes", "selective_recompute_s", "tp_comm_s", "model_flops"):
        assert getattr(relu2, field) == getattr(gelu, field), field
    # Only the parameters differ: GELU's biases (QKV 3h, proj h, fc1 ffn, fc2 h) are not there.
    h, f, t = 4096, 16384, shape.tp_size
    assert gelu.parameter_count - relu2.parameter_count == (5 * h + f) // t

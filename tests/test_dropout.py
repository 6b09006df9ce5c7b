"""Dropout as a model fact (``ModelSpec.hidden_dropout``, ``attention_dropout``): a model trained
without it keeps no dropout masks (ATen's ``dropout`` returns its input for p == 0,
aten/src/ATen/native/Dropout.cpp), except the hidden masks of a TorchScript bias-dropout-add
(``TrainingSpec.jit_dropout_masks``), and the catalog, the API and the exports carry it. The
dropout kernels' time is still charged at p = 0 (docs/cost_model.md, "Dropout")."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

import catalog
from conftest import assert_problem, error_fields
from solver.cost.analytic import _kept_bytes, analytic_profile, backward_working_bytes
from solver.cost.profile import LayerKind, ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import TrainingSpec, ZeroStage

# GPT-3 13B's shape (Brown et al. 2020 Table 2.1), with and without dropout.
WITH = ModelSpec("gpt-13b", num_layers=40, hidden_size=5120, num_attention_heads=40, vocab_size=50257, seq_length=2048)
WITHOUT = dataclasses.replace(WITH, hidden_dropout=0.0, attention_dropout=0.0)
B, S, T = 2, 2048, 4  # micro-batch, sequence, tensor-parallel size


def test_the_defaults_are_megatron_lms_and_a_probability_is_checked():
    assert (WITH.hidden_dropout, WITH.attention_dropout) == (0.1, 0.1)
    for field in ("hidden_dropout", "attention_dropout"):
        for bad in (-0.1, 1.0, 1.5, float("nan"), True, "0.1"):
            with pytest.raises(SpecError) as error:
                dataclasses.replace(WITH, **{field: bad})
            assert error.value.field == f"model.{field}"
        assert getattr(dataclasses.replace(WITH, **{field: 0}), field) == 0.0


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_kept_bytes_differ_by_exactly_the_masks(sequence_parallel):
    """Korthikanti et al. 2022 Table 2 per layer, s b h (34 + 5 a s / h): the two hidden dropout
    masks are 2 s b h bytes (/t with sequence parallelism); the attention dropout's mask and
    output 3 a s^2 b (/t), leaving the softmax output's 2 a s^2 b."""
    shape = ProfileShape(tp_size=T, micro_batch_size=B, sequence_parallel=sequence_parallel)
    h, a = WITH.hidden_size, WITH.num_attention_heads
    masks = 2 * 1 * B * S * h / (T if sequence_parallel else 1)
    score_mask_and_output = (1 + 2) * a * S * S * B / T
    full_with, selective_with, checkpoint_with = _kept_bytes(WITH, shape, S, flash=False)
    full_without, selective_without, checkpoint_without = _kept_bytes(WITHOUT, shape, S, flash=False)
    assert full_with - full_without == pytest.approx(masks + score_mask_and_output, abs=1)
    assert selective_with - selective_without == pytest.approx(masks, abs=1)  # the scores are recomputed
    assert checkpoint_with == checkpoint_without
    # Fused attention keeps no scores, with dropout or without: the masks alone.
    assert _kept_bytes(WITH, shape, S, flash=True)[0] - _kept_bytes(WITHOUT, shape, S, flash=True)[0] == pytest.approx(masks, abs=1)


def test_the_score_term_is_five_bytes_per_score_with_dropout_and_two_without():
    shape = ProfileShape(tp_size=T, micro_batch_size=B)
    a = WITH.num_attention_heads
    scores = a * S * S * B / T  # score elements per rank
    flash_with, flash_without = _kept_bytes(WITH, shape, S, flash=True)[0], _kept_bytes(WITHOUT, shape, S, flash=True)[0]
    assert _kept_bytes(WITH, shape, S, flash=False)[0] - flash_with == pytest.approx(5 * scores, abs=1)
    assert _kept_bytes(WITHOUT, shape, S, flash=False)[0] - flash_without == pytest.approx(2 * scores, abs=1)
    only_hidden = dataclasses.replace(WITH, attention_dropout=0.0)
    assert _kept_bytes(only_hidden, shape, S, flash=False)[0] - _kept_bytes(only_hidden, shape, S, flash=True)[0] == pytest.approx(
        2 * scores, abs=1)
    # At the attention core's backward: with dropout its freed output makes room for one of the two
    # score gradients (5 - 2 + 2 x 2 = 7 bytes per score); without, both sit beside the softmax
    # output (2 + 2 x 2 = 6).
    heads = 2 * B * S * WITH.hidden_size / T
    residual = 2 * B * S * WITH.hidden_size
    assert backward_working_bytes(WITH, shape, S, flash=False) == int(residual + heads + 2 * scores)
    assert backward_working_bytes(WITHOUT, shape, S, flash=False) == int(residual + heads + 4 * scores)


def test_the_embedding_keeps_no_mask_without_dropout():
    cluster = catalog.get_cluster("dgx-a100-80gb-x1")
    training = TrainingSpec(global_batch_size=512, seq_length=S)
    shape = ProfileShape(tp_size=T, micro_batch_size=B)
    embedding_with = analytic_profile(WITH, cluster, training, shape).layers[0]
    embedding_without = analytic_profile(WITHOUT, cluster, training, shape).layers[0]
    assert embedding_with.kind is LayerKind.EMBEDDING
    assert embedding_with.activation_bytes == B * S * WITH.hidden_size  # a 1-byte mask per element
    assert embedding_without.activation_bytes == 0
    # The embedding's dropout is an eager nn.Dropout on every stack: no mask at p = 0 even where
    # the layers' bias-dropout-add is TorchScript.
    jit = TrainingSpec(global_batch_size=512, seq_length=S, jit_dropout_masks=True)
    assert analytic_profile(WITHOUT, cluster, jit, shape).layers[0].activation_bytes == 0


def test_a_layer_without_dropout_keeps_less():
    cluster = catalog.get_cluster("dgx-a100-80gb-x1")
    shape = ProfileShape(tp_size=T, micro_batch_size=B)
    masks = 2 * B * S * WITH.hidden_size  # the two hidden dropouts' 1-byte masks
    scores = (1 + 2) * WITH.num_attention_heads * S * S * B / T  # the attention dropout's mask and output
    for flash in (True, False):
        training = TrainingSpec(global_batch_size=512, seq_length=S, flash_attention=flash)
        layer_with = analytic_profile(WITH, cluster, training, shape).transformer_layers[0]
        layer_without = analytic_profile(WITHOUT, cluster, training, shape).transformer_layers[0]
        assert layer_with.activation_bytes - layer_without.activation_bytes == pytest.approx(masks + (0 if flash else scores), abs=1)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_a_torchscript_bias_dropout_add_keeps_its_masks_at_zero(sequence_parallel):
    """TorchScript's autodiff formula for dropout keeps its mask with no p == 0 shortcut, so a
    stack whose bias-dropout-add is TorchScript keeps the two hidden masks (2 s b h bytes, /t
    under sequence parallelism) for a model without dropout; the attention dropout (eager
    nn.Dropout in that code) keeps nothing."""
    shape = ProfileShape(tp_size=T, micro_batch_size=B, sequence_parallel=sequence_parallel)
    masks = 2 * B * S * WITH.hidden_size / (T if sequence_parallel else 1)
    for flash in (True, False):
        plain = _kept_bytes(WITHOUT, shape, S, flash)
        jit = _kept_bytes(WITHOUT, shape, S, flash, jit_dropout_masks=True)
        assert jit[0] - plain[0] == pytest.approx(masks, abs=1) and jit[1] - plain[1] == pytest.approx(masks, abs=1)
        assert jit[2] == plain[2]
        # With dropout the masks are kept either way.
        assert _kept_bytes(WITH, shape, S, flash, jit_dropout_masks=True) == _kept_bytes(WITH, shape, S, flash)


def test_the_stacks_state_whether_their_bias_dropout_add_is_torchscript():
    torchscript = {"megatron-lm-2021", "megatron-deepspeed-2022", "deepspeed-zero3-2021"}
    for entry in catalog.list_entries("stacks"):
        facts = catalog.get_stack_facts(entry["name"])
        assert facts["jit_dropout_masks"] is (entry["name"] in torchscript), entry["name"]
        source = entry["sources"]["jit_dropout_masks"]
        assert ("@torch.jit.script" in source) is (entry["name"] in torchscript), entry["name"]
    assert "torch.compile" in catalog.get_entry("stacks", "megatron-core-2024")["sources"]["jit_dropout_masks"]


def test_catalog_models_state_their_dropout_with_its_source():
    llama = catalog.get_model("llama3-8b")
    assert (llama.hidden_dropout, llama.attention_dropout) == (0.0, 0.0)
    gpt3 = catalog.get_model("gpt3-175b")
    assert (gpt3.hidden_dropout, gpt3.attention_dropout) == (0.1, 0.1)
    entries = {entry["name"]: entry for entry in catalog.list_entries("models")}
    assert "dropout 0.1" in entries["gpt3-175b"]["source"] and "resid_pdrop" in entries["gpt3-175b"]["source"]
    assert "no dropout" in entries["llama3-8b"]["source"]
    assert '"hidden-dropout": 0' in entries["gpt-neox-20b"]["source"]
    for name in ("deepseek-v3", "mixtral-8x7b", "mpt-7b", "nemotron3-8b", "gpt-neox-20b"):
        assert catalog.get_model(name).hidden_dropout == 0.0 == catalog.get_model(name).attention_dropout, name
    for name in ("bert-large", "gpt2-xl", "nemo-gpt3-5b", "megatron-22b", "bloom-176b"):
        assert catalog.get_model(name).hidden_dropout == 0.1 == catalog.get_model(name).attention_dropout, name
    for entry in entries.values():
        assert "hidden_dropout" in entry and "attention_dropout" in entry and "dropout" in entry["source"], entry["name"]


PLAN = PlanToExport(
    dataclasses.replace(WITHOUT, attention_dropout=0.05), TrainingSpec(global_batch_size=512, seq_length=S),
    ParallelConfig(dp_size=2, tp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=2), 8,
)


def _file(export, name):
    return next(f for f in export.files if f.name == name)


def test_exports_carry_the_models_dropout():
    megatron = _file(export_plan(PLAN, ExportFormat.MEGATRON), "pretrain_gpt.sh").text
    assert "--hidden-dropout 0.0" in megatron and "--attention-dropout 0.05" in megatron
    deepspeed = _file(export_plan(PLAN, ExportFormat.DEEPSPEED), "launch.sh").text
    assert "--hidden-dropout 0.0" in deepspeed and "--attention-dropout 0.05" in deepspeed
    nemo = yaml.safe_load(_file(export_plan(PLAN, ExportFormat.NEMO), "nemo_overrides.yaml").text)["model"]
    assert (nemo["hidden_dropout"], nemo["attention_dropout"]) == (0.0, 0.05)
    notes = export_plan(PLAN, ExportFormat.TORCHTITAN).notes
    assert any("no dropout" in note and "attention_dropout 0.05" in note for note in notes)
    without = dataclasses.replace(PLAN, model=WITHOUT)
    assert not any("dropout" in note for note in export_plan(without, ExportFormat.TORCHTITAN).notes)


def _evaluation(**model):
    spec = {
        "name": "gpt-13b-inline", "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
        "vocab_size": 50257, "seq_length": 2048,
    } | model
    return {
        "model": spec, "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
        "training": {"global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "optimizer": "adam"},
        "parallel": {"dp_size": 1, "tp_size": 8, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1,
                     "recompute": "selective", "sequence_parallel": True},
    }


@pytest.mark.parametrize("bad", [1.0, -0.5, "0.1", True])
@pytest.mark.parametrize("field", ["hidden_dropout", "attention_dropout"])
def test_the_api_refuses_a_dropout_that_is_not_a_probability(api, field, bad):
    problem = assert_problem(api.post("/v1/evaluations", json=_evaluation(**{field: bad})), 422)
    assert f"body.model.{field}" in error_fields(problem), problem


def test_the_api_costs_a_model_without_dropout_as_the_solver_does(api):
    default = api.post("/v1/evaluations", json=_evaluation())
    explicit = api.post("/v1/evaluations", json=_evaluation(hidden_dropout=0.1, attention_dropout=0.1))
    without = api.post("/v1/evaluations", json=_evaluation(hidden_dropout=0, attention_dropout=0.0))
    for response in (default, explicit, without):
        assert response.status_code == 200, response.text
    assert explicit.json()["memory"]["peak_gib"] == default.json()["memory"]["peak_gib"]
    assert without.json()["memory"]["peak_gib"] < default.json()["memory"]["peak_gib"]

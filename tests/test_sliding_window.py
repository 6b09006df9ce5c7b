"""Sliding-window (local) attention: ``ModelSpec.sliding_window`` and ``sliding_window_fraction``.

A causal fused kernel computes the score blocks under the diagonal (half of s x s); with a window
of w tokens each query meets min(i, w) keys, sum w/s - w(w - 1)/(2 s^2) of the s x s scores, in the
share of layers that use the window (gpt-oss and Gemma 2: every other layer; Gemma 3: five of
six). The attention core's time follows that share; weights, memory and the model-FLOPs convention
(full s^2 attention, as Narayanan et al. and Korthikanti et al. count it) do not move."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from megatron.core.transformer.transformer_config import TransformerConfig
from test_export_frameworks import _file, script_arguments

import catalog
from catalog.hf_config import from_hf_config
from conftest import assert_problem, node_cluster
from solver.cost.analytic import FUSED, _attention_core_s, analytic_layers
from solver.cost.profile import ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
OSS = catalog.model_spec_from_dict(from_hf_config(json.loads((CONFIGS / "gpt-oss-120b.json").read_text()), name="gpt-oss-120b").fields)
TRAINING = TrainingSpec(global_batch_size=1280, seq_length=4096)



def test_the_computed_share_of_scores_follows_the_window_and_its_layers():
    full = dataclasses.replace(OSS, sliding_window=0)
    assert full.causal_score_fraction(4096) == 0.5
    local = 128 / 4096 - 128 * 127 / (2 * 4096**2)
    assert OSS.causal_score_fraction(4096) == pytest.approx(0.5 * local + 0.5 * 0.5)
    every_layer = dataclasses.replace(OSS, sliding_window_fraction=1.0)
    assert every_layer.causal_score_fraction(4096) == pytest.approx(local)
    assert OSS.causal_score_fraction(128) == 0.5  # a window as long as the sequence is full attention
    assert catalog.get_model("bert-large").causal_score_fraction(512) == 1.0


def test_the_attention_core_takes_that_share_of_its_full_time():
    gpu = node_cluster("dgx-h100", 8).gpu
    full = dataclasses.replace(OSS, sliding_window=0)
    windowed = _attention_core_s(OSS, gpu, TRAINING, 64.0, 4096, FUSED)
    whole = _attention_core_s(full, gpu, TRAINING, 64.0, 4096, FUSED)
    share = OSS.causal_score_fraction(4096) / 0.5
    assert windowed[0] == pytest.approx(share * whole[0]) and windowed[1] == pytest.approx(share * whole[1])
    shape = ProfileShape(tp_size=1, micro_batch_size=1, sequence_parallel=False)
    cluster = node_cluster("dgx-h100", 8)
    windowed_layer = analytic_layers(OSS, cluster, TRAINING, shape).transformer_layers[0]
    full_layer = analytic_layers(full, cluster, TRAINING, shape).transformer_layers[0]
    assert windowed_layer.forward_s < full_layer.forward_s
    assert (windowed_layer.parameter_count, windowed_layer.activation_bytes) == (full_layer.parameter_count, full_layer.activation_bytes)
    assert windowed_layer.model_flops == full_layer.model_flops


@pytest.mark.parametrize(
    ("change", "field"),
    [({"sliding_window": -1}, "model.sliding_window"), ({"sliding_window_fraction": 0.0}, "model.sliding_window_fraction"),
     ({"sliding_window_fraction": 1.5}, "model.sliding_window_fraction")],
)
def test_a_bad_window_names_its_field(change, field):
    with pytest.raises(SpecError) as caught:
        dataclasses.replace(OSS, **change)
    assert caught.value.field == field
    with pytest.raises(SpecError, match="causal decoder"):
        dataclasses.replace(catalog.get_model("bert-large"), sliding_window=128)


def test_configs_give_the_window_and_its_share_of_layers():
    oss = json.loads((CONFIGS / "gpt-oss-120b.json").read_text())
    assert (OSS.sliding_window, OSS.sliding_window_fraction) == (128, 0.5)
    listed = from_hf_config({**oss, "layer_types": ["sliding_attention", "full_attention"] * 18}, name="o").fields
    assert listed["sliding_window_fraction"] == 0.5
    gemma = json.loads((CONFIGS / "gemma2-9b.json").read_text())
    gemma3 = from_hf_config({"model_type": "gemma3", "text_config": {**gemma, "model_type": "gemma3_text", "sliding_window_pattern": 6}}, name="g").fields
    assert (gemma3["sliding_window"], gemma3["sliding_window_fraction"]) == (4096, pytest.approx(5 / 6))
    with pytest.raises(SpecError) as caught:
        from_hf_config({**oss, "layer_types": ["global"] * 36}, name="o")
    assert caught.value.field == "config.layer_types"


def test_megatron_and_nemo_write_the_window_the_others_say_they_do_not():
    plan = PlanToExport(OSS, TRAINING, ParallelConfig(
        dp_size=64, tp_size=1, pp_size=1, zero_stage=ZeroStage.OS, micro_batch_size=4, recompute=Recompute.NONE, ep_size=64), 8)
    _, flags = script_arguments(_file(export_plan(plan, ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    # Megatron-LM's tuple_type reads "128,0" as (128, 0); an integer skip frequency N puts one full
    # layer after N - 1 windowed ones (megatron/training/arguments.py).
    window = tuple(int(i) for i in flags["--window-size"].strip("()").split(","))
    config = TransformerConfig(num_layers=36, hidden_size=2880, num_attention_heads=64, kv_channels=int(flags["--kv-channels"]),
                               window_size=window, window_attn_skip_freq=int(flags["--window-attn-skip-freq"]))
    assert (config.window_size, config.window_attn_skip_freq) == ((128, 0), 2)
    nemo = _file(export_plan(plan, ExportFormat.NEMO), "nemo_overrides.yaml").text.splitlines()
    assert "  window_size: [128, 0]" in nemo and "  window_attn_skip_freq: 2" in nemo
    for form in (ExportFormat.DEEPSPEED, ExportFormat.TORCHTITAN):
        assert any("no sliding-window attention" in note for note in export_plan(plan, form).notes), form


def test_the_api_takes_the_window_inline_and_names_a_bad_share(api):
    model = from_hf_config(json.loads((CONFIGS / "gpt-oss-120b.json").read_text()), name="oss").fields
    body = {
        "model": model, "cluster": "dgx-h100-x8", "training": {"global_batch_size": 1280, "seq_length": 4096},
        "parallel": {"dp_size": 64, "tp_size": 1, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "full", "ep_size": 8},
    }
    windowed = api.post("/v1/evaluations", json=body)
    full = api.post("/v1/evaluations", json={**body, "model": {**model, "sliding_window": 0}})
    assert windowed.status_code == 200, windowed.text
    assert windowed.json()["prediction"]["step_time_s"] < full.json()["prediction"]["step_time_s"]
    problem = assert_problem(api.post("/v1/evaluations", json={**body, "model": {**model, "sliding_window_fraction": 0}}), 422)
    assert problem["errors"][0]["field"] == "body.model.sliding_window_fraction"

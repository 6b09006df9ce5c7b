"""DeepSeek-V3's low-precision storage (arXiv 2412.19437 Sec 3.3.3) through HTTP and the launch
configs: ``training.moments_dtype`` and ``training.moe_act_input_dtype`` are request fields (a bad
value is a 422 naming the field) that evaluate as the solver does; Megatron-LM's export writes
megatron-core's precision-aware optimizer (``--use-precision-aware-optimizer --exp-avg-dtype bf16
--exp-avg-sq-dtype bf16``, read back by megatron-core's ``OptimizerConfig``) where megatron-core
runs it, and every export names what its framework keeps otherwise."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch
from test_export_frameworks import _file, script_arguments

import catalog
from conftest import assert_problem, error_fields
from solver.cost.evaluate import evaluate
from solver.cost.memory import GIB_BYTES
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.parallel import ParallelConfig
from solver.spec.training import ActInputDtype, MomentsDtype, Recompute, TrainingSpec, ZeroStage

DEEPSEEK = catalog.get_model("deepseek-v3")
MIXTRAL = catalog.get_model("mixtral-8x7b")
MEGATRON_CORE = catalog.get_stack_facts("megatron-core-2024")


# --------------------------------------------------------------------------- API
def _body(**training) -> dict:
    return {
        "model": "mixtral-8x7b", "cluster": "dgx-h100-x8", "num_gpus": 16,
        "training": {"global_batch_size": 256, "seq_length": 4096, "stack": "megatron-core-2024", "precision": "fp8", **training},
        "parallel": {"dp_size": 8, "tp_size": 2, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "selective",
                     "sequence_parallel": True, "ep_size": 8},
    }


def test_the_api_takes_both_facts_and_evaluates_as_the_solver(api):
    default = api.post("/v1/evaluations", json=_body())
    low = api.post("/v1/evaluations", json=_body(moments_dtype="bf16", moe_act_input_dtype="fp8"))
    assert default.status_code == low.status_code == 200, low.text
    before, after = default.json()["memory"]["breakdown_gib"], low.json()["memory"]["breakdown_gib"]
    assert after["optimizer_states"] == pytest.approx(before["optimizer_states"] * 8 / 12, rel=1e-9)
    assert after["activations"] < before["activations"]
    training = TrainingSpec(256, 4096, precision="fp8", moments_dtype="bf16", moe_act_input_dtype="fp8", **MEGATRON_CORE)
    parallel = ParallelConfig(dp_size=8, tp_size=2, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.SELECTIVE,
                              sequence_parallel=True, ep_size=8)
    expected = evaluate(MIXTRAL, catalog.get_cluster("dgx-h100-x8"), training, parallel, num_gpus=16)
    assert low.json()["memory"]["peak_gib"] == pytest.approx(expected.peak_bytes / GIB_BYTES, rel=1e-12)


@pytest.mark.parametrize("field, value", [("moments_dtype", "fp16"), ("moments_dtype", 2), ("moe_act_input_dtype", "fp4")])
def test_a_bad_value_is_a_422_naming_the_field(api, field, value):
    response = api.post("/v1/evaluations", json=_body(**{field: value}))
    assert f"body.training.{field}" in error_fields(assert_problem(response, 422))


# --------------------------------------------------------------------------- exports


def _plan(model, training, **parallel) -> PlanToExport:
    layout = {"dp_size": 16, "tp_size": 1, "pp_size": 1, "zero_stage": ZeroStage.OS, "micro_batch_size": 1, "recompute": Recompute.FULL,
              "ep_size": 8, **parallel}
    return PlanToExport(model, training, ParallelConfig(**layout), 8)


LOW = TrainingSpec(256, 4096, precision="fp8", moments_dtype="bf16", moe_act_input_dtype="fp8")


def _fake_transformer_engine(monkeypatch):
    """megatron-core checks that Transformer Engine's FusedAdam takes the precision-aware arguments
    (optimizer_config.py ``__post_init__``); this CPU-only venv has no Transformer Engine."""
    import megatron.core.optimizer.optimizer_config as optimizer_config

    def fused_adam(params, master_weight_dtype=None, exp_avg_dtype=None, exp_avg_sq_dtype=None, use_decoupled_grad=False):
        raise NotImplementedError

    module = types.ModuleType("transformer_engine.pytorch.optimizers")
    module.FusedAdam = fused_adam  # type: ignore[attr-defined]
    for name in ("transformer_engine", "transformer_engine.pytorch"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch.optimizers", module)
    monkeypatch.setattr(optimizer_config, "is_te_min_version", lambda *args, **kwargs: True)


def test_megatron_writes_the_precision_aware_optimizer_and_megatron_core_reads_it(monkeypatch):
    from megatron.core.optimizer import OptimizerConfig

    _fake_transformer_engine(monkeypatch)
    export = export_plan(_plan(DEEPSEEK, LOW), ExportFormat.MEGATRON)
    assert [d.field for d in export.differences] == ["training.moe_act_input_dtype"]
    assert export.training.moments_dtype is MomentsDtype.BF16 and export.training.moe_act_input_dtype is ActInputDtype.HALF
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--exp-avg-dtype"] == flags["--exp-avg-sq-dtype"] == "bf16"
    dtypes = {"bf16": torch.bfloat16}  # Megatron-LM's validate_args maps the names to torch dtypes
    config = OptimizerConfig(
        optimizer="adam", use_distributed_optimizer="--use-distributed-optimizer" in flags,
        use_precision_aware_optimizer="--use-precision-aware-optimizer" in flags,
        exp_avg_dtype=dtypes[flags["--exp-avg-dtype"]], exp_avg_sq_dtype=dtypes[flags["--exp-avg-sq-dtype"]],
    )
    assert config.exp_avg_dtype == config.exp_avg_sq_dtype == torch.bfloat16


@pytest.mark.parametrize("training, parallel", [
    (LOW, {"zero_stage": ZeroStage.NONE}),  # no distributed optimizer
    (dataclasses.replace(LOW, optimizer="sgd"), {}),  # not Adam
])
def test_megatron_names_bf16_moments_it_cannot_run_and_megatron_core_refuses_them(monkeypatch, training, parallel):
    from megatron.core.optimizer import OptimizerConfig

    _fake_transformer_engine(monkeypatch)
    export = export_plan(_plan(DEEPSEEK, training, **parallel), ExportFormat.MEGATRON)
    (moments,) = [d for d in export.differences if d.field == "training.moments_dtype"]
    assert (moments.planned, moments.exported) == ("bf16", "fp32") and "more optimizer memory" in moments.reason
    assert export.training.moments_dtype is MomentsDtype.FP32
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert "--exp-avg-dtype" not in flags and "--use-precision-aware-optimizer" not in flags
    with pytest.raises(AssertionError, match="precision-aware-optimizer only supported"):
        OptimizerConfig(optimizer=training.optimizer.value, use_distributed_optimizer="--use-distributed-optimizer" in flags,
                        use_precision_aware_optimizer=True, exp_avg_dtype=torch.bfloat16, exp_avg_sq_dtype=torch.bfloat16)


@pytest.mark.parametrize("framework", [ExportFormat.NEMO, ExportFormat.DEEPSPEED, ExportFormat.TORCHTITAN])
def test_the_other_frameworks_name_both_as_differences(framework):
    export = export_plan(_plan(MIXTRAL, LOW, zero_stage=ZeroStage.OS_G, tp_size=2, dp_size=8, sequence_parallel=True), framework)
    fields = [d.field for d in export.differences]
    assert "training.moments_dtype" in fields and "training.moe_act_input_dtype" in fields
    assert export.training.moments_dtype is MomentsDtype.FP32 and export.training.moe_act_input_dtype is ActInputDtype.HALF
    # A dense model keeps no expert activations: its FP8 setting differs from nothing.
    dense = export_plan(_plan(catalog.get_model("llama2-7b"), LOW, ep_size=1, zero_stage=ZeroStage.OS_G), framework)
    assert "training.moe_act_input_dtype" not in [d.field for d in dense.differences]

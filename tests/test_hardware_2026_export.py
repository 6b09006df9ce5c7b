"""Block-scaled precisions in the launch-config exports (issue 16): a plan in MXFP8 or NVFP4 is
written in each framework's own setting for it, read back by the framework's code as
tests/test_export_frameworks.py reads the others, or, where the framework has none, exported as
the nearest precision it runs with the difference named (never silently as bf16)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import yaml
from megatron.core.transformer.transformer_config import TransformerConfig
from test_export_frameworks import CORE_FIELDS, LLAMA, MEGATRON_LM_FLAGS, _file, script_arguments
from torchtitan.config import ConfigManager
from torchtitan.protocols.model_converter import _registry_model_converter_cls

from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Precision, TrainingSpec, ZeroStage

# Megatron-LM's FP4 flags (megatron/training/arguments.py: --fp4-format, dest fp4; --fp4-recipe),
# which are not megatron-core field names.
MEGATRON_LM_FP4_FLAGS = {"--fp4-format", "--fp4-recipe"}


def plan(precision: Precision) -> PlanToExport:
    training = TrainingSpec(global_batch_size=256, seq_length=4096, precision=precision)
    parallel = ParallelConfig(dp_size=4, tp_size=2, zero_stage=ZeroStage.OS, micro_batch_size=1, sequence_parallel=True)
    return PlanToExport(LLAMA, training, parallel, 8)


def megatron_core_config(flags: dict[str, str | None]) -> TransformerConfig:
    kwargs: dict = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "bf16": True,
                    "params_dtype": torch.bfloat16, "pipeline_dtype": torch.bfloat16}
    if "--fp8-format" in flags:
        kwargs.update(fp8=flags["--fp8-format"], fp8_recipe=flags["--fp8-recipe"])
    if "--fp4-format" in flags:
        kwargs.update(fp4=flags["--fp4-format"], fp4_recipe=flags["--fp4-recipe"])
    return TransformerConfig(**kwargs)


@pytest.mark.parametrize(("precision", "field", "value"), [(Precision.MXFP8, "fp8_recipe", "mxfp8"), (Precision.NVFP4, "fp4_recipe", "nvfp4")])
def test_megatron_runs_the_block_scaled_recipes_exactly(precision, field, value):
    export = export_plan(plan(precision), ExportFormat.MEGATRON)
    assert export.exact and not export.differences
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    unknown = {f for f in flags if f[2:].replace("-", "_") not in CORE_FIELDS} - MEGATRON_LM_FLAGS - MEGATRON_LM_FP4_FLAGS
    assert unknown == set()
    assert flags["--transformer-impl"] == "transformer_engine" and "--bf16" in flags
    assert getattr(megatron_core_config(flags), field) == value


@pytest.mark.parametrize("precision", [Precision.MXFP8, Precision.NVFP4])
def test_nemo_hands_the_recipe_to_megatron_core(precision):
    export = export_plan(plan(precision), ExportFormat.NEMO)
    assert export.exact
    model = yaml.safe_load(_file(export, "nemo_overrides.yaml").text)["model"]
    assert model["transformer_engine"] is True
    if precision is Precision.MXFP8:
        assert (model["fp8"], model["fp8_hybrid"], model["fp8_recipe"]) == (True, True, "mxfp8")
        config = megatron_core_config({"--fp8-format": "hybrid", "--fp8-recipe": model["fp8_recipe"]})
    else:
        assert (model["fp4"], model["fp4_recipe"]) == ("e2m1", "nvfp4") and "fp8" not in model
        config = megatron_core_config({"--fp4-format": model["fp4"], "--fp4-recipe": model["fp4_recipe"]})
    assert {"fp8_recipe", "fp4", "fp4_recipe"} <= CORE_FIELDS and config.bf16


@pytest.mark.parametrize("precision", [Precision.MXFP8, Precision.NVFP4])
def test_deepspeed_names_the_precision_it_cannot_run(precision):
    export = export_plan(plan(precision), ExportFormat.DEEPSPEED)
    difference = next(d for d in export.differences if d.field == "training.precision")
    assert (difference.planned, difference.exported) == (precision.value, "bf16")
    assert export.training.precision is Precision.BF16


def test_torchtitan_runs_mxfp8_and_exports_nvfp4_as_mxfp8(tmp_path):
    for precision in (Precision.MXFP8, Precision.NVFP4):
        export = export_plan(plan(precision), ExportFormat.TORCHTITAN)
        path = tmp_path / f"{precision.value}.toml"
        path.write_text(_file(export, "job.toml").text)
        job = ConfigManager().parse_args(["--job.config_file", str(path)])
        assert job.model.converters == ["quantize.linear.mx"]
        assert "quantize.linear.mx" in _registry_model_converter_cls
        assert job.quantize.linear.mx.recipe_name == "mxfp8_cublas"
        precisions = [d for d in export.differences if d.field == "training.precision"]
        if precision is Precision.MXFP8:
            assert precisions == [] and export.training.precision is Precision.MXFP8
        else:
            assert [(d.planned, d.exported) for d in precisions] == [("nvfp4", "mxfp8")]
            assert export.training.precision is Precision.MXFP8


def test_fp8_exports_are_unchanged():
    fp8 = plan(Precision.FP8)
    _, flags = script_arguments(_file(export_plan(fp8, ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--fp8-format"] == "hybrid" and "--fp8-recipe" not in flags
    nemo = yaml.safe_load(_file(export_plan(fp8, ExportFormat.NEMO), "nemo_overrides.yaml").text)["model"]
    assert "fp8_recipe" not in nemo
    bf16 = export_plan(replace(fp8, training=replace(fp8.training, precision=Precision.BF16)), ExportFormat.MEGATRON)
    assert "--fp8-format" not in script_arguments(_file(bf16, "pretrain_gpt.sh").text, "pretrain_gpt.py")[1]

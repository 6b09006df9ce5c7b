"""Launch-config exports (``solver.frameworks``), each read back by its framework's own code.

- Megatron: megatron-core's ``TransformerConfig`` (with ``ModelParallelConfig``: parallel sizes,
  the pipeline layout, recomputation, precision), its ``DistributedDataParallelConfig`` and its
  micro-batch calculator take the script's arguments. Megatron-LM's ``pretrain_gpt.py`` argument
  parser is not on PyPI (megatron-core ships no ``megatron.training``): flags that are not
  megatron-core fields are checked against the names in Megatron-LM's
  ``megatron/training/arguments.py`` (commit d98e8a64ddf3).
- DeepSpeed: ``DeepSpeedConfig`` parses ds_config.json (batch arithmetic checked against the
  data-parallel size, ZeRO keys validated by its pydantic models, which refuse unknown keys);
  DeepSpeed's own ``add_config_arguments`` parses its launcher flags, and the Megatron-DeepSpeed
  flags are checked against the names in microsoft/Megatron-DeepSpeed ``megatron/arguments.py``
  (commit f4157bea69f3), which is not on PyPI.
- torchtitan: its ``ConfigManager`` loads the job TOML into ``JobConfig`` (unknown keys refused),
  ``ParallelDims`` checks the degrees against the world size and torch's pipelining finds the
  schedule.
- NeMo: nemo-toolkit's Megatron GPT model does not install or build without a GPU stack; the
  YAML is parsed with PyYAML, its keys are checked against the names of NeMo's
  ``megatron_gpt_config.yaml`` (NVIDIA/NeMo commit 8cfedd720346), and the keys NeMo hands to
  megatron-core (every ``TransformerConfig`` field, recomputation mapped as NeMo maps it) are
  read by megatron-core's ``TransformerConfig``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import shlex
import tomllib
from typing import Any

import deepspeed
import deepspeed.runtime.config as deepspeed_config_module
import pytest
import torch
import yaml
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.utils import partition_balanced
from megatron.core.activations import squared_relu
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.model_parallel_config import ModelParallelConfig
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from megatron.core.transformer.enums import LayerType
from megatron.core.transformer.transformer_config import TransformerConfig
from torch.distributed.pipelining.schedules import get_schedule_class
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.protocols.model_converter import _registry_model_converter_cls

from solver.cost.flops import layer_weight_count
from solver.cost.memory import ZERO3_PREFETCHED_LAYERS
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.frameworks.deepspeed import pipeline_split
from solver.frameworks.export import full_recompute_counts
from solver.spec.model import MlpActivation, ModelSpec, PositionEmbedding
from solver.spec.parallel import ParallelConfig, micro_batch_count
from solver.spec.training import LossKernel, Precision, Recompute, RecomputeModule, TrainingSpec, ZeroStage

GPT = ModelSpec("gpt-24l", num_layers=24, hidden_size=2048, num_attention_heads=16, vocab_size=50257, seq_length=2048)
LLAMA = ModelSpec(
    "llama-32l", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
    vocab_size=128256, seq_length=8192, mlp_activation=MlpActivation.SWIGLU, tied_embeddings=False,
    position_embedding=PositionEmbedding.NONE,
)
# Nemotron-style layers (NeMo-Framework-Launcher nemotron_8b.yaml, halved): squared-ReLU MLP,
# no biases, LayerNorm, untied embeddings, rotary.
NEMOTRON = ModelSpec(
    "nemotron-16l", num_layers=16, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192, vocab_size=256000,
    seq_length=4096, mlp_activation=MlpActivation.SQUARED_RELU, tied_embeddings=False, position_embedding=PositionEmbedding.NONE,
)
GPT_TRAINING = TrainingSpec(global_batch_size=512, seq_length=2048)
NEMOTRON_TRAINING = TrainingSpec(global_batch_size=256, seq_length=4096)
LLAMA_FP8 = TrainingSpec(global_batch_size=256, seq_length=4096, precision=Precision.FP8)
LLAMA_LONG = TrainingSpec(global_batch_size=64, seq_length=16384)

# The plan shapes every export is tested on (8 GPUs per node).
SHAPES = {
    "pp1": PlanToExport(GPT, GPT_TRAINING, ParallelConfig(dp_size=8, zero_stage=ZeroStage.OS, micro_batch_size=4), 8),
    "uneven_stages": PlanToExport(GPT, GPT_TRAINING, ParallelConfig(
        dp_size=2, tp_size=2, pp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=2, recompute=Recompute.SELECTIVE,
        sequence_parallel=True, stage_layers=(5, 7, 7, 5)), 8),
    "interleaved": PlanToExport(LLAMA, LLAMA_FP8, ParallelConfig(
        dp_size=2, tp_size=4, pp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL,
        virtual_stages=2, sequence_parallel=True), 8),
    "zero3": PlanToExport(LLAMA, GPT_TRAINING, ParallelConfig(
        dp_size=16, zero_stage=ZeroStage.OS_G_P, micro_batch_size=2, recompute=Recompute.FULL), 8),
    "per_stage_recompute": PlanToExport(GPT, GPT_TRAINING, ParallelConfig(
        dp_size=2, tp_size=2, pp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=2, recompute=Recompute.FULL,
        sequence_parallel=True, full_recompute_layers=(4, 3, 2, 0)), 8),
    "block_recompute": PlanToExport(GPT, GPT_TRAINING, ParallelConfig(
        dp_size=2, tp_size=2, pp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=2, recompute=Recompute.FULL,
        sequence_parallel=True, full_recompute_layers=(3, 3, 3, 3)), 8),
    # 16K-token sequences split over 2 context-parallel ranks (16 GPUs).
    "context_parallel": PlanToExport(LLAMA, LLAMA_LONG, ParallelConfig(
        dp_size=2, tp_size=2, pp_size=2, cp_size=2, zero_stage=ZeroStage.OS, micro_batch_size=1,
        sequence_parallel=True), 8),
    # Megatron-FSDP (ZeRO-3) with TP, and the first 12 of 32 layers' activations in host memory
    # (as Megatron-Bridge's Llama 3 70B GB200/GB300 presets run: 16 GPUs).
    "fsdp_activation_offload": PlanToExport(LLAMA, GPT_TRAINING, ParallelConfig(
        dp_size=8, tp_size=2, zero_stage=ZeroStage.OS_G_P, micro_batch_size=1, sequence_parallel=True,
        activation_offload_layers=12), 8),
    # A squared-ReLU model with TP and sequence parallelism, as NeMo ran Nemotron 8B (tp 2).
    "squared_relu": PlanToExport(NEMOTRON, NEMOTRON_TRAINING, ParallelConfig(
        dp_size=4, tp_size=2, zero_stage=ZeroStage.OS, micro_batch_size=4, sequence_parallel=True), 8),
}

# What each framework changes of each shape (the fields named by the export's differences).
EXPECTED_DIFFERENCES = {
    ExportFormat.MEGATRON: {
        "pp1": [], "uneven_stages": [], "interleaved": [], "zero3": [],
        "per_stage_recompute": ["parallel.full_recompute_layers"], "block_recompute": [], "context_parallel": [],
        "fsdp_activation_offload": [], "squared_relu": [],
    },
    ExportFormat.DEEPSPEED: {
        "pp1": [],
        "uneven_stages": ["parallel.stage_layers", "training.overlap_grad_reduce"],
        "interleaved": ["parallel.virtual_stages", "training.overlap_grad_reduce", "training.precision"],
        "zero3": [],
        "per_stage_recompute": ["parallel.full_recompute_layers", "training.overlap_grad_reduce"],
        "block_recompute": ["parallel.full_recompute_layers", "training.overlap_grad_reduce"],
        "context_parallel": ["parallel.cp_size", "parallel.dp_size", "training.overlap_grad_reduce"],
        "fsdp_activation_offload": ["parallel.activation_offload_layers"],
        "squared_relu": [],
    },
    ExportFormat.TORCHTITAN: {
        "pp1": ["parallel.zero_stage"],
        "uneven_stages": ["parallel.zero_stage", "parallel.recompute"],
        "interleaved": ["parallel.zero_stage"],
        "zero3": [],
        "per_stage_recompute": ["parallel.zero_stage", "parallel.recompute"],
        "block_recompute": ["parallel.zero_stage", "parallel.recompute"],
        "context_parallel": ["parallel.zero_stage"],
        "fsdp_activation_offload": ["parallel.activation_offload_layers"],
        "squared_relu": ["parallel.zero_stage"],
    },
    ExportFormat.NEMO: {
        "pp1": [], "uneven_stages": [], "interleaved": [], "zero3": ["parallel.zero_stage"],
        "per_stage_recompute": ["parallel.full_recompute_layers"], "block_recompute": [], "context_parallel": [],
        "fsdp_activation_offload": ["parallel.zero_stage"], "squared_relu": [],
    },
}

# Megatron-LM flags that are not megatron-core TransformerConfig/ModelParallelConfig fields, by
# their names in megatron/training/arguments.py.
MEGATRON_LM_FLAGS = {
    "--num-layers-per-virtual-pipeline-stage", "--micro-batch-size", "--global-batch-size",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather", "--fp8-format",
    "--transformer-impl", "--group-query-attention", "--seq-length", "--max-position-embeddings",
    "--position-embedding-type", "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
    "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion", "--no-masked-softmax-fusion", "--no-bias-dropout-fusion",
    "--squared-relu",
    # Megatron-FSDP: DistributedInitConfig's use_megatron_fsdp, the sharding strategy's own flag,
    # TrainingConfig's ckpt_format, and gradient_accumulation_fusion's negative flag.
    "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--ckpt-format", "--no-gradient-accumulation-fusion",
}
# Megatron-DeepSpeed's pretrain_gpt.py flags (megatron/arguments.py); --deepspeed and
# --deepspeed_config are DeepSpeed's own (checked with its parser below).
MEGATRON_DEEPSPEED_FLAGS = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--no-pipeline-parallel", "--sequence-parallel",
    "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--deepspeed-activation-checkpointing", "--fp16", "--bf16", "--use-flash-attn-v2",
    "--no-bias-gelu-fusion", "--no-masked-softmax-fusion", "--no-bias-dropout-fusion", "--num-layers",
    "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-key-value-heads", "--seq-length",
    "--max-position-embeddings", "--use-rotary-position-embeddings", "--no-position-embedding", "--swiglu",
    "--normalization", "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--zero-stage", "--squared-relu",
    "--hidden-dropout", "--attention-dropout",
}
# The trainer and model keys of NeMo's megatron_gpt_config.yaml that the export writes.
NEMO_GPT_CONFIG_KEYS = {
    "trainer": {"devices", "num_nodes", "precision"},
    "model": {
        "micro_batch_size", "global_batch_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size", "sequence_parallel", "encoder_seq_length", "max_position_embeddings",
        "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
        "position_embedding_type", "share_embeddings_and_output_weights", "activation", "normalization", "bias",
        "activations_checkpoint_granularity", "activations_checkpoint_method", "activations_checkpoint_num_layers",
        "transformer_engine", "fp8", "fp8_hybrid", "use_flash_attention", "bias_activation_fusion",
        "bias_dropout_add_fusion", "masked_softmax_fusion", "optim",
    },
}
CORE_FIELDS = {f.name for f in dataclasses.fields(TransformerConfig)} | {f.name for f in dataclasses.fields(ModelParallelConfig)}


def _file(export, name):
    return next(f for f in export.files if f.name == name)


def script_arguments(text: str, program: str) -> tuple[list[str], dict[str, Any]]:
    """The launcher's tokens and the program's flags of a script: None for a switch, the value,
    or the list of values of a flag that takes several (argparse nargs)."""
    body = " ".join(line.rstrip("\\").strip() for line in text.splitlines() if line and not line.startswith(("#", "set ", "export ", "unset ")))
    tokens = shlex.split(body.replace("${EXTRA_ARGS:-}", ""))
    at = tokens.index(program)
    launcher, rest = tokens[:at], tokens[at + 1:]
    flags: dict[str, Any] = {}
    for i, token in enumerate(rest):
        if token.startswith("--"):
            values = list(itertools.takewhile(lambda t: not t.startswith("--"), rest[i + 1:]))
            flags[token] = None if not values else values[0] if len(values) == 1 else values
    return launcher, flags


def _launcher_value(launcher: list[str], flag: str) -> int:
    return int(launcher[launcher.index(flag) + 1])


@pytest.mark.parametrize("framework", list(ExportFormat))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_difference_is_named_and_exact_means_none(framework, shape):
    export = export_plan(SHAPES[shape], framework)
    assert [d.field for d in export.differences] == EXPECTED_DIFFERENCES[framework][shape]
    assert export.exact is (not export.differences)
    if export.exact:
        assert export.parallel == SHAPES[shape].parallel
    for difference in export.differences:
        assert difference.planned != difference.exported and difference.reason


# --------------------------------------------------------------------------- Megatron


def megatron_configs(export, plan: PlanToExport):
    """The script read into megatron-core's configs, as Megatron-LM maps its flags to them."""
    launcher, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    unknown = {f for f in flags if f[2:].replace("-", "_") not in CORE_FIELDS} - MEGATRON_LM_FLAGS
    assert unknown == set()
    num_gpus = _launcher_value(launcher, "--nnodes") * _launcher_value(launcher, "--nproc-per-node")
    kwargs: dict = {"params_dtype": torch.bfloat16, "pipeline_dtype": torch.bfloat16}
    for flag, value in flags.items():
        name = flag[2:].replace("-", "_")
        if name in CORE_FIELDS:
            field_type = {f.name: f.type for f in dataclasses.fields(TransformerConfig)}.get(name)
            if isinstance(value, list) or (name == "recompute_modules" and value is not None):  # nargs flags are lists
                kwargs[name] = value if isinstance(value, list) else [value]
            else:
                if value is not None and "float" in str(field_type) and "int" not in str(field_type):
                    kwargs[name] = float(value)  # the dropout probabilities
                else:
                    kwargs[name] = True if value is None else (int(value) if value.isdigit() and "int" in str(field_type) else value)
    if "--fp8-format" in flags:
        kwargs["fp8"] = flags["--fp8-format"]
    if "--swiglu" in flags:
        kwargs.update(gated_linear_unit=True, activation_func=torch.nn.functional.silu)
    if "--squared-relu" in flags:
        kwargs["activation_func"] = squared_relu
    if "--disable-bias-linear" in flags:
        kwargs["add_bias_linear"] = False
    # Megatron-LM's core_transformer_config_from_args: bias_activation_fusion is bias_swiglu_fusion
    # with --swiglu, else bias_gelu_fusion, which validate_args turns off without biases.
    if "--swiglu" in flags:
        kwargs["bias_activation_fusion"] = "--no-bias-swiglu-fusion" not in flags
    else:
        kwargs["bias_activation_fusion"] = "--no-bias-gelu-fusion" not in flags and "--disable-bias-linear" not in flags
    if "--no-gradient-accumulation-fusion" in flags:
        kwargs["gradient_accumulation_fusion"] = False
    if kwargs.get("cpu_offloading_num_layers", 0) > 0:
        kwargs["cpu_offloading"] = True  # Megatron-LM's validate_args: cpu_offloading has no flag of its own
    per_stage = flags.get("--num-layers-per-virtual-pipeline-stage")
    if per_stage is not None:
        chunks = plan.model.num_layers // int(per_stage)
        kwargs["virtual_pipeline_model_parallel_size"] = chunks // int(flags["--pipeline-model-parallel-size"])
    config = TransformerConfig(**kwargs)
    ddp = DistributedDataParallelConfig(
        use_distributed_optimizer="--use-distributed-optimizer" in flags,
        overlap_grad_reduce="--overlap-grad-reduce" in flags,
        overlap_param_gather="--overlap-param-gather" in flags,
        use_megatron_fsdp="--use-megatron-fsdp" in flags,
        data_parallel_sharding_strategy=flags.get("--data-parallel-sharding-strategy", "no_shard"),
    )
    # megatron-core's data-parallel size: the world over tp x pp x cp (parallel_state).
    model_parallel = config.tensor_model_parallel_size * config.pipeline_model_parallel_size * config.context_parallel_size
    dp_size = num_gpus // model_parallel
    batches = ConstantNumMicroBatchesCalculator(int(flags["--global-batch-size"]), int(flags["--micro-batch-size"]), dp_size, False, 0)
    return config, ddp, batches, dp_size


@pytest.mark.parametrize("shape", list(SHAPES))
def test_megatron_core_reads_the_megatron_export(shape):
    plan = SHAPES[shape]
    export = export_plan(plan, ExportFormat.MEGATRON)
    config, ddp, batches, dp_size = megatron_configs(export, plan)
    exported = export.parallel
    assert (dp_size, config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.context_parallel_size) == (
        exported.dp_size, exported.tp_size, exported.pp_size, exported.cp_size)
    assert batches.num_micro_batches == plan.num_micro_batches
    assert config.sequence_parallel is (exported.sequence_parallel and exported.tp_size > 1)
    # ZeRO-1: the distributed optimizer; ZeRO-2/3: Megatron-FSDP beside it.
    assert ddp.use_distributed_optimizer is (exported.zero_stage >= ZeroStage.OS)
    assert ddp.use_megatron_fsdp is (exported.zero_stage >= ZeroStage.OS_G)
    strategy = {ZeroStage.OS_G: "optim_grads", ZeroStage.OS_G_P: "optim_grads_params"}.get(exported.zero_stage, "no_shard")
    assert ddp.data_parallel_sharding_strategy == strategy
    assert (config.cpu_offloading, config.cpu_offloading_num_layers) == (
        exported.activation_offload_layers > 0, exported.activation_offload_layers)
    assert not config.cpu_offloading_weights  # activations only, as the cost model moves them
    chunks = plan.chunk_layers(exported)
    layout = config.pipeline_model_parallel_layout
    if layout is not None:  # megatron-core's own layout: layers of each rank's chunks
        pp = exported.pp_size
        built = [layout.layout[rank][vp].count(LayerType.decoder) for vp in range(exported.virtual_stages) for rank in range(pp)]
        assert tuple(built) == chunks
    else:
        assert len(set(chunks)) == 1
        assert (config.virtual_pipeline_model_parallel_size or 1) == exported.virtual_stages
    counts = full_recompute_counts(plan, exported)
    if config.recompute_method == "block":
        assert tuple(min(config.recompute_num_layers, n) for n in chunks) == counts
    elif config.recompute_method == "uniform":
        assert counts == chunks and config.recompute_num_layers == 1
    else:
        assert not any(counts)


def test_megatron_per_stage_recompute_becomes_the_largest_block():
    export = export_plan(SHAPES["per_stage_recompute"], ExportFormat.MEGATRON)
    (difference,) = export.differences
    assert (difference.planned, difference.exported) == ("[4, 3, 2, 0]", "[4, 4, 4, 4]")
    config, *_ = megatron_configs(export, SHAPES["per_stage_recompute"])
    assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == ("full", "block", 4)


def test_megatron_uneven_stages_are_a_layout_and_fp8_is_hybrid():
    export = export_plan(SHAPES["uneven_stages"], ExportFormat.MEGATRON)
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--pipeline-model-parallel-layout"] == "Et*5|t*7|t*7|t*5L"
    assert flags["--recompute-granularity"] == "selective"
    config, *_ = megatron_configs(export_plan(SHAPES["interleaved"], ExportFormat.MEGATRON), SHAPES["interleaved"])
    assert (config.fp8, config.virtual_pipeline_model_parallel_size, config.num_query_groups) == ("hybrid", 2, 8)


def test_megatron_runs_zero3_as_megatron_fsdp_with_activation_offload():
    plan = SHAPES["fsdp_activation_offload"]
    export = export_plan(plan, ExportFormat.MEGATRON)
    text = _file(export, "pretrain_gpt.sh").text
    _, flags = script_arguments(text, "pretrain_gpt.py")
    assert export.exact
    assert {k: flags[k] for k in (
        "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--ckpt-format", "--no-gradient-accumulation-fusion",
        "--use-distributed-optimizer", "--cpu-offloading-num-layers",
    )} == {
        "--use-megatron-fsdp": None, "--data-parallel-sharding-strategy": "optim_grads_params", "--ckpt-format": "fsdp_dtensor",
        "--no-gradient-accumulation-fusion": None, "--use-distributed-optimizer": None, "--cpu-offloading-num-layers": "12",
    }
    # Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 under Megatron-FSDP (TP alone sets it to 1).
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and "CUDA_DEVICE_MAX_CONNECTIONS=1" not in text
    config, ddp, _, _ = megatron_configs(export, plan)
    assert (config.cpu_offloading, config.cpu_offloading_num_layers, config.gradient_accumulation_fusion) == (True, 12, False)
    assert (ddp.use_megatron_fsdp, ddp.data_parallel_sharding_strategy) == (True, "optim_grads_params")
    zero2 = dataclasses.replace(plan, parallel=dataclasses.replace(plan.parallel, zero_stage=ZeroStage.OS_G, activation_offload_layers=0))
    _, flags = script_arguments(_file(export_plan(zero2, ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--data-parallel-sharding-strategy"] == "optim_grads" and "--cpu-offloading-num-layers" not in flags


def test_megatron_core_refuses_activation_offload_as_the_planner_does():
    # The planner's legality (one stage, no recomputation, N < layers) is megatron-core's own.
    base = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, cpu_offloading=True)
    TransformerConfig(**base, cpu_offloading_num_layers=31)
    for change in (dict(cpu_offloading_num_layers=32), dict(cpu_offloading_num_layers=8, pipeline_model_parallel_size=2,
                   pipeline_dtype=torch.bfloat16), dict(cpu_offloading_num_layers=8, recompute_granularity="selective")):
        with pytest.raises(ValueError):
            TransformerConfig(**{**base, **change})


def test_megatron_zero3_under_a_pipeline_becomes_zero1():
    plan = SHAPES["interleaved"]
    zero3 = dataclasses.replace(plan, parallel=dataclasses.replace(plan.parallel, zero_stage=ZeroStage.OS_G_P))
    export = export_plan(zero3, ExportFormat.MEGATRON)
    assert [(d.field, d.planned, d.exported) for d in export.differences] == [("parallel.zero_stage", "3", "1")]
    assert "Megatron-FSDP" in export.differences[0].reason


# --------------------------------------------------------------------------- DeepSpeed


class _DataParallelGroup:
    """The model-parallel unit DeepSpeed asks for the data-parallel world size."""

    def __init__(self, dp_size: int) -> None:
        self.dp_size = dp_size

    def get_data_parallel_world_size(self) -> int:
        return self.dp_size


@pytest.mark.parametrize("shape", list(SHAPES))
def test_deepspeed_reads_the_deepspeed_export(shape, monkeypatch):
    plan = SHAPES[shape]
    export = export_plan(plan, ExportFormat.DEEPSPEED)
    exported = export.parallel
    # Outside a launched job DeepSpeed takes a world of one; as rank 0 of a job it asks the
    # model-parallel unit for the data-parallel size, and checks the batch arithmetic with it.
    monkeypatch.setattr(deepspeed_config_module.dist, "get_rank", lambda *args, **kwargs: 0)
    config = DeepSpeedConfig(json.loads(_file(export, "ds_config.json").text), mpu=_DataParallelGroup(exported.dp_size))
    assert config.world_size == exported.dp_size
    assert exported.cp_size == 1 and exported.num_gpus == plan.num_gpus
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (
        export.training.global_batch_size, exported.micro_batch_size,
        micro_batch_count(export.training.global_batch_size, exported.dp_size, exported.micro_batch_size))
    assert config.zero_optimization_stage == int(exported.zero_stage)
    assert config.zero_config.overlap_comm is export.training.overlap_grad_reduce
    assert config.bfloat16_config.enabled is (export.training.precision is not Precision.FP16)
    if exported.zero_stage == ZeroStage.OS_G_P:
        layer = config.zero_config.prefetch_bucket_size
        assert config.zero_config.max_live_parameters == ZERO3_PREFETCHED_LAYERS * layer
        assert layer == layer_weight_count(plan.model) // exported.tp_size
    launcher, flags = script_arguments(_file(export, "launch.sh").text, "pretrain_gpt.py")
    assert set(flags) - {"--deepspeed", "--deepspeed_config"} <= MEGATRON_DEEPSPEED_FLAGS
    parsed, unknown = deepspeed.add_config_arguments(argparse.ArgumentParser()).parse_known_args(
        ["--deepspeed", "--deepspeed_config", flags["--deepspeed_config"]])
    assert parsed.deepspeed and parsed.deepspeed_config == "ds_config.json" and unknown == []
    assert int(flags["--zero-stage"]) == config.zero_optimization_stage
    assert _launcher_value(launcher, "--num_nodes") * _launcher_value(launcher, "--num_gpus") == plan.num_gpus
    if exported.pp_size > 1:
        assert exported.virtual_stages == 1
        assert plan.chunk_layers(exported) == pipeline_split(plan.model.num_layers, exported.pp_size)


@pytest.mark.parametrize(("num_layers", "pp_size"), [(24, 4), (26, 4), (30, 4), (13, 5), (80, 8)])
def test_deepspeed_pipeline_split_is_deepspeeds_type_transformer_partition(num_layers, pp_size):
    # Megatron-DeepSpeed's pipeline: embedding and head layers weigh 0, transformer layers 1.
    weights = [0, 0] + [1] * num_layers + [0, 0]
    bounds = partition_balanced(weights=weights, num_parts=pp_size)
    balanced = tuple(sum(weights[bounds[i]:bounds[i + 1]]) for i in range(pp_size))
    assert pipeline_split(num_layers, pp_size) == balanced


def test_deepspeed_zero3_buckets_follow_one_layer():
    export = export_plan(SHAPES["zero3"], ExportFormat.DEEPSPEED)
    zero = json.loads(_file(export, "ds_config.json").text)["zero_optimization"]
    # A Llama layer of h=4096, kv 1024, ffn 14336: 2h^2 + 2h*kv + 3h*ffn GEMM weights, as the
    # cost model counts them; it holds ZERO3_PREFETCHED_LAYERS of them gathered.
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert layer == layer_weight_count(LLAMA) and ZERO3_PREFETCHED_LAYERS == 2
    assert zero == {
        "stage": 3, "overlap_comm": True, "contiguous_gradients": True, "reduce_scatter": True,
        "reduce_bucket_size": layer, "stage3_prefetch_bucket_size": layer, "stage3_max_live_parameters": 2 * layer,
        "stage3_max_reuse_distance": 2 * layer, "stage3_param_persistence_threshold": 40960,
    }


# --------------------------------------------------------------------------- torchtitan


@pytest.mark.parametrize("shape", list(SHAPES))
def test_torchtitan_reads_the_torchtitan_export(shape, tmp_path):
    plan = SHAPES[shape]
    export = export_plan(plan, ExportFormat.TORCHTITAN)
    exported = export.parallel
    path = tmp_path / "job.toml"
    path.write_text(_file(export, "job.toml").text)
    job = ConfigManager().parse_args(["--job.config_file", str(path)])
    p = job.parallelism
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree, ep=1, etp=1, world_size=plan.num_gpus,
    )
    assert (dims.dp_replicate * dims.dp_shard, dims.tp, dims.pp, dims.cp) == (
        exported.dp_size, exported.tp_size, exported.pp_size, exported.cp_size)
    sharded = exported.zero_stage >= ZeroStage.OS_G
    assert dims.dp_shard == (exported.dp_size if sharded else 1)
    assert p.fsdp_reshard_after_forward == ("always" if exported.zero_stage == ZeroStage.OS_G_P else "never")
    assert job.training.global_batch_size == plan.training.global_batch_size
    assert job.training.seq_len == plan.training.seq_length
    mode = job.activation_checkpoint.mode
    assert mode == ("full" if exported.recompute is Recompute.FULL else "none")
    if exported.pp_size == 1:
        accumulation = job.training.global_batch_size // (job.training.local_batch_size * exported.dp_size)
        assert (job.training.local_batch_size, accumulation) == (exported.micro_batch_size, plan.num_micro_batches)
    else:
        assert get_schedule_class(p.pipeline_parallel_schedule).__name__ == (
            "ScheduleInterleaved1F1B" if exported.virtual_stages > 1 else "Schedule1F1B")
        micro_batches = job.training.local_batch_size // p.pipeline_parallel_microbatch_size
        assert micro_batches == plan.num_micro_batches
        parts = p.module_fqns_per_model_part
        assert [sum(m.startswith("layers.") for m in part) for part in parts] == list(plan.chunk_layers(exported))
        flat = [m for part in parts for m in part]
        assert flat == ["tok_embeddings", *(f"layers.{i}" for i in range(plan.model.num_layers)), "norm", "output"]
    for converter in job.model.converters:
        assert converter in _registry_model_converter_cls
    assert ("quantize.linear.float8" in job.model.converters) is (plan.training.precision is Precision.FP8)


def test_torchtitan_zero3_is_exact_fsdp_resharding_after_forward():
    export = export_plan(SHAPES["zero3"], ExportFormat.TORCHTITAN)
    sections = tomllib.loads(_file(export, "job.toml").text)
    assert export.exact
    assert sections["parallelism"]["data_parallel_shard_degree"] == 16
    assert sections["parallelism"]["fsdp_reshard_after_forward"] == "always"
    assert sections["activation_checkpoint"] == {"mode": "full"}


# --------------------------------------------------------------------------- NeMo


def _nemo_recompute(model: dict) -> dict:
    """NeMo's own mapping of its activation-checkpoint keys to megatron-core's."""
    return {
        "recompute_granularity": model.get("activations_checkpoint_granularity"),
        "recompute_method": model.get("activations_checkpoint_method"),
        "recompute_num_layers": model.get("activations_checkpoint_num_layers"),
    }


def _nemo_activation(model: dict) -> dict:
    """NeMo's own mapping of its activation and bias keys to megatron-core's (MegatronBaseModel
    build_transformer_config: ``gated_linear_unit`` for activations ending in 'glu', the function
    from activation_to_func, ``add_bias_linear`` from ``bias``)."""
    activation = model.get("activation", "gelu")
    function = {"gelu": torch.nn.functional.gelu, "fast-swiglu": torch.nn.functional.silu, "squared-relu": squared_relu}[activation]
    return {"activation_func": function, "gated_linear_unit": activation.endswith("glu"), "add_bias_linear": model.get("bias", True)}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_nemo_overrides_use_nemo_names_and_megatron_core_reads_them(shape):
    plan = SHAPES[shape]
    export = export_plan(plan, ExportFormat.NEMO)
    exported = export.parallel
    document = yaml.safe_load(_file(export, "nemo_overrides.yaml").text)
    assert set(document) == {"trainer", "model"}
    assert set(document["trainer"]) <= NEMO_GPT_CONFIG_KEYS["trainer"]
    assert set(document["model"]) <= NEMO_GPT_CONFIG_KEYS["model"] | CORE_FIELDS
    model = document["model"]
    trainer = document["trainer"]
    assert trainer["devices"] * trainer["num_nodes"] == plan.num_gpus
    # NeMo hands every model key that is a megatron-core field to TransformerConfig.
    core = {k: v for k, v in model.items() if k in CORE_FIELDS and k not in ("fp8", "activation", "normalization") and v is not None}
    core.update({k: v for k, v in _nemo_recompute(model).items() if v is not None})
    core.update(_nemo_activation(model))
    config = TransformerConfig(**core, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, bf16=True)
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.context_parallel_size) == (
        exported.tp_size, exported.pp_size, exported.cp_size)
    assert (config.virtual_pipeline_model_parallel_size or 1) == exported.virtual_stages
    dp_size = plan.num_gpus // (exported.tp_size * exported.pp_size * exported.cp_size)
    batches = ConstantNumMicroBatchesCalculator(model["global_batch_size"], model["micro_batch_size"], dp_size, False, 0)
    assert batches.num_micro_batches == plan.num_micro_batches
    assert model["optim"]["name"] == ("distributed_fused_adam" if exported.zero_stage == ZeroStage.OS else "fused_adam")
    chunks = plan.chunk_layers(exported)
    if exported.pp_size > 1 and len(set(chunks)) > 1:
        assert (config.num_layers_in_first_pipeline_stage, config.num_layers_in_last_pipeline_stage) == (chunks[0], chunks[-1])


def test_nemo_uneven_first_and_last_stages():
    export = export_plan(SHAPES["uneven_stages"], ExportFormat.NEMO)
    model = yaml.safe_load(_file(export, "nemo_overrides.yaml").text)["model"]
    assert (model["num_layers_in_first_pipeline_stage"], model["num_layers_in_last_pipeline_stage"]) == (5, 5)
    uneven_middle = dataclasses.replace(SHAPES["uneven_stages"], parallel=dataclasses.replace(
        SHAPES["uneven_stages"].parallel, stage_layers=(6, 5, 7, 6)))
    export = export_plan(uneven_middle, ExportFormat.NEMO)
    assert not export.exact
    assert [(d.field, d.planned, d.exported) for d in export.differences] == [("parallel.stage_layers", "[6, 5, 7, 6]", "[6, 6, 6, 6]")]


def test_nemo_writes_activation_offload_as_megatron_core_fields():
    plan = SHAPES["fsdp_activation_offload"]
    zero1 = dataclasses.replace(plan, parallel=dataclasses.replace(plan.parallel, zero_stage=ZeroStage.OS))
    export = export_plan(zero1, ExportFormat.NEMO)
    model = yaml.safe_load(_file(export, "nemo_overrides.yaml").text)["model"]
    assert export.exact
    # NeMo's config defaults cpu_offloading_weights to True: written False (activations only).
    assert {k: model[k] for k in ("cpu_offloading", "cpu_offloading_num_layers", "cpu_offloading_activations", "cpu_offloading_weights")} == {
        "cpu_offloading": True, "cpu_offloading_num_layers": 12, "cpu_offloading_activations": True, "cpu_offloading_weights": False,
    }


# --------------------------------------------------------------------------- recompute modules

# Selective recomputation of the attention core and the MLP (megatron-core --recompute-modules).
MODULES_PLAN = dataclasses.replace(
    SHAPES["uneven_stages"], training=dataclasses.replace(GPT_TRAINING, recompute_modules=(RecomputeModule.CORE_ATTN, RecomputeModule.MLP))
)


def test_megatron_and_nemo_write_the_recompute_modules_and_megatron_core_reads_them():
    export = export_plan(MODULES_PLAN, ExportFormat.MEGATRON)
    assert export.exact
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--recompute-modules"] == ["core_attn", "mlp"]
    config, *_ = megatron_configs(export, MODULES_PLAN)
    assert (config.recompute_granularity, config.recompute_modules) == ("selective", ["core_attn", "mlp"])
    nemo = export_plan(MODULES_PLAN, ExportFormat.NEMO)
    model = yaml.safe_load(_file(nemo, "nemo_overrides.yaml").text)["model"]
    assert nemo.exact and model["recompute_modules"] == ["core_attn", "mlp"]
    assert TransformerConfig(
        num_layers=24, hidden_size=2048, num_attention_heads=16, recompute_granularity="selective",
        recompute_modules=model["recompute_modules"],
    ).recompute_modules == ["core_attn", "mlp"]


def test_squared_relu_is_each_frameworks_own_activation_without_biases():
    plan = SHAPES["squared_relu"]
    megatron = export_plan(plan, ExportFormat.MEGATRON)
    _, flags = script_arguments(_file(megatron, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert {"--squared-relu", "--disable-bias-linear", "--untie-embeddings-and-output-weights"} <= set(flags)
    assert "--swiglu" not in flags and "--normalization" not in flags  # LayerNorm, Megatron-LM's default
    config, *_ = megatron_configs(megatron, plan)
    assert (config.activation_func, config.gated_linear_unit, config.add_bias_linear, config.bias_activation_fusion) == (
        squared_relu, False, False, False)
    # The fusion Megatron-LM would otherwise turn on is refused with squared ReLU: hence no biases, no fusion.
    with pytest.raises(ValueError, match="bias_activation_fusion"):
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, activation_func=squared_relu, bias_activation_fusion=True)

    _, flags = script_arguments(_file(export_plan(plan, ExportFormat.DEEPSPEED), "launch.sh").text, "pretrain_gpt.py")
    assert {"--squared-relu", "--disable-bias-linear"} <= set(flags) and "--normalization" not in flags

    model = yaml.safe_load(_file(export_plan(plan, ExportFormat.NEMO), "nemo_overrides.yaml").text)["model"]
    assert (model["activation"], model["bias"], model["bias_activation_fusion"]) == ("squared-relu", False, False)
    assert "normalization" not in model  # NeMo's default layernorm

    titan = export_plan(plan, ExportFormat.TORCHTITAN)
    assert any("custom model" in note for note in titan.notes)


def test_the_default_modules_write_no_flag():
    _, flags = script_arguments(_file(export_plan(SHAPES["uneven_stages"], ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert "--recompute-modules" not in flags


def test_megatron_deepspeed_recomputes_the_attention_core_only():
    export = export_plan(MODULES_PLAN, ExportFormat.DEEPSPEED)
    difference = next(d for d in export.differences if d.field == "training.recompute_modules")
    assert (difference.planned, difference.exported) == ("[core_attn, mlp]", "[core_attn]")
    assert export.training.recompute_modules == (RecomputeModule.CORE_ATTN,)


def test_transformer_engines_in_place_loss_is_exported_where_megatron_core_has_it():
    """A plan costed with Transformer Engine's cross entropy (loss_kernel in_place) asks for it:
    Megatron-LM's --cross-entropy-loss-fusion --cross-entropy-fusion-impl te, read here into
    megatron-core's own config, and NeMo's model fields of the same names; a plan costed with
    Megatron-core's native loss asks for neither."""
    plan = SHAPES["interleaved"]
    in_place = dataclasses.replace(plan, training=dataclasses.replace(plan.training, loss_kernel=LossKernel.IN_PLACE))
    config, *_ = megatron_configs(export_plan(in_place, ExportFormat.MEGATRON), in_place)
    assert (config.cross_entropy_loss_fusion, config.cross_entropy_fusion_impl) == (True, "te")
    config, *_ = megatron_configs(export_plan(plan, ExportFormat.MEGATRON), plan)
    assert (config.cross_entropy_loss_fusion, config.cross_entropy_fusion_impl) == (False, "native")
    model = yaml.safe_load(_file(export_plan(in_place, ExportFormat.NEMO), "nemo_overrides.yaml").text)["model"]
    assert (model["cross_entropy_loss_fusion"], model["cross_entropy_fusion_impl"]) == (True, "te")
    model = yaml.safe_load(_file(export_plan(plan, ExportFormat.NEMO), "nemo_overrides.yaml").text)["model"]
    assert "cross_entropy_fusion_impl" not in model

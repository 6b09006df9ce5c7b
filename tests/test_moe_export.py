"""Launch configs of mixture-of-experts plans carry expert parallelism where the framework has it
(issue 16): Megatron-LM's --expert-model-parallel-size and MoE flags (read back into megatron-core's
config), torchtitan's expert_parallel_degree (read by torchtitan's own ConfigManager and
ParallelDims), NeMo's expert_model_parallel_size; DeepSpeed, which sets EP in the model code, names
the difference."""

from __future__ import annotations

import dataclasses

import torch
from megatron.core.transformer.transformer_config import MLATransformerConfig
from test_export_frameworks import _file, script_arguments
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims

import catalog
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.frameworks.megatron import moe_layer_pattern
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage

DEEPSEEK = catalog.get_model("deepseek-v3")
MIXTRAL = catalog.get_model("mixtral-8x7b")
TRAINING = TrainingSpec(global_batch_size=1024, seq_length=4096)
# DeepSeek-V3's published layout (arXiv 2412.19437 Sec 3.2): PP 16, EP 64, ZeRO-1 data parallelism, 2048 GPUs.
PUBLISHED = PlanToExport(DEEPSEEK, TRAINING, ParallelConfig(
    dp_size=128, tp_size=1, pp_size=16, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL, ep_size=64,
), 8)
MIXTRAL_FSDP = PlanToExport(MIXTRAL, TRAINING, ParallelConfig(
    dp_size=8, tp_size=2, pp_size=1, zero_stage=ZeroStage.OS_G, micro_batch_size=1, sequence_parallel=True, ep_size=8,
), 8)

# Megatron-LM flag -> megatron-core config field where the names differ (megatron/training/arguments.py
# core_transformer_config_from_args: args.num_experts -> num_moe_experts).
RENAMED = {"num_experts": "num_moe_experts"}


def test_megatron_export_carries_expert_parallelism_and_megatron_core_reads_the_moe_flags():
    export = export_plan(PUBLISHED, ExportFormat.MEGATRON)
    assert export.exact and export.parallel.ep_size == 64
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--expert-model-parallel-size"] == "64"
    fields = {f.name: f for f in dataclasses.fields(MLATransformerConfig)}
    moe_flags = {
        flag for flag in flags
        if flag.startswith(("--moe-", "--num-experts", "--expert-", "--multi-latent", "--kv-lora", "--q-lora", "--qk-", "--v-head"))
    }
    kwargs: dict = {"num_layers": DEEPSEEK.num_layers, "hidden_size": DEEPSEEK.hidden_size,
                    "num_attention_heads": DEEPSEEK.num_attention_heads, "params_dtype": torch.bfloat16,
                    "pipeline_dtype": torch.bfloat16, "pipeline_model_parallel_size": 16}
    for flag in moe_flags:
        name = RENAMED.get(flag[2:].replace("-", "_"), flag[2:].replace("-", "_"))
        assert name in fields, flag
        value = flags[flag]
        kwargs[name] = True if value is None else (eval(value) if value.startswith("[") else int(value) if value.isdigit() else value)  # noqa: S307
    config = MLATransformerConfig(**kwargs)
    assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size) == (256, 8, 2048)
    assert config.moe_shared_expert_intermediate_size == 2048 and config.moe_router_score_function == "sigmoid"
    assert config.moe_layer_freq == moe_layer_pattern(DEEPSEEK) == [0, 0, 0] + [1] * 58
    assert config.expert_model_parallel_size == 64
    assert (config.q_lora_rank, config.kv_lora_rank, config.qk_head_dim, config.qk_pos_emb_head_dim, config.v_head_dim) == (
        1536, 512, 128, 64, 128)


def test_torchtitan_export_carries_expert_parallelism(tmp_path):
    export = export_plan(MIXTRAL_FSDP, ExportFormat.TORCHTITAN)
    assert export.exact
    path = tmp_path / "job.toml"
    path.write_text(_file(export, "job.toml").text)
    p = ConfigManager().parse_args(["--job.config_file", str(path)]).parallelism
    assert (p.expert_parallel_degree, p.expert_tensor_parallel_degree) == (8, 2)
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
        etp=p.expert_tensor_parallel_degree, world_size=MIXTRAL_FSDP.num_gpus,
    )
    assert dims.ep == 8 and dims.dp_shard == 8


def test_torchtitan_moves_a_replicated_expert_parallel_plan_to_fsdp():
    plan = dataclasses.replace(MIXTRAL_FSDP, parallel=dataclasses.replace(
        MIXTRAL_FSDP.parallel, tp_size=1, dp_size=8, zero_stage=ZeroStage.NONE, sequence_parallel=False))
    plan = dataclasses.replace(plan, gpus_per_node=8)
    export = export_plan(plan, ExportFormat.TORCHTITAN)
    assert [d.field for d in export.differences] == ["parallel.zero_stage"]
    assert "expert-parallel" in export.differences[0].reason


def test_nemo_export_carries_expert_parallelism():
    export = export_plan(PUBLISHED, ExportFormat.NEMO)
    text = "\n".join(f.text for f in export.files)
    assert "expert_model_parallel_size: 64" in text and "num_moe_experts: 256" in text and "moe_router_topk: 8" in text


def test_deepspeed_export_names_the_expert_parallelism_it_does_not_write():
    export = export_plan(MIXTRAL_FSDP, ExportFormat.DEEPSPEED)
    assert "parallel.ep_size" in [d.field for d in export.differences]
    assert export.parallel.ep_size == 1 and not export.exact


def test_megatron_core_exports_say_what_their_alltoall_dispatcher_means_for_the_plan():
    """Megatron-LM and NeMo write the alltoall dispatcher (it needs no extra package); a plan that
    costs the all-to-alls as the flex dispatcher runs them says so, one that costs the alltoall
    dispatcher's host sync says that, and both name the backends Megatron-Bridge's
    apply_flex_dispatcher_backend allows; a dense plan's exports say nothing of it."""
    for fmt, framework in ((ExportFormat.MEGATRON, "Megatron-LM"), (ExportFormat.NEMO, "NeMo")):
        export = export_plan(PUBLISHED, fmt)
        (note,) = [n for n in export.notes if "dispatcher" in n]
        assert note.startswith(f"{framework} runs the MoE all-to-alls here with Megatron-core's alltoall dispatcher")
        assert "deepep (Hopper, B200, B300)" in note and "hybridep (also GB200 / GB300 NVL72)" in note
        text = "\n".join(f.text for f in export.files)
        assert "alltoall" in text
        assert "the plan costs them as the flex dispatcher runs them" in note
        # A plan that costs the alltoall dispatcher's host sync (megatron-core-2024's measured
        # moe_host_s_per_layer) runs as planned: the note says so and names flex as the way past it.
        synced = dataclasses.replace(PUBLISHED, training=dataclasses.replace(PUBLISHED.training, moe_host_s_per_layer=0.0037))
        (note,) = [n for n in export_plan(synced, fmt).notes if "dispatcher" in n]
        assert "the plan costs that sync (3.7 ms of host work per MoE layer and forward pass" in note
        assert "deepep (Hopper, B200, B300) or hybridep (also GB200 / GB300 NVL72)" in note
        dense = dataclasses.replace(PUBLISHED, model=catalog.get_model("llama3-8b"), parallel=dataclasses.replace(PUBLISHED.parallel, ep_size=1))
        assert not [n for n in export_plan(dense, fmt).notes if "dispatcher" in n]

"""NeMo (Megatron GPT, ``megatron_gpt_config.yaml``): what it can run, and a plan as trainer/model
YAML overrides.

NeMo trains through megatron-core: it takes Megatron's recomputation (``activations_checkpoint_granularity``, ``_method``
and ``_num_layers`` become megatron-core's recompute settings), and passes any ``model`` key
that names a megatron-core ``TransformerConfig`` field straight to it. So a split with a
different first and/or last stage and even stages between is written as
``num_layers_in_first_pipeline_stage`` / ``num_layers_in_last_pipeline_stage``; other uneven
splits, and uneven interleaved chunks, are not exact here.

Its ZeRO is ZeRO-1 at most (distributed Adam): the ``fsdp`` keys of megatron_gpt_config.yaml
are PyTorch FSDP (NLPFSDPStrategy, "Enable training with torch FSDP"), not Megatron-FSDP, so
the ZeRO-2/3 Megatron runs through Megatron-FSDP is a difference here (the Megatron-LM export
writes it). Partial activation offload is megatron-core's ``cpu_offloading`` with
``cpu_offloading_num_layers`` N, model keys NeMo hands to TransformerConfig; NeMo's config
defaults ``cpu_offloading_weights`` to True, so the export sets it False (activations only, as
Megatron-Bridge's performance overrides do, utils/overrides.py).
"""

from __future__ import annotations

from dataclasses import replace

from solver.frameworks.export import (
    Difference,
    Export,
    ExportFormat,
    LaunchFile,
    Nearest,
    PlanToExport,
    differs,
    dispatcher_notes,
    kv_head_notes,
    recompute_form,
    resplit,
    window_notes,
    window_skip_freq,
    without_bf16_moments,
    without_fp8_act_input,
    without_launch_blocking,
    without_muon,
    without_nvme,
)
from solver.frameworks.megatron import exact_recompute, recompute_settings
from solver.frameworks.megatron import violations as megatron_violations
from solver.spec.dimensions import Offload
from solver.spec.legality import uniform_partition
from solver.spec.model import MlpActivation, PositionEmbedding
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import DEFAULT_RECOMPUTE_MODULES, LossKernel, MoeDispatcher, Precision, ZeroStage

YamlValue = int | float | str | bool | list[str] | list[int] | None


def violations(parallel: ParallelConfig) -> list[Violation]:
    """Megatron's rules, and ZeRO-1 at most (no Megatron-FSDP in NeMo's GPT config)."""
    zero = parallel.zero_stage
    if zero > ZeroStage.OS:
        return [Violation(Rule.FRAMEWORK_ZERO, f"NeMo shards optimizer states only (ZeRO-1, distributed Adam); zero_stage {int(zero)} is not available")]
    return megatron_violations(parallel)


def first_last_split(layers: tuple[int, ...]) -> tuple[int | None, int | None] | None:
    """(first, last) stage sizes that megatron-core's uneven split gives exactly ``layers`` with
    (None: that end is even with the middle), or None when no such pair does."""
    pp = len(layers)
    if pp < 2 or len(set(layers)) == 1:
        return (None, None)
    middle = layers[1:-1]
    if middle and len(set(middle)) > 1:
        return None
    even = middle[0] if middle else None
    first = None if layers[0] == even else layers[0]
    last = None if layers[-1] == even else layers[-1]
    return first, last


def exact_config(plan: PlanToExport) -> Nearest:
    """The configuration nearest to the plan that NeMo runs exactly, and what differs."""
    parallel, nvme = without_nvme(plan.parallel, "NeMo")
    out: list[Difference] = list(nvme)
    if parallel.offload is not Offload.NONE:
        out.append(differs(
            "parallel.offload", parallel.offload.value, Offload.NONE.value,
            "the model.optim this export writes (distributed_fused_adam, fused_adam) has no CPU offload;"
            " megatron-core's optimizer_cpu_offload is in the Megatron-LM export. Every state stays on the GPU",
        ))
        parallel = replace(parallel, offload=Offload.NONE)
    if parallel.expert_tp_size is not None:
        # NeMo's Megatron GPT model builds its process groups through nlp_overrides'
        # parallel_state.initialize_model_parallel(..., expert_model_parallel_size=...), which passes
        # no expert_tensor_parallel_size (NVIDIA/NeMo 8cfedd72: nemo/collections/nlp/parts/nlp_overrides.py),
        # so megatron-core's default, tp, holds whatever the config says.
        out.append(differs(
            "parallel.expert_tp_size", parallel.expert_tp_size, parallel.tp_size,
            "NeMo's Megatron GPT config builds megatron-core's process groups without an expert tensor parallel size,"
            " so its experts split over tp (NeMo 2's MegatronStrategy(expert_tensor_parallel_size=...) and"
            " Megatron-Bridge take one; the Megatron-LM export writes --expert-tensor-parallel-size)",
        ))
        parallel = replace(parallel, expert_tp_size=None)
    if parallel.zero_stage > ZeroStage.OS:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 1,
            "NeMo's distributed Adam shards optimizer states only (ZeRO-1); its config's fsdp is PyTorch FSDP, not"
            " Megatron-FSDP (the Megatron-LM export writes that); gradients and parameters stay replicated, so each"
            " GPU needs more memory than planned",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS)
    layers = plan.chunk_layers(parallel)
    expressible = first_last_split(layers) is not None and (parallel.virtual_stages == 1 or len(set(layers)) == 1)
    if parallel.pp_size > 1 and not expressible:
        n, chunks = plan.model.num_layers, parallel.num_chunks
        if n % chunks == 0:
            split = tuple(n // chunks for _ in range(chunks))
        else:  # even stages, the remainder on the last (interleaving always divides evenly)
            even = n // chunks
            split = (*(even for _ in range(chunks - 1)), n - even * (chunks - 1))
        out.append(differs(
            "parallel.stage_layers", layers, split,
            "NeMo splits layers evenly, or with a different first and/or last stage"
            " (num_layers_in_first/last_pipeline_stage); stages may need more memory than planned",
        ))
        stage_layers = None if split == uniform_partition(n, chunks) else split
        parallel = resplit(parallel, recompute_form(plan, parallel), stage_layers, parallel.virtual_stages)
    parallel, recompute = exact_recompute(plan, parallel)
    training, muon = without_muon(plan.training, "NeMo")
    training, moments = without_bf16_moments(
        training,
        "the model.optim this export writes (apex's distributed_fused_adam, fused_adam) is not megatron-core's"
        " precision-aware optimizer and keeps Adam's moments in fp32 (the Megatron-LM export writes --exp-avg-dtype bf16)",
    )
    training, act_input = without_fp8_act_input(plan.model, training, "NeMo (megatron-core)")
    training, blocking = without_launch_blocking(training, "NeMo")
    return Nearest(parallel, training, (*out, *recompute, *muon, *moments, *act_input, *blocking))


def overrides(plan: PlanToExport, parallel: ParallelConfig) -> dict[str, dict[str, YamlValue]]:
    """``trainer`` and ``model`` overrides of NeMo's Megatron GPT config for an exact
    configuration."""
    model, training = plan.model, plan.training
    precision = "16" if training.precision is Precision.FP16 else "bf16"
    trainer: dict[str, YamlValue] = {"devices": plan.processes_per_node, "num_nodes": plan.num_nodes, "precision": precision}
    out: dict[str, YamlValue] = {
        "micro_batch_size": parallel.micro_batch_size,
        "global_batch_size": training.global_batch_size,
        "tensor_model_parallel_size": parallel.tp_size,
        "pipeline_model_parallel_size": parallel.pp_size,
        "virtual_pipeline_model_parallel_size": parallel.virtual_stages if parallel.virtual_stages > 1 else None,
        "sequence_parallel": parallel.sequence_parallel and parallel.tp_size > 1,
        "encoder_seq_length": training.seq_length,
        "max_position_embeddings": max(model.seq_length, training.seq_length),
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": model.ffn_hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_query_groups": model.num_kv_heads if model.num_kv_heads < model.num_attention_heads else None,
        "kv_channels": model.head_dim,  # None: hidden_size / num_attention_heads, NeMo's default
        # megatron-core's window_size (left, right) and window_attn_skip_freq, TransformerConfig fields
        "window_size": [model.sliding_window, 0] if model.sliding_window else None,
        "window_attn_skip_freq": window_skip_freq(model) if model.sliding_window else None,
        "position_embedding_type": "rope" if model.position_embedding is PositionEmbedding.NONE else "learned_absolute",
        "share_embeddings_and_output_weights": model.tied_embeddings,
        # The model's dropouts (NeMo's GPT configs: hidden_dropout, attention_dropout).
        "hidden_dropout": model.hidden_dropout,
        "attention_dropout": model.attention_dropout,
    }
    if parallel.cp_size > 1:
        out["context_parallel_size"] = parallel.cp_size  # megatron-core's ring attention
    if parallel.ep_size > 1:
        out["expert_model_parallel_size"] = parallel.ep_size  # expert tensor parallel = tp, megatron-core's default (exact_config)
    if model.is_moe:
        flex = training.moe_dispatcher is MoeDispatcher.FLEX
        out.update(
            num_moe_experts=model.num_experts, moe_router_topk=model.experts_per_token,
            moe_ffn_hidden_size=model.moe_ffn_hidden_size, moe_token_dispatcher_type="flex" if flex else "alltoall",
            moe_grouped_gemm=True,
            moe_shared_expert_intermediate_size=model.num_shared_experts * model.moe_ffn_hidden_size or None,
        )
        if flex:
            out["moe_flex_dispatcher_backend"] = "deepep"  # megatron-core's default backend (TransformerConfig)
        if model.router_groups:  # group-limited routing (TransformerConfig moe_router_num_groups / _group_topk)
            out.update(moe_router_num_groups=model.router_groups, moe_router_group_topk=model.router_group_topk)
    split = first_last_split(plan.chunk_layers(parallel)) if parallel.pp_size > 1 else None
    if split is not None:
        first, last = split
        if first is not None:
            out["num_layers_in_first_pipeline_stage"] = first
        if last is not None:
            out["num_layers_in_last_pipeline_stage"] = last
    if model.mlp_activation is MlpActivation.SWIGLU:
        out.update({"activation": "fast-swiglu", "normalization": "rmsnorm", "bias": False})
    squared_relu = model.mlp_activation is MlpActivation.SQUARED_RELU
    if squared_relu:
        # Nemotron-style layers as NeMo-Framework-Launcher's nemotron configs write them (the
        # default layernorm; theirs is layernorm1p, the same parameters).
        out.update({"activation": "squared-relu", "bias": False})
    granularity, method, num_layers = recompute_settings(plan, parallel)
    out.update({
        "activations_checkpoint_granularity": granularity,
        "activations_checkpoint_method": method,
        "activations_checkpoint_num_layers": num_layers,
    })
    if granularity == "selective" and training.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
        out["recompute_modules"] = [m.value for m in training.recompute_modules]  # a TransformerConfig field
    if parallel.activation_offload_layers:
        # megatron-core's CPU offload of the first N layers' activations (TransformerConfig fields).
        out.update({
            "cpu_offloading": True, "cpu_offloading_num_layers": parallel.activation_offload_layers,
            "cpu_offloading_activations": True, "cpu_offloading_weights": False,
        })
    if training.precision is Precision.FP8:
        out.update({"transformer_engine": True, "fp8": True, "fp8_hybrid": True})
    if training.precision is Precision.MXFP8:
        # NeMo hands TransformerConfig fields (fp8_recipe) to megatron-core as they are.
        out.update({"transformer_engine": True, "fp8": True, "fp8_hybrid": True, "fp8_recipe": "mxfp8"})
    if training.precision is Precision.NVFP4:
        out.update({"transformer_engine": True, "fp4": "e2m1", "fp4_recipe": "nvfp4"})
    if training.fp8_attention:
        # The TransformerConfig field megatron-core hands to Transformer Engine's recipe as fp8_dpa.
        out["fp8_dot_product_attention"] = True
    if training.fp8_output_proj:
        out["fp8_output_proj"] = True  # TransformerConfig: the LM head under the MXFP8 autocast
    if training.loss_kernel is LossKernel.IN_PLACE:
        # TransformerConfig's fields for Transformer Engine's cross entropy (the loss costed).
        out.update({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"})
    out.update({
        "use_flash_attention": training.flash_attention,
        # megatron-core fuses a bias into gelu or swiglu only (TransformerConfig refuses it with
        # squared ReLU; the Nemotron configs set bias_activation_fusion false).
        "bias_activation_fusion": training.fused_kernels and not squared_relu,
        "bias_dropout_add_fusion": training.fused_kernels,
        "masked_softmax_fusion": training.fused_kernels,
    })
    return {"trainer": trainer, "model": out}


def optimizer_overrides(plan: PlanToExport, parallel: ParallelConfig) -> dict[str, YamlValue]:
    """``model.optim``: distributed Adam for ZeRO-1 (with its overlap settings), fused Adam else."""
    if parallel.zero_stage == ZeroStage.OS:
        overlap = plan.training.overlap_grad_reduce
        return {"name": "distributed_fused_adam", "overlap_grad_sync": overlap, "overlap_param_sync": overlap}
    return {"name": "fused_adam"}


def render_yaml(sections: dict[str, dict[str, YamlValue]], optim: dict[str, YamlValue], header: list[str]) -> str:
    lines = [f"# {line}" for line in header]
    for name, values in sections.items():
        lines.append(f"{name}:")
        lines += [f"  {key}: {_yaml(value)}" for key, value in values.items()]
        if name == "model":
            lines.append("  optim:")
            lines += [f"    {key}: {_yaml(value)}" for key, value in optim.items()]
    return "\n".join(lines) + "\n"


def _yaml(value: YamlValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)  # a float as Python writes it: 0.1, 0.0 (YAML floats)
    if isinstance(value, list):  # a flow sequence of plain names
        return "[" + ", ".join(_yaml(item) for item in value) + "]"
    return f"'{value}'" if value.isdigit() else value


def export(plan: PlanToExport) -> Export:
    nearest = exact_config(plan)
    parallel, differences = nearest.parallel, nearest.differences
    header = [
        f"NeMo Megatron GPT overrides for {plan.model.name} on {plan.num_gpus} GPUs:"
        f" {parallel.layout_text(' x ')}.",
        "exact: the plan as planned." if not differences else "NOT exact: the nearest configuration NeMo runs; see the differences.",
        "Merge over megatron_gpt_config.yaml (e.g. --config-name with this file as an override, or key=value on the command line).",
    ]
    text = render_yaml(overrides(plan, parallel), optimizer_overrides(plan, parallel), header)
    notes = (f"set model.tokenizer and model.data (vocabulary of {plan.model.vocab_size} tokens)",
             *window_notes(plan.model, "NeMo", writes_window=True), *dispatcher_notes(plan.model, nearest.training, "NeMo"),
             *kv_head_notes(plan.model, parallel.tp_size, "NeMo", subshards=True))
    return Export(
        ExportFormat.NEMO, not differences, parallel, nearest.training, differences,
        (LaunchFile("nemo_overrides.yaml", "application/yaml", text),), notes,
    )

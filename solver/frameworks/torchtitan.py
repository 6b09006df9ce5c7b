"""torchtitan: what it can run, and a plan as its job TOML (``JobConfig``, torchtitan 0.2).

Data parallelism is FSDP2 (``data_parallel_shard_degree``): parameters resharded after
forward is ZeRO-3 (``fsdp_reshard_after_forward = "always"``), kept until backward is ZeRO-2
(``"never"``); there is no optimizer-state-only sharding (ZeRO-1), and plain replication (DDP,
``data_parallel_replicate_degree`` alone) only without tensor, pipeline or context
parallelism. Context parallelism (``context_parallel_degree``) is ring attention with the
load-balanced split, and FSDP2 shards over the data- and context-parallel ranks together
(its ``dp_shard_cp`` mesh). Its
tensor parallelism always shards the norms' activations over the sequence (sequence
parallelism). Pipelines take any layer split (``module_fqns_per_model_part``: the modules of
each model chunk, pipeline order) and interleave with ``Interleaved1F1B``. Activation
checkpointing is one mode for the whole model: none, full (every layer), or selective, whose
per-operator policy saves matrix-multiply outputs and recomputes the rest, which is not the
attention-core recomputation planned as "selective".
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
    RecomputeForm,
    all_full,
    differs,
    full_recompute_counts,
    kv_head_notes,
    recompute_form,
    window_notes,
    without_activation_offload,
    without_bf16_moments,
    without_flex_dispatch,
    without_fp8_act_input,
    without_fp8_attention,
    without_fp8_output_proj,
    without_launch_blocking,
    without_muon,
    without_nvme,
)
from solver.spec.dimensions import Offload
from solver.spec.model import MlpActivation
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import Precision, TrainingSpec, ZeroStage

TomlValue = int | str | bool | list[str] | list[list[str]]


# torchtitan 0.2's JobConfig offloads model states (training.enable_cpu_offload) but has no
# activation offload: its [activation_checkpoint] section recomputes, it does not move.
ACTIVATION_OFFLOAD_REASON = "torchtitan has no activation offload (its activation_checkpoint recomputes; enable_cpu_offload moves model states)"


def expert_tp_problem(parallel: ParallelConfig) -> str:
    """Why torchtitan cannot split the experts over ``parallel.expert_tp_size`` ("" where it can,
    or where it is tp). torchtitan 0.2's ParallelDims (torchtitan/distributed/parallel_dims.py,
    ``_validate``) takes etp = tp ("partial dp -> ep") or etp 1 ("partial dp + all tp -> ep"),
    the latter with ep a multiple of cp x tp, and applies etp only with expert parallelism (at
    ep 1 its llama4 parallelize splits the experts over the TP mesh)."""
    etp, tp, ep, cp = parallel.expert_tp_size, parallel.tp_size, parallel.ep_size, parallel.cp_size
    if etp is None:
        return ""
    if etp != 1:
        return (
            f"torchtitan splits the experts over tp or not at all (expert_tensor_parallel_degree 1 or tp);"
            f" parallel.expert_tp_size {etp} with tp_size {tp}"
        )
    if ep == 1:
        return "torchtitan applies expert_tensor_parallel_degree only with expert parallelism; at ep_size 1 its experts split over tp"
    if ep % (cp * tp):
        return (
            f"torchtitan's expert_tensor_parallel_degree 1 borrows every tp and cp rank for expert parallelism:"
            f" ep_size {ep} must be a multiple of tp x cp = {tp * cp}"
        )
    return ""


def violations(parallel: ParallelConfig) -> list[Violation]:
    out: list[Violation] = []
    if parallel.zero_stage == ZeroStage.OS:
        out.append(Violation(Rule.FRAMEWORK_ZERO, "torchtitan shards with FSDP2 (ZeRO-2 or ZeRO-3); zero_stage 1 is not available"))
    if parallel.activation_offload_layers:
        out.append(Violation(Rule.FRAMEWORK_ACTIVATION_OFFLOAD, ACTIVATION_OFFLOAD_REASON))
    expert_tp = expert_tp_problem(parallel)
    if expert_tp:
        out.append(Violation(Rule.FRAMEWORK_EXPERT_TP, expert_tp))
    return out


def exact_config(plan: PlanToExport) -> Nearest:
    """The configuration nearest to the plan that torchtitan runs exactly, and what differs."""
    parallel, training = plan.parallel, plan.training
    parallel, nvme = without_nvme(parallel, "torchtitan (FSDP2's CPUOffloadPolicy)")
    out: list[Difference] = list(nvme)
    parallel, offload = exact_offload(parallel)
    out += offload
    parallel, dropped = without_activation_offload(
        parallel, ACTIVATION_OFFLOAD_REASON + ": every layer's activations stay on the GPU, more memory than planned",
    )
    out += dropped
    expert_tp = expert_tp_problem(parallel)
    if expert_tp:
        out.append(differs("parallel.expert_tp_size", parallel.expert_tp_size, parallel.tp_size, expert_tp + ": the experts split over tp"))
        parallel = replace(parallel, expert_tp_size=None)
    replicated_only = parallel.tp_size == 1 and parallel.pp_size == 1
    # With context parallelism torchtitan always shards with FSDP2 over dp_shard x cp
    # (ParallelDims.fsdp_enabled is dp_shard > 1 or cp > 1): no replicated-only run.
    context_parallel = parallel.cp_size > 1
    # Expert parallelism borrows its ranks from the FSDP (dp_shard x cp) ranks, never from
    # replicated ones (ParallelDims: efsdp = dp_shard x cp x tp / (etp x ep)).
    expert_parallel = parallel.ep_size > 1
    replicated = parallel.zero_stage == ZeroStage.NONE and parallel.dp_cp_size > 1 and (
        not replicated_only or context_parallel or expert_parallel
    )
    if parallel.zero_stage == ZeroStage.OS or replicated:
        if parallel.zero_stage == ZeroStage.OS:
            why = "torchtitan has no optimizer-state-only sharding"
        elif context_parallel:
            why = "torchtitan shards with FSDP2 over its data- and context-parallel ranks whenever cp_size > 1"
        elif expert_parallel:
            why = "torchtitan's expert-parallel ranks are carved from its FSDP2 (data_parallel_shard) ranks"
        else:
            why = "torchtitan replicates (DDP) only without tensor or pipeline parallelism"
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 2,
            f"{why}; FSDP2 keeping parameters gathered from forward to backward (ZeRO-2) needs no more memory",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS_G)
    if parallel.tp_size > 1 and not parallel.sequence_parallel:
        out.append(differs(
            "parallel.sequence_parallel", False, True,
            "torchtitan's tensor parallelism always shards the norms' activations over the sequence;"
            " it needs no more memory",
        ))
        parallel = replace(parallel, sequence_parallel=True)
    form = recompute_form(plan, parallel)
    if form in (RecomputeForm.SELECTIVE, RecomputeForm.FULL_PARTIAL, RecomputeForm.MIXED):
        counts = full_recompute_counts(plan, parallel)
        planned = "selective" if form is RecomputeForm.SELECTIVE else f"{parallel.recompute.value}, full in {list(counts)} layers per chunk"
        out.append(differs(
            "parallel.recompute", planned, "full in every layer",
            "torchtitan checkpoints activations in one mode for the whole model (none, full, or a"
            " per-operator selective policy unlike attention-core recomputation); every layer fully"
            " needs no more memory, and more time",
        ))
        parallel = all_full(parallel)
    if training.precision is Precision.FP16:
        out.append(differs(
            "training.precision", "fp16", "bf16", "torchtitan's mixed precision runs parameters in bfloat16 or float32 only",
        ))
        training = replace(training, precision=Precision.BF16)
    if training.precision is Precision.NVFP4:
        out.append(differs(
            "training.precision", "nvfp4", "mxfp8",
            "torchtitan's quantized linears (torchao) run MXFP8, not NVFP4; MXFP8 GEMMs run at half NVFP4's peak",
        ))
        training = replace(training, precision=Precision.MXFP8)
    training, muon = without_muon(training, "torchtitan")
    training, moments = without_bf16_moments(
        training, "torchtitan's AdamW keeps its moments in the dtype of the parameters it steps, FSDP2's fp32 shards",
    )
    training, act_input = without_fp8_act_input(plan.model, training, "torchtitan")
    training, dispatch = without_flex_dispatch(plan.model, training, "torchtitan")
    training, blocking = without_launch_blocking(training, "torchtitan")
    training, fp8_attention = without_fp8_attention(
        training, "torchtitan", "torchtitan's float8 and MXFP8 convert the linear layers only (torchao); F.scaled_dot_product_attention runs in 16 bit",
    )
    training, output_proj = without_fp8_output_proj(
        training, "torchtitan", "this export quantises torchtitan's transformer layers' linears only, not the output layer",
    )
    return Nearest(parallel, training, (*out, *muon, *moments, *act_input, *dispatch, *blocking, *fp8_attention, *output_proj))


def model_parts(plan: PlanToExport, parallel: ParallelConfig) -> list[list[str]]:
    """The modules of each model chunk, pipeline order, as torchtitan's Llama models name them."""
    parts: list[list[str]] = []
    first = 0
    for size in plan.chunk_layers(parallel):
        parts.append([f"layers.{i}" for i in range(first, first + size)])
        first += size
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def exact_offload(parallel: ParallelConfig) -> tuple[ParallelConfig, list[Difference]]:
    """torchtitan's offload nearest to the plan's: FSDP2's CPUOffloadPolicy
    (``training.enable_cpu_offload``) keeps the sharded parameters, their gradients and the
    optimizer states on the host and steps the optimizer there, which is optimizer+params offload
    over ZeRO-3; torchtitan applies FSDP2, and with it the offload, only where it shards
    (data_parallel_shard_degree > 1 or cp > 1)."""
    if parallel.offload is Offload.NONE:
        return parallel, []
    if parallel.dp_cp_size == 1:
        return replace(parallel, offload=Offload.NONE), [differs(
            "parallel.offload", parallel.offload.value, Offload.NONE.value,
            "torchtitan offloads through FSDP2 (training.enable_cpu_offload), which it applies only over"
            " several data- or context-parallel ranks; at one rank every state stays on the GPU",
        )]
    out: list[Difference] = []
    if parallel.offload is Offload.OPTIMIZER_PARAMS_ACTIVATIONS:
        out.append(differs(
            "parallel.offload", parallel.offload.value, Offload.OPTIMIZER_PARAMS.value,
            "torchtitan does not offload activation checkpoints: they stay on the GPU, more memory than planned",
        ))
    if parallel.offload is Offload.OPTIMIZER:
        out.append(differs(
            "parallel.offload", parallel.offload.value, Offload.OPTIMIZER_PARAMS.value,
            "torchtitan's CPU offload (FSDP2 CPUOffloadPolicy) keeps the parameters on the host with the"
            " optimizer states: less GPU memory, the parameters copied up for every forward and backward",
        ))
    if parallel.zero_stage != ZeroStage.OS_G_P:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 3,
            "FSDP2's CPU offload keeps only the shard of the parameters, gathered for each use (ZeRO-3)",
        ))
    return replace(parallel, offload=Offload.OPTIMIZER_PARAMS, zero_stage=ZeroStage.OS_G_P), out


def job_config(plan: PlanToExport, parallel: ParallelConfig, training: TrainingSpec) -> dict[str, dict[str, TomlValue]]:
    """The job TOML's sections for an exact configuration."""
    pp, dp = parallel.pp_size, parallel.dp_size
    sharded = parallel.zero_stage >= ZeroStage.OS_G
    llama_style = plan.model.mlp_activation is MlpActivation.SWIGLU
    model: dict[str, TomlValue] = {"name": "llama3" if llama_style else "custom", "flavor": plan.model.name}
    if training.precision is Precision.FP8:
        model["converters"] = ["quantize.linear.float8"]
    if training.precision is Precision.MXFP8:
        model["converters"] = ["quantize.linear.mx"]
    job: dict[str, dict[str, TomlValue]] = {
        "job": {"description": f"{plan.model.name} on {plan.num_gpus} GPUs (Partitura plan)"},
        "model": model,
        "training": {
            "seq_len": training.seq_length,
            "global_batch_size": training.global_batch_size,
            # Without a pipeline a local batch is one micro-batch and the rest is gradient
            # accumulation; with one, the local batch is split into pipeline micro-batches.
            "local_batch_size": parallel.micro_batch_size if pp == 1 else training.global_batch_size // dp,
            "mixed_precision_param": "bfloat16",
            # FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states on the host.
            **({"enable_cpu_offload": True} if parallel.offload is not Offload.NONE else {}),
        },
        "parallelism": {
            "data_parallel_replicate_degree": 1 if sharded else dp,
            "data_parallel_shard_degree": dp if sharded else 1,
            "fsdp_reshard_after_forward": "always" if parallel.zero_stage == ZeroStage.OS_G_P else "never",
            "tensor_parallel_degree": parallel.tp_size,
            "pipeline_parallel_degree": pp,
            # Its FSDP mesh is dp_shard x cp: ZeRO shards over both, as the cost model assumes.
            "context_parallel_degree": parallel.cp_size,
            # EP borrows from dp_shard x cp when the experts' TP degree is tp, from dp_shard x cp x
            # tp when it is 1 (torchtitan's ParallelDims): the two layouts the cost model costs.
            "expert_parallel_degree": parallel.ep_size,
            "expert_tensor_parallel_degree": parallel.etp_size,
        },
        "activation_checkpoint": {"mode": "full" if recompute_form(plan, parallel) is RecomputeForm.FULL_ALL else "none"},
        # torch.compile fuses the element-wise work around the GEMMs (the plan's fused kernels).
        "compile": {"enable": training.fused_kernels, "components": ["model", "loss"]},
    }
    if pp > 1:
        job["parallelism"].update({
            "pipeline_parallel_schedule": "Interleaved1F1B" if parallel.virtual_stages > 1 else "1F1B",
            "pipeline_parallel_microbatch_size": parallel.micro_batch_size,
            "module_fqns_per_model_part": model_parts(plan, parallel),
        })
    if training.precision is Precision.FP8:
        # FP8 GEMMs; weights are gathered in 16 bit, as the cost model counts them.
        job["quantize.linear.float8"] = {"recipe_name": "tensorwise"}
    if training.precision is Precision.MXFP8:
        # torchao's MXFP8 linears through cuBLAS's block-scaled GEMMs (torchtitan MXLinear's default).
        job["quantize.linear.mx"] = {"recipe_name": "mxfp8_cublas"}
    return job


def render_toml(sections: dict[str, dict[str, TomlValue]], header: list[str]) -> str:
    lines = [f"# {line}" for line in header]
    for name, values in sections.items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _toml(value: TomlValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(_toml(item) for item in value) + "]"


def export(plan: PlanToExport) -> Export:
    nearest = exact_config(plan)
    parallel, training, differences = nearest.parallel, nearest.training, nearest.differences
    header = [
        f"torchtitan job for {plan.model.name} on {plan.num_gpus} GPUs: {parallel.layout_text(' x ')}.",
        "exact: the plan as planned." if not differences else "NOT exact: the nearest configuration torchtitan runs; see the differences.",
        f"Run: NGPU={plan.processes_per_node} CONFIG_FILE=job.toml ./run_train.sh on each of {plan.num_nodes} node(s).",
    ]
    text = render_toml(job_config(plan, parallel, training), header)
    notes = [f"set [training] dataset and [model] hf_assets_path (tokenizer of {plan.model.vocab_size} tokens)"]
    if plan.model.mlp_activation is not MlpActivation.SWIGLU:
        notes.append("torchtitan ships Llama-style (SwiGLU) models; register this model's architecture as a custom model")
    if plan.model.head_dim is not None:
        notes.append(f"heads of {plan.model.head_dim} are not dim / n_heads wide: the flavor needs a model that"
                     " takes a head_dim (torchtitan's qwen3 does; llama3 does not)")
    notes.extend(window_notes(plan.model, "torchtitan's Llama", writes_window=False))
    notes.extend(kv_head_notes(plan.model, parallel.tp_size, "torchtitan", subshards=False))
    notes.append(f"register a flavor named {plan.model.name!r} with the model's shape, or rename [model] flavor")
    if plan.model.hidden_dropout or plan.model.attention_dropout:
        # torchtitan's Llama (torchtitan/models/llama3/model) has no dropout modules: a model
        # trained with dropout needs it added, and the plan costed its masks and kernels.
        notes.append(
            f"torchtitan's Llama has no dropout; this model trains with hidden_dropout {plan.model.hidden_dropout}"
            f" and attention_dropout {plan.model.attention_dropout}, which the plan costed: add them to the model"
        )
    return Export(
        ExportFormat.TORCHTITAN, not differences, parallel, training, differences,
        (LaunchFile("job.toml", "application/toml", text),), tuple(notes),
    )

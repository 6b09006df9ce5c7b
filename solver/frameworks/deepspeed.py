"""DeepSpeed: what it can run, and a plan as ``ds_config.json`` plus the launch of Megatron-DeepSpeed
(``pretrain_gpt.py`` with ``--deepspeed``), which brings tensor and pipeline parallelism.

Its pipeline engine accepts ZeRO-0/1 only: ZeRO-2/3 with pipeline parallelism is refused
(DeepSpeed ``PipelineEngine`` asserts the ZeRO stage is below 2). It runs one model chunk per
stage (no interleaving), reduces gradients only after the last backward pass of a step, splits
the transformer layers itself (Megatron-DeepSpeed's ``partition_method='type:transformer'``:
as even as possible, the first stages taking the remainder) and, under a pipeline, recomputes
every layer or none (``activation_checkpoint_interval``; Megatron-DeepSpeed refuses the block
method there). Without a pipeline, Megatron-DeepSpeed's own block recomputation applies.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from solver.cost.flops import layer_weight_count
from solver.cost.offload import (
    NVME_OPTIMIZER_SWAP_BUFFERS,
    NVME_PARAM_BUFFER_ELEMENTS,
    NVME_PARAM_SWAP_BUFFERS,
    NVME_SUB_GROUP_ELEMENTS,
    params_on_nvme,
)
from solver.frameworks.export import (
    Argument,
    Difference,
    Export,
    ExportFormat,
    LaunchFile,
    Nearest,
    PlanToExport,
    RecomputeForm,
    all_full,
    differs,
    fold_context_parallel,
    full_recompute_counts,
    kv_head_notes,
    launch_environment,
    recompute_form,
    render_shell,
    resplit,
    window_notes,
    without_activation_offload,
    without_bf16_moments,
    without_flex_dispatch,
    without_fp8_act_input,
    without_fp8_attention,
    without_fp8_output_proj,
    without_muon,
    without_overlap_grad_reduce,
)
from solver.spec.dimensions import NvmeOffload, Offload
from solver.spec.legality import offload_zero_stage, uniform_partition
from solver.spec.model import Architecture, MlpActivation, PositionEmbedding
from solver.spec.parallel import ParallelConfig, micro_batch_count
from solver.spec.rules import Rule, Violation
from solver.spec.training import DEFAULT_RECOMPUTE_MODULES, Precision, TrainingSpec, ZeroStage

# Parameters under this many elements per hidden unit (norm scales, biases) stay gathered
# under ZeRO-3 instead of being fetched per use: a few MB in all.
PERSISTENCE_ELEMENTS_PER_HIDDEN = 10
# Gradients of at most this many elements are reduced in one bucket (DeepSpeed's default, 5e8).
DEFAULT_BUCKET_ELEMENTS = 500_000_000
# Layers whose parameters ZeRO-3 holds gathered at once: the one computing and the one
# prefetched, as the cost model counts its buffers (solver.cost.memory.ZERO3_PREFETCHED_LAYERS;
# a test holds the two equal: solver.cost imports this package, so it cannot be imported here).
ZERO3_GATHERED_LAYERS = 2
# Where DeepSpeed keeps what is offloaded to NVMe: a directory on each node's local NVMe volume.
# DeepSpeed's own example path (config reference, offload_param / offload_optimizer nvme_path);
# the export cannot know the mount point, so its notes ask the user to set it.
NVME_PATH_PLACEHOLDER = "/local_nvme"


# DeepSpeed's one activation offload (activation_checkpointing.cpu_checkpointing) moves the
# checkpoints of recomputed layers; it has no offload of layers that are not recomputed.
ACTIVATION_OFFLOAD_REASON = (
    "DeepSpeed moves activations to the host only as the checkpoints of recomputed layers (cpu_checkpointing);"
    " it has no offload of the first N layers' activations without recomputation"
)


# DeepSpeed-MoE has no expert tensor-parallel size of its own: deepspeed.moe.layer.MoE takes
# ep_size and a flag, enable_expert_tensor_parallelism, that splits the experts over the model's
# tensor-parallel group (or not at all), set in the model code like ep_size.
EXPERT_TP_REASON = (
    "DeepSpeed-MoE has no expert tensor parallel size of its own (deepspeed.moe.layer.MoE takes ep_size and"
    " enable_expert_tensor_parallelism in the model code, splitting experts over the tensor-parallel group or not at all)"
)


def pipeline_zero_violations(parallel: ParallelConfig) -> list[Violation]:
    """ZeRO-2/3 with a pipeline: refused by DeepSpeed's pipeline engine (and run by no framework
    the 'any' rules stand for)."""
    zero, pp = parallel.zero_stage, parallel.pp_size
    if zero >= ZeroStage.OS_G and pp > 1:
        return [Violation(Rule.ZERO_WITH_PP, f"zero_stage {int(zero)} with pp_size {pp} is not supported (DeepSpeed allows only ZeRO-0/1 with pipelines)")]
    return []


def violations(parallel: ParallelConfig) -> list[Violation]:
    """What Megatron-DeepSpeed cannot run: ZeRO-2/3 with a pipeline, and context parallelism
    (its long-sequence option is DeepSpeed-Ulysses, an all-to-all over attention heads, not the
    ring exchange planned as cp_size)."""
    out = pipeline_zero_violations(parallel)
    if parallel.cp_size > 1:
        out.append(Violation(
            Rule.FRAMEWORK_CP,
            f"Megatron-DeepSpeed has no ring context parallelism; cp_size {parallel.cp_size} is not available",
        ))
    if parallel.activation_offload_layers:
        out.append(Violation(Rule.FRAMEWORK_ACTIVATION_OFFLOAD, ACTIVATION_OFFLOAD_REASON))
    if parallel.expert_tp_size is not None:
        out.append(Violation(
            Rule.FRAMEWORK_EXPERT_TP,
            EXPERT_TP_REASON + f"; parallel.expert_tp_size {parallel.expert_tp_size} must equal tp_size {parallel.tp_size}",
        ))
    return out


def zero_stage_written(parallel: ParallelConfig) -> int:
    """The ZeRO stage ds_config.json and --zero-stage name: the plan's, and ZeRO-1 for optimizer
    offload at one data-parallel rank planned as ZeRO-0 (DeepSpeed takes offload_optimizer with
    ZeRO-1 or more; at one rank ZeRO-0 and ZeRO-1 are one plan, gradients kept on the GPU)."""
    if parallel.offload is Offload.NONE:
        return int(parallel.zero_stage)
    needed = offload_zero_stage(parallel.offload, parallel.dp_cp_size, parallel.nvme_offload)
    return max(int(parallel.zero_stage), int(needed), int(ZeroStage.OS))


def offload_settings(parallel: ParallelConfig) -> dict[str, Any]:
    """ds_config's ``zero_optimization`` offload entries (DeepSpeed's DeepSpeedZeroOffloadOptimizerConfig
    and DeepSpeedZeroOffloadParamConfig): the optimizer states and step to pinned host memory, and
    with parameter offload the parameters too; what the plan keeps on NVMe (``nvme_offload``)
    goes to ``device: nvme`` under ``nvme_path`` with the swap buffers the cost model counts
    (``solver.cost.offload``: optimizer ``buffer_count``; parameter ``buffer_count`` x
    ``buffer_size``, ``max_in_cpu`` 0 so that none stay in host memory)."""
    out: dict[str, Any] = {}
    nvme = parallel.nvme_offload
    if parallel.offload is not Offload.NONE:
        if nvme is NvmeOffload.NONE:
            out["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        else:
            out["offload_optimizer"] = {
                "device": "nvme", "nvme_path": NVME_PATH_PLACEHOLDER, "pin_memory": True, "buffer_count": NVME_OPTIMIZER_SWAP_BUFFERS,
            }
    if parallel.offload.offloads_params:
        if params_on_nvme(nvme):
            out["offload_param"] = {
                "device": "nvme", "nvme_path": NVME_PATH_PLACEHOLDER, "pin_memory": True, "buffer_count": NVME_PARAM_SWAP_BUFFERS,
                "buffer_size": int(NVME_PARAM_BUFFER_ELEMENTS), "max_in_cpu": 0,
            }
        else:
            out["offload_param"] = {"device": "cpu", "pin_memory": True}
    if nvme is not NvmeOffload.NONE:
        out["sub_group_size"] = int(NVME_SUB_GROUP_ELEMENTS)  # the optimizer swapper's buffers are one sub-group each
    return out


def pipeline_split(num_layers: int, pp_size: int) -> tuple[int, ...]:
    """Transformer layers per stage as DeepSpeed's ``type:transformer`` partition balances them:
    as even as possible, one more layer on each of the first ``num_layers % pp_size`` stages."""
    base, extra = divmod(num_layers, pp_size)
    return tuple(base + (1 if stage < extra else 0) for stage in range(pp_size))


def exact_config(plan: PlanToExport) -> Nearest:
    """The configuration and training settings nearest to the plan that DeepSpeed runs exactly,
    and what differs."""
    parallel, training = plan.parallel, plan.training
    out: list[Difference] = []
    if parallel.cp_size > 1:
        parallel, training, folded = fold_context_parallel(
            parallel, training,
            "Megatron-DeepSpeed has no ring context parallelism: its GPUs become data-parallel"
            " replicas, each holding whole sequences (activations cp_size times larger)",
        )
        out += folded
    if parallel.ep_size > 1:
        # DeepSpeed-MoE takes its expert-parallel size in the model code
        # (deepspeed.moe.layer.MoE(ep_size=...)), not in a launch flag or ds_config.json.
        out.append(differs(
            "parallel.ep_size", parallel.ep_size, 1,
            "DeepSpeed sets expert parallelism in the model code (deepspeed.moe.layer.MoE(ep_size=...)), which this"
            " launch config does not write: every GPU holds all experts (more memory, no all-to-all)",
        ))
        parallel = replace(parallel, ep_size=1)
    if parallel.expert_tp_size is not None:
        out.append(differs(
            "parallel.expert_tp_size", parallel.expert_tp_size, parallel.tp_size,
            EXPERT_TP_REASON + ": this launch config leaves the experts split over tp",
        ))
        parallel = replace(parallel, expert_tp_size=None)
    parallel, dropped = without_activation_offload(
        parallel, ACTIVATION_OFFLOAD_REASON + ": every layer's activations stay on the GPU, more memory than planned",
    )
    out += dropped
    pp = parallel.pp_size
    if parallel.zero_stage >= ZeroStage.OS_G and pp > 1:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 1,
            "DeepSpeed's pipeline engine runs ZeRO-0/1 only; ZeRO-1 keeps gradients replicated,"
            " so each GPU needs more memory than planned",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS)
    form = recompute_form(plan, parallel)
    if pp > 1:
        chunks = plan.chunk_layers(parallel)
        # Layers on each stage (all its chunks when interleaved).
        layers = tuple(sum(chunks[stage::pp]) for stage in range(pp))
        split = pipeline_split(plan.model.num_layers, pp)
        if parallel.virtual_stages > 1:
            out.append(differs(
                "parallel.virtual_stages", parallel.virtual_stages, 1,
                "DeepSpeed's pipeline engine runs one model chunk per stage (no interleaved"
                " schedule): a larger pipeline bubble, fewer activations in flight",
            ))
        if parallel.virtual_stages > 1 or chunks != split:
            if layers != split:
                out.append(differs(
                    "parallel.stage_layers", layers, split,
                    "DeepSpeed splits the transformer layers itself, as evenly as possible with"
                    " the remainder on the first stages (partition_method type:transformer)",
                ))
            stage_layers = None if split == uniform_partition(plan.model.num_layers, pp) else split
            parallel = resplit(parallel, form, stage_layers, 1)
        form_now = recompute_form(plan, parallel)
        if form_now in (RecomputeForm.FULL_PARTIAL, RecomputeForm.MIXED):
            counts = full_recompute_counts(plan, parallel)
            out.append(differs(
                "parallel.full_recompute_layers", counts, plan.chunk_layers(parallel),
                "under a pipeline DeepSpeed recomputes every layer or none"
                " (activation_checkpoint_interval); every layer needs no more memory, and more time",
            ))
            parallel = all_full(parallel)
        training, reduce = without_overlap_grad_reduce(
            training,
            "DeepSpeed's pipeline engine reduces gradients after the last backward pass of the step (ReduceGrads follows the"
            " last BackwardPass)",
            "same memory, more time",
        )
        out += reduce
    elif form is RecomputeForm.MIXED:
        out.append(differs(
            "parallel.recompute", f"selective, full in {list(full_recompute_counts(plan, parallel))} layers", "full in every layer",
            "Megatron-DeepSpeed applies one recompute granularity to the whole model; every layer"
            " fully needs no more memory, and more time",
        ))
        parallel = all_full(parallel)
    if parallel.offload is Offload.OPTIMIZER_PARAMS_ACTIVATIONS and recompute_form(plan, parallel) is not RecomputeForm.FULL_ALL:
        out.append(differs(
            "parallel.offload", parallel.offload.value, Offload.OPTIMIZER_PARAMS.value,
            "DeepSpeed moves checkpoints to the CPU (cpu_checkpointing) only under its own activation"
            " checkpointing, which Megatron-DeepSpeed runs when every layer is recomputed: the"
            " checkpoints stay on the GPU, more memory than planned",
        ))
        parallel = replace(parallel, offload=Offload.OPTIMIZER_PARAMS)
    if recompute_form(plan, parallel) is RecomputeForm.SELECTIVE and training.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
        out.append(differs(
            "training.recompute_modules", tuple(m.value for m in training.recompute_modules), tuple(m.value for m in DEFAULT_RECOMPUTE_MODULES),
            "Megatron-DeepSpeed's selective recomputation recomputes the attention core only (it has no"
            " --recompute-modules): the other modules' activations stay in memory, less time",
        ))
        training = replace(training, recompute_modules=DEFAULT_RECOMPUTE_MODULES)
    training, fp8_attention = without_fp8_attention(training, "Megatron-DeepSpeed")
    training, output_proj = without_fp8_output_proj(training, "Megatron-DeepSpeed")
    out.extend((*fp8_attention, *output_proj))
    if training.precision in (Precision.FP8, Precision.MXFP8, Precision.NVFP4):
        out.append(differs(
            "training.precision", training.precision.value, "bf16",
            f"DeepSpeed and Megatron-DeepSpeed have no {training.precision.value} GEMM setting; bf16 GEMMs take longer",
        ))
        training = replace(training, precision=Precision.BF16)
    training, muon = without_muon(training, "DeepSpeed")
    training, moments = without_bf16_moments(
        training,
        "the optimizer this ds_config.json configures (DeepSpeed's fp32 optimizer beside its bf16/fp16 engine, or its CPU Adam)"
        " keeps Adam's moments in fp32",
    )
    training, act_input = without_fp8_act_input(plan.model, training, "DeepSpeed-MoE")
    training, dispatch = without_flex_dispatch(plan.model, training, "DeepSpeed-MoE")
    return Nearest(parallel, training, (*out, *muon, *moments, *act_input, *dispatch))


def reduce_bucket_elements(stage: int, layer_elements: int, training: TrainingSpec) -> int:
    """``reduce_bucket_size``: at ZeRO-1/2 the bucket the plan's memory charged where its stack
    states one (``TrainingSpec.zero_reduce_bucket_params``: ZeRO-1's flattened buckets, ZeRO-2's
    contiguous buffer); else about one layer's gradients at ZeRO-2/3 and DeepSpeed's default
    below."""
    if stage in (ZeroStage.OS, ZeroStage.OS_G) and training.zero_reduce_bucket_params > 0:
        return training.zero_reduce_bucket_params
    return layer_elements if stage >= ZeroStage.OS_G else DEFAULT_BUCKET_ELEMENTS


def ds_config(plan: PlanToExport, parallel: ParallelConfig, training: TrainingSpec) -> dict[str, Any]:
    """``ds_config.json``: batch, precision and ZeRO settings. Bucket sizes follow the cost
    model's assumptions: gradients reduced about one layer at a time, and under ZeRO-3 the
    layer in use and the next one prefetched gathered at once (``ZERO3_GATHERED_LAYERS``)."""
    layer_elements = layer_weight_count(plan.model) // parallel.tp_size  # the cost model's dense layer (biases and norms are a few h)
    stage = zero_stage_written(parallel)
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": training.overlap_grad_reduce,
        "contiguous_gradients": True,
        "reduce_scatter": True,
        "reduce_bucket_size": reduce_bucket_elements(stage, layer_elements, training),
        "allgather_bucket_size": DEFAULT_BUCKET_ELEMENTS,
    }
    if stage == ZeroStage.OS_G_P:
        del zero["allgather_bucket_size"]  # ZeRO-3 gathers by prefetch bucket instead
        zero.update({
            "stage3_prefetch_bucket_size": layer_elements,
            "stage3_max_live_parameters": ZERO3_GATHERED_LAYERS * layer_elements,
            "stage3_max_reuse_distance": ZERO3_GATHERED_LAYERS * layer_elements,
            "stage3_param_persistence_threshold": PERSISTENCE_ELEMENTS_PER_HIDDEN * plan.model.hidden_size,
        })
        if training.optimizer_sub_group_params > 0:
            # The sub-group the plan's memory charged the step's gradient copy over
            # (solver.cost.memory.optimizer_step_copy_bytes).
            zero["sub_group_size"] = training.optimizer_sub_group_params
    zero.update(offload_settings(parallel))
    config: dict[str, Any] = {
        "train_batch_size": training.global_batch_size,
        "train_micro_batch_size_per_gpu": parallel.micro_batch_size,
        "gradient_accumulation_steps": micro_batch_count(training.global_batch_size, parallel.dp_size, parallel.micro_batch_size),
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "zero_optimization": zero,
        "wall_clock_breakdown": False,
    }
    if training.precision is Precision.FP16:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    else:
        config["bf16"] = {"enabled": True}
    if recompute_form(plan, parallel) in (RecomputeForm.FULL_ALL, RecomputeForm.FULL_PARTIAL):
        to_host = parallel.offload is Offload.OPTIMIZER_PARAMS_ACTIVATIONS  # cpu_checkpointing moves partitioned checkpoints
        config["activation_checkpointing"] = {
            "partition_activations": to_host, "contiguous_memory_optimization": False, "cpu_checkpointing": to_host,
        }
    return config


def launcher_arguments(plan: PlanToExport, parallel: ParallelConfig, training: TrainingSpec) -> list[Argument]:
    """Megatron-DeepSpeed ``pretrain_gpt.py`` arguments for an exact configuration."""
    model = plan.model
    args: list[Argument] = [("--tensor-model-parallel-size", str(parallel.tp_size))]
    if parallel.pp_size > 1:
        args.append(("--pipeline-model-parallel-size", str(parallel.pp_size)))
    else:
        args.append(("--no-pipeline-parallel", None))
    if parallel.sequence_parallel and parallel.tp_size > 1:
        args.append(("--sequence-parallel", None))
    args += [("--micro-batch-size", str(parallel.micro_batch_size)), ("--global-batch-size", str(training.global_batch_size))]
    form = recompute_form(plan, parallel)
    if form is RecomputeForm.SELECTIVE:
        args.append(("--recompute-granularity", "selective"))
    elif form is RecomputeForm.FULL_ALL:
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1"),
                 ("--deepspeed-activation-checkpointing", None)]
        if parallel.offload is Offload.OPTIMIZER_PARAMS_ACTIVATIONS:
            # Megatron-DeepSpeed hands these to deepspeed.checkpointing.configure, over ds_config's.
            args += [("--partition-activations", None), ("--checkpoint-in-cpu", None)]
    elif form is RecomputeForm.FULL_PARTIAL:  # no pipeline: one chunk, so any count is a block
        args += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                 ("--recompute-num-layers", str(full_recompute_counts(plan, parallel)[0]))]
    args.append(("--fp16", None) if training.precision is Precision.FP16 else ("--bf16", None))
    if training.flash_attention:
        args.append(("--use-flash-attn-v2", None))
    if not training.fused_kernels:
        args += [("--no-bias-gelu-fusion", None), ("--no-masked-softmax-fusion", None), ("--no-bias-dropout-fusion", None)]
    args += [
        ("--num-layers", str(model.num_layers)),
        ("--hidden-size", str(model.hidden_size)),
        ("--ffn-hidden-size", str(model.ffn_hidden_size)),
        ("--num-attention-heads", str(model.num_attention_heads)),
    ]
    if model.num_kv_heads < model.num_attention_heads:
        args.append(("--num-key-value-heads", str(model.num_kv_heads)))
    if model.head_dim is not None:  # heads not hidden / heads wide (Megatron's --kv-channels)
        args.append(("--kv-channels", str(model.head_dim)))
    args += [("--seq-length", str(training.seq_length)), ("--max-position-embeddings", str(max(model.seq_length, training.seq_length)))]
    if model.position_embedding is PositionEmbedding.NONE:
        args += [("--use-rotary-position-embeddings", None), ("--no-position-embedding", None)]
    if model.mlp_activation is MlpActivation.SWIGLU:
        args += [("--swiglu", None), ("--normalization", "rmsnorm"), ("--disable-bias-linear", None)]
    if model.mlp_activation is MlpActivation.SQUARED_RELU:
        # Nemotron-style layers: squared ReLU (ParallelMLP's squared_relu branch, no bias-GeLU
        # fusion), the default LayerNorm, no biases.
        args += [("--squared-relu", None), ("--disable-bias-linear", None)]
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    # The model's dropouts (Megatron-DeepSpeed's defaults are Megatron-LM's, 0.1 each).
    args += [("--hidden-dropout", str(model.hidden_dropout)), ("--attention-dropout", str(model.attention_dropout))]
    if parallel.offload is not Offload.NONE:
        args.append(("--cpu-optimizer", None))  # Megatron-DeepSpeed builds DeepSpeedCPUAdam, which offload_optimizer steps
    args += [("--deepspeed", None), ("--deepspeed_config", "ds_config.json"), ("--zero-stage", str(zero_stage_written(parallel)))]
    return args


def export(plan: PlanToExport) -> Export:
    nearest = exact_config(plan)
    parallel, training, differences = nearest.parallel, nearest.training, nearest.differences
    program = "pretrain_bert.py" if plan.model.architecture is Architecture.ENCODER else "pretrain_gpt.py"
    header = [
        f"Megatron-DeepSpeed launch for {plan.model.name} on {plan.num_gpus} GPUs ({plan.num_nodes} node(s) x {plan.processes_per_node}):"
        f" {parallel.layout_text(' x ')}, ZeRO-{zero_stage_written(parallel)}"
        + (f", offload {parallel.offload.value} to host memory" if parallel.offload is not Offload.NONE else "")
        + (f", {parallel.nvme_offload.value} on NVMe (set nvme_path in ds_config.json)." if parallel.nvme_offload is not NvmeOffload.NONE else "."),
        "exact: the plan as planned." if not differences else "NOT exact: the nearest configuration DeepSpeed runs; see the differences.",
        "HOSTFILE lists the nodes (one 'host slots=N' line each); ds_config.json sits beside this script;",
        "add data, tokenizer, optimizer and checkpoint arguments in EXTRA_ARGS.",
    ]
    launcher = ["deepspeed", '--hostfile "${HOSTFILE:-hostfile}"', f"--num_nodes {plan.num_nodes}", f"--num_gpus {plan.processes_per_node}"]
    environment = ["export CUDA_DEVICE_MAX_CONNECTIONS=1"] if parallel.tp_size > 1 else []
    environment += launch_environment(training)
    script = render_shell(program, launcher, launcher_arguments(plan, parallel, training), header, environment)
    config = json.dumps(ds_config(plan, parallel, training), indent=2) + "\n"
    files = (
        LaunchFile("ds_config.json", "application/json", config),
        LaunchFile("launch.sh", "text/x-shellscript", script),
    )
    notes: tuple[str, ...] = (f"vocabulary of {plan.model.vocab_size} tokens: pass your tokenizer",
                              *window_notes(plan.model, "Megatron-DeepSpeed", writes_window=False),
                              *kv_head_notes(plan.model, parallel.tp_size, "Megatron-DeepSpeed", subshards=False))
    if parallel.nvme_offload is not NvmeOffload.NONE:
        notes += (
            f"nvme_path in ds_config.json is a placeholder ({NVME_PATH_PLACEHOLDER}): set it to a directory on each node's"
            f" local NVMe volume, with room for the {parallel.nvme_offload.value} states the plan keeps there"
            " (memory.nvme_gbytes_per_node), before launching",
        )
    return Export(ExportFormat.DEEPSPEED, not differences, parallel, training, differences, files, notes)

"""Megatron-LM / Megatron-core: what it can run, and a plan as ``pretrain_gpt.py`` arguments.

ZeRO-1 is its distributed optimizer (``--use-distributed-optimizer``: optimizer states sharded
over the data-parallel ranks, gradients and parameters replicated). ZeRO-2 and ZeRO-3 are
Megatron-FSDP (NVIDIA/Megatron-LM 8f1c2f8, the commit Megatron-Bridge df0289c pins:
megatron/core/distributed/fsdp; ``--use-megatron-fsdp --data-parallel-sharding-strategy
optim_grads`` / ``optim_grads_params``, docs/user-guide/parallelism-guide.md: "optim_grads -
Shard gradients + optimizer (ZeRO-2)", "optim_grads_params - Shard parameters + gradients +
optimizer (ZeRO-3)"), with the flags megatron-core's own user guide sets beside it
(docs/user-guide/features/custom_fsdp.md: ``--no-gradient-accumulation-fusion
--use-distributed-optimizer``; ``--ckpt-format fsdp_dtensor``, which Megatron-LM's
``validate_args`` asserts). Megatron-FSDP is documented and tested with tensor, context and
expert parallelism ("Compatible with TP, EP and CP configurations"; the unit test
``test_compatible_with_nd_parallel`` runs TP2, EP2_ETP2 and outer-DP2 x EP2, the functional
tests TP with CP), never under a pipeline: the planner runs it with ``pp_size`` 1 only.

Partial activation offload (``activation_offload_layers`` N) is ``--cpu-offloading-num-layers
N``: Megatron-LM builds its TransformerConfig flags from the dataclass and leaves
``cpu_offloading`` itself out of the command line; ``validate_args`` sets it when N > 0, and
``cpu_offloading_weights`` defaults to False (activations only, what the cost model moves).
Megatron-core allows it with one pipeline stage and no recomputation (TransformerConfig
``__post_init__``), beside its optimizer CPU offload (no check relates the two) and beside
Megatron-FSDP (Megatron-Bridge's Llama 3 70B GB200/GB300 presets set both).

Layers: an even split is ``--pipeline-model-parallel-size`` (and, interleaved,
``--num-layers-per-virtual-pipeline-stage``); any other split is written as
``--pipeline-model-parallel-layout`` (megatron-core ``PipelineParallelLayerLayout``: one
``|``-separated segment per model chunk in pipeline order, ``E`` the embedding, ``t`` a
transformer layer, ``L`` the loss head), which also sets the virtual stages.

Recomputation is one setting for the whole model: ``--recompute-granularity selective``
(the attention core), or ``full`` with ``--recompute-method uniform`` (every layer) or
``block`` with ``--recompute-num-layers N`` (the first N layers of every model chunk). A plan
whose chunks recompute different numbers of layers that no single N gives, or that mixes full
and selective recomputation, is not exact here.
"""

from __future__ import annotations

from dataclasses import replace

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
    block_recompute_layers,
    differs,
    dispatcher_notes,
    full_recompute_counts,
    kv_head_notes,
    launch_environment,
    recompute_form,
    render_shell,
    window_notes,
    window_skip_freq,
    without_bf16_moments,
    without_fp8_act_input,
    without_fp8_attention,
    without_nvme,
    without_overlap_grad_reduce,
)
from solver.spec.dimensions import Offload
from solver.spec.model import Architecture, MlpActivation, ModelSpec, PositionEmbedding, Router
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import (
    DEFAULT_RECOMPUTE_MODULES,
    LossKernel,
    MoeDispatcher,
    MomentsDtype,
    OptimizerKind,
    Precision,
    TrainingSpec,
    ZeroStage,
)


def violations(parallel: ParallelConfig) -> list[Violation]:
    """What Megatron-core cannot run: Megatron-FSDP (ZeRO-2/3) under a pipeline (see the module)."""
    zero, pp = parallel.zero_stage, parallel.pp_size
    if zero >= ZeroStage.OS_G and pp > 1:
        return [Violation(
            Rule.ZERO_WITH_PP,
            f"megatron shards gradients (ZeRO-2) or parameters (ZeRO-3) with Megatron-FSDP, which runs with TP, CP and EP"
            f" but not pipeline parallelism; zero_stage {int(zero)} with pp_size {pp} is not available",
        )]
    return []


def fsdp_strategy(zero_stage: ZeroStage) -> str | None:
    """Megatron-FSDP's ``data_parallel_sharding_strategy`` for a ZeRO stage (None: not FSDP)."""
    return {ZeroStage.OS_G: "optim_grads", ZeroStage.OS_G_P: "optim_grads_params"}.get(ZeroStage(zero_stage))


def exact_config(plan: PlanToExport) -> Nearest:
    """The configuration nearest to the plan that Megatron runs exactly, and what differs."""
    parallel, nvme = without_nvme(plan.parallel, "megatron-core")
    out: list[Difference] = list(nvme)
    if parallel.offload.offloads_params:
        out.append(differs(
            "parallel.offload", parallel.offload.value, Offload.OPTIMIZER.value,
            "megatron-core offloads the optimizer (optimizer_cpu_offload) but not the parameters, nor"
            " recomputation checkpoints (its cpu_offloading moves whole layers' activations and weights,"
            " another scheme): the 16-bit weights and checkpoints stay on the GPU, more memory than planned",
        ))
        parallel = replace(parallel, offload=Offload.OPTIMIZER)
    if parallel.zero_stage > ZeroStage.OS and parallel.offload is not Offload.NONE:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 1,
            "megatron-core's optimizer offload steps the distributed optimizer's (ZeRO-1) shard on the"
            " CPU and keeps its gradient buffer on the GPU until the step; the plan streams gradients"
            " to the host during backward (ZeRO-2 offload), so each GPU needs more memory than planned",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS)
    if parallel.zero_stage > ZeroStage.OS and parallel.pp_size > 1:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 1,
            "Megatron shards gradients and parameters with Megatron-FSDP, which it does not run under a pipeline;"
            " its distributed optimizer (ZeRO-1) keeps gradients and parameters replicated, so each GPU needs more"
            " memory than planned",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS)
    parallel, recompute = exact_recompute(plan, parallel)
    training = plan.training
    if training.optimizer is OptimizerKind.MUON:
        parallel, training, muon = _muon_nearest(parallel, training)
        out += muon
    if plan.training.optimizer is not OptimizerKind.ADAM or not distributed_optimizer(parallel):
        # megatron/core/optimizer/optimizer_config.py at 8f1c2f8ae: '--use-precision-aware-optimizer
        # only supported with adam' and 'only supported with distributed optimizer'.
        training, moments = without_bf16_moments(
            training, "megatron-core's precision-aware optimizer (bf16 exp_avg / exp_avg_sq) runs with Adam and the distributed optimizer only",
        )
        out += moments
    training, act_input = without_fp8_act_input(plan.model, training, "megatron-core")
    training, fp8_attention = without_fp8_attention(
        training, "Megatron-LM",
        "Megatron-LM has no command-line flag for TransformerConfig.fp8_dot_product_attention (megatron/training/arguments.py"
        " leaves it out), so this script cannot turn it on; a launcher that builds the TransformerConfig itself"
        " (Megatron-Bridge: mixed_precision.fp8_dot_product_attention) runs as planned",
    )
    return Nearest(parallel, training, (*out, *recompute, *act_input, *fp8_attention))


def _muon_nearest(parallel: ParallelConfig, training: TrainingSpec) -> tuple[ParallelConfig, TrainingSpec, list[Difference]]:
    """Muon as megatron-core runs it at 8f1c2f8 (megatron/training/arguments.py ``validate_args``:
    Muon "does not support" the distributed optimizer, Megatron-FSDP, overlap grad reduce or
    overlap param gather "for now"; ``--optimizer dist_muon`` is its own layer-wise distributed
    optimizer): ZeRO-1 at most, gradients reduced after backward."""
    out: list[Difference] = []
    if parallel.zero_stage > ZeroStage.OS:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 1,
            "megatron-core's Muon does not run under Megatron-FSDP; dist_muon shards the optimizer states only (ZeRO-1),"
            " so each GPU holds its gradients and parameters whole, more memory than planned",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS)
    training, reduce = without_overlap_grad_reduce(
        training, "megatron-core's Muon does not overlap the gradient reduction (validate_args asserts it off)",
        "the reduction runs after the last backward, a longer step than planned",
    )
    return parallel, training, [*out, *reduce]


def distributed_optimizer(parallel: ParallelConfig) -> bool:
    """Whether the launch uses megatron-core's distributed optimizer (``--use-distributed-optimizer``):
    ZeRO-1, Megatron-FSDP (ZeRO-2/3), or any offload (at one rank, with offload, ZeRO-0 and ZeRO-1
    are one plan)."""
    return parallel.zero_stage == ZeroStage.OS or parallel.offload is not Offload.NONE or fsdp_strategy(parallel.zero_stage) is not None


def exact_recompute(plan: PlanToExport, parallel: ParallelConfig) -> tuple[ParallelConfig, tuple[Difference, ...]]:
    """Megatron-core's recomputation (one granularity; full with one block size N for every
    chunk) nearest to the plan's, never with more activation memory. Shared with NeMo, which
    passes the same settings to megatron-core."""
    form = recompute_form(plan, parallel)
    layers, counts = plan.chunk_layers(parallel), full_recompute_counts(plan, parallel)
    if form is RecomputeForm.FULL_PARTIAL and block_recompute_layers(layers, counts) is None:
        n = max(counts)
        exported = tuple(min(n, size) for size in layers)
        return replace(parallel, full_recompute_layers=exported), (differs(
            "parallel.full_recompute_layers", counts, exported,
            "megatron-core recomputes the first N layers of every pipeline chunk, one N for all"
            f" (recompute_method block); N = {n}, the plan's largest count, recomputes at least"
            " the planned layers everywhere: no more memory, more time",
        ),)
    if form is RecomputeForm.MIXED:
        return all_full(parallel), (differs(
            "parallel.recompute", f"selective, full in {list(counts)} layers per chunk", "full in every layer",
            "megatron-core applies one recompute granularity to the whole model, full or"
            " selective; recomputing every layer fully needs no more memory, and more time",
        ),)
    return parallel, ()


def recompute_settings(plan: PlanToExport, parallel: ParallelConfig) -> tuple[str | None, str | None, int | None]:
    """megatron-core's (recompute_granularity, recompute_method, recompute_num_layers) for an
    exact configuration."""
    form = recompute_form(plan, parallel)
    if form is RecomputeForm.SELECTIVE:
        return "selective", None, None
    if form is RecomputeForm.FULL_ALL:
        return "full", "uniform", 1  # every layer is its own recompute unit: each keeps its input
    if form is RecomputeForm.FULL_PARTIAL:
        n = block_recompute_layers(plan.chunk_layers(parallel), full_recompute_counts(plan, parallel))
        return "full", "block", n
    return None, None, None


def pipeline_layout(layers: tuple[int, ...]) -> str:
    """megatron-core's layout string for per-chunk layer counts (pipeline order)."""
    segments = [f"t*{n}" if n > 1 else "t" * n for n in layers]
    segments[0] = "E" + segments[0]
    segments[-1] = segments[-1] + "L"
    return "|".join(segments)


def arguments(plan: PlanToExport, parallel: ParallelConfig, training: TrainingSpec | None = None) -> list[Argument]:
    """``pretrain_gpt.py`` arguments for an exact configuration and its training settings
    (``training``; None: the plan's). Data, tokenizer, learning-rate and checkpoint arguments are
    the user's."""
    model = plan.model
    training = plan.training if training is None else training
    tp, pp = parallel.tp_size, parallel.pp_size
    args: list[Argument] = [("--tensor-model-parallel-size", str(tp)), ("--pipeline-model-parallel-size", str(pp))]
    if parallel.cp_size > 1:
        # Ring attention through Transformer Engine (cp_comm_type p2p, megatron-core's default).
        args.append(("--context-parallel-size", str(parallel.cp_size)))
    if parallel.ep_size > 1:
        # Expert parallelism carved from the data-parallel ranks (and, at an expert tensor
        # parallel size below tp, from the tensor-parallel ones too).
        args.append(("--expert-model-parallel-size", str(parallel.ep_size)))
    if parallel.expert_tp_size is not None:
        # megatron-core's expert tensor parallel size defaults to tp (arguments.py validate_args);
        # written where the plan splits the experts otherwise.
        args.append(("--expert-tensor-parallel-size", str(parallel.expert_tp_size)))
    layers = plan.chunk_layers(parallel)
    if pp > 1 and len(set(layers)) > 1:
        args.append(("--pipeline-model-parallel-layout", pipeline_layout(layers)))
    elif parallel.virtual_stages > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", str(layers[0])))
    if parallel.sequence_parallel and tp > 1:
        args.append(("--sequence-parallel", None))
    args += [("--micro-batch-size", str(parallel.micro_batch_size)), ("--global-batch-size", str(training.global_batch_size))]
    granularity, method, num_layers = recompute_settings(plan, parallel)
    if granularity is not None:
        args.append(("--recompute-granularity", granularity))
    if granularity == "selective" and training.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
        args.append(("--recompute-modules", tuple(m.value for m in training.recompute_modules)))
    if method is not None:
        args += [("--recompute-method", method), ("--recompute-num-layers", str(num_layers))]
    strategy = fsdp_strategy(parallel.zero_stage)
    if training.optimizer is OptimizerKind.MUON:
        # dist_muon is Muon's layer-wise distributed optimizer, which asserts
        # --use-distributed-optimizer off; the TP mode is written so the launch orthogonalises
        # split matrices as the plan costed (solver.cost.muon; 8f1c2f8's default is blockwise).
        optimizer = "dist_muon" if parallel.zero_stage == ZeroStage.OS else "muon"
        args += [("--optimizer", optimizer), ("--muon-tp-mode", training.muon_tp_mode.value)]
    elif training.optimizer is OptimizerKind.SGD:
        args.append(("--optimizer", "sgd"))
    if distributed_optimizer(parallel) and training.optimizer is not OptimizerKind.MUON:
        args.append(("--use-distributed-optimizer", None))
    if strategy is not None:
        # Megatron-FSDP as megatron-core's user guide launches it (see the module).
        args += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", strategy),
                 ("--no-gradient-accumulation-fusion", None), ("--ckpt-format", "fsdp_dtensor")]
    if parallel.offload is not Offload.NONE:
        # megatron-core OptimizerConfig: every optimizer state and its step on the CPU
        # (HybridDeviceOptimizer), which Megatron-LM runs with the precision-aware optimizer.
        args += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", "1.0"), ("--use-precision-aware-optimizer", None)]
    if training.moments_dtype is MomentsDtype.BF16:
        # Transformer Engine's FusedAdam keeps Adam's moments in bf16 (megatron-core OptimizerConfig
        # exp_avg_dtype / exp_avg_sq_dtype, read only with the precision-aware optimizer).
        if parallel.offload is Offload.NONE:
            args.append(("--use-precision-aware-optimizer", None))
        args += [("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    if parallel.activation_offload_layers:
        # Transformer Engine's CPU offload of the first N layers' activations (validate_args
        # turns cpu_offloading on; weights stay on the GPU by default).
        args.append(("--cpu-offloading-num-layers", str(parallel.activation_offload_layers)))
    if training.overlap_grad_reduce:
        args.append(("--overlap-grad-reduce", None))
        if parallel.zero_stage == ZeroStage.OS or strategy is not None:
            args.append(("--overlap-param-gather", None))
    args += precision_arguments(training.precision)
    if training.fp8_output_proj:
        # TransformerConfig.fp8_output_proj (NVIDIA/Megatron-LM #4825): the LM head under the MXFP8 autocast.
        args.append(("--fp8-output-proj", None))
    args.append(("--attention-backend", "flash" if training.flash_attention else "unfused"))
    if training.loss_kernel is LossKernel.IN_PLACE:
        # Transformer Engine's cross entropy (megatron/core/model_parallel_config.py
        # cross_entropy_loss_fusion, cross_entropy_fusion_impl 'te'), the in-place loss costed.
        args += [("--cross-entropy-loss-fusion", None), ("--cross-entropy-fusion-impl", "te")]
    if not training.fused_kernels:
        # Megatron-LM's bias_swiglu_fusion governs SwiGLU, bias_gelu_fusion every other activation.
        swiglu = model.mlp_activation is MlpActivation.SWIGLU
        args += [("--no-bias-swiglu-fusion" if swiglu else "--no-bias-gelu-fusion", None),
                 ("--no-masked-softmax-fusion", None), ("--no-bias-dropout-fusion", None)]
    return args + model_arguments(plan)


def precision_arguments(precision: Precision) -> list[Argument]:
    if precision is Precision.FP16:
        return [("--fp16", None)]
    if precision is Precision.FP8:
        # FP8 GEMMs through Transformer Engine; weights, gradients and the rest stay bf16.
        return [("--bf16", None), ("--fp8-format", "hybrid"), ("--transformer-impl", "transformer_engine")]
    if precision is Precision.MXFP8:
        # Transformer Engine's MXFP8 block scaling (megatron-core fp8_recipe 'mxfp8', Blackwell only).
        return [("--bf16", None), ("--fp8-format", "hybrid"), ("--fp8-recipe", "mxfp8"), ("--transformer-impl", "transformer_engine")]
    if precision is Precision.NVFP4:
        # Transformer Engine's NVFP4BlockScaling (Megatron-LM --fp4-format e2m1 --fp4-recipe nvfp4).
        return [("--bf16", None), ("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4"), ("--transformer-impl", "transformer_engine")]
    return [("--bf16", None)]


def model_arguments(plan: PlanToExport) -> list[Argument]:
    """The model's shape as Megatron-LM names it."""
    model = plan.model
    args: list[Argument] = [
        ("--num-layers", str(model.num_layers)),
        ("--hidden-size", str(model.hidden_size)),
        ("--ffn-hidden-size", str(model.ffn_hidden_size)),
        ("--num-attention-heads", str(model.num_attention_heads)),
    ]
    if model.num_kv_heads < model.num_attention_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", str(model.num_kv_heads))]
    if model.head_dim is not None:  # heads not hidden / heads wide (megatron-core's kv_channels)
        args.append(("--kv-channels", str(model.head_dim)))
    if model.sliding_window:  # megatron-core's window_size (left, right) and window_attn_skip_freq
        args.append(("--window-size", f"{model.sliding_window},0"))
        if (skip := window_skip_freq(model)) is not None:
            args.append(("--window-attn-skip-freq", str(skip)))
    args += [("--seq-length", str(plan.training.seq_length)),
             ("--max-position-embeddings", str(max(model.seq_length, plan.training.seq_length)))]
    rope = model.position_embedding is PositionEmbedding.NONE
    args.append(("--position-embedding-type", "rope" if rope else "learned_absolute"))
    if model.mlp_activation is MlpActivation.SWIGLU:
        # Llama-style layers: gated MLP, RMSNorm, no biases (as the cost model counts them).
        args += [("--swiglu", None), ("--normalization", "RMSNorm"), ("--disable-bias-linear", None)]
    if model.mlp_activation is MlpActivation.SQUARED_RELU:
        # Nemotron-style layers: squared-ReLU MLP, LayerNorm (Megatron-LM's default), no biases.
        # Without biases validate_args turns bias_gelu_fusion off, as megatron-core needs:
        # TransformerConfig refuses bias_activation_fusion with any activation but gelu, silu
        # and quick_gelu (megatron/training/arguments.py and argument_utils.py at d98e8a64ddf3).
        args += [("--squared-relu", None), ("--disable-bias-linear", None)]
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    # The model's dropouts (Megatron-LM's defaults are 0.1 each; 0: no masks, no kernels).
    args += [("--hidden-dropout", str(model.hidden_dropout)), ("--attention-dropout", str(model.attention_dropout))]
    return args + moe_arguments(model, plan.training)


def moe_layer_pattern(model: ModelSpec) -> list[int]:
    """Which layers have experts (1) and which a dense MLP (0): megatron-core's ``moe_layer_freq``
    as a list."""
    return [int(model.is_moe_layer(i)) for i in range(model.num_layers)]


def moe_arguments(model: ModelSpec, training: TrainingSpec) -> list[Argument]:
    """Mixture of experts and multi-head latent attention as Megatron-LM names them (none for a
    dense model with standard attention). Tokens go through the plan's dispatcher
    (``training.moe_dispatcher``: the alltoall dispatcher, or flex on DeepEP, the backend Megatron-core
    defaults to and names for cross-node expert parallelism), dropless (no capacity factor: the
    cost model's load factor is the imbalance of a dropless router, not a cap), group-limited
    routing where the model has it, experts as one grouped GEMM. The alltoall dispatcher
    synchronises the host once per MoE layer; the plan costs that where its stack states the host
    time (``training.moe_host_s_per_layer``), and the export's note says what it means either
    way (``export.dispatcher_notes``)."""
    args: list[Argument] = []
    if model.is_moe:
        flex = training.moe_dispatcher is MoeDispatcher.FLEX
        args += [
            ("--num-experts", str(model.num_experts)),
            ("--moe-router-topk", str(model.experts_per_token)),
            ("--moe-ffn-hidden-size", str(model.moe_ffn_hidden_size)),
            ("--moe-token-dispatcher-type", "flex" if flex else "alltoall"),
            *([("--moe-flex-dispatcher-backend", "deepep")] if flex else []),
            ("--moe-grouped-gemm", None),
        ]
        if model.router_groups:
            args += [("--moe-router-num-groups", str(model.router_groups)), ("--moe-router-group-topk", str(model.router_group_topk))]
        if model.num_shared_experts:
            args.append(("--moe-shared-expert-intermediate-size", str(model.num_shared_experts * model.moe_ffn_hidden_size)))
        if model.num_moe_layers < model.num_layers:
            args.append(("--moe-layer-freq", "[" + ",".join(map(str, moe_layer_pattern(model))) + "]"))
        if model.router is Router.SIGMOID_TOPK:
            args.append(("--moe-router-score-function", "sigmoid"))
    if model.is_mla:
        args += [("--multi-latent-attention", None), ("--kv-lora-rank", str(model.kv_lora_rank)),
                 ("--qk-head-dim", str(model.qk_head_dim)), ("--qk-pos-emb-head-dim", str(model.qk_rope_head_dim)),
                 ("--v-head-dim", str(model.v_head_dim))]
        if model.q_lora_rank:
            args.append(("--q-lora-rank", str(model.q_lora_rank)))
    return args


def torchrun(plan: PlanToExport) -> list[str]:
    return [
        "torchrun", f"--nnodes {plan.num_nodes}", f"--nproc-per-node {plan.processes_per_node}",
        '--node-rank "${NODE_RANK:-0}"', '--master-addr "${MASTER_ADDR:-localhost}"', '--master-port "${MASTER_PORT:-6000}"',
    ]


def export(plan: PlanToExport) -> Export:
    nearest = exact_config(plan)
    parallel, differences = nearest.parallel, nearest.differences
    program = "pretrain_bert.py" if plan.model.architecture is Architecture.ENCODER else "pretrain_gpt.py"
    header = [
        f"Megatron-LM launch for {plan.model.name} on {plan.num_gpus} GPUs ({plan.num_nodes} node(s) x {plan.processes_per_node}):"
        f" {parallel.layout_text(' x ')}, {plan.num_micro_batches} micro-batches per step.",
        "exact: the plan as planned." if not differences else "NOT exact: the nearest configuration Megatron runs; see the differences.",
        "Run on every node with NODE_RANK, MASTER_ADDR and MASTER_PORT set; add data, tokenizer, optimizer",
        "and checkpoint arguments in EXTRA_ARGS.",
    ]
    # Tensor- and sequence-parallel communication overlaps compute only when one CUDA stream
    # carries the kernels in order (Megatron-LM's documented requirement).
    # Megatron-FSDP asserts the opposite (CUDA_DEVICE_MAX_CONNECTIONS must not be 1: its
    # gathers run beside compute on other streams).
    fsdp = fsdp_strategy(parallel.zero_stage) is not None
    environment = ["unset CUDA_DEVICE_MAX_CONNECTIONS"] if fsdp else ["export CUDA_DEVICE_MAX_CONNECTIONS=1"] if parallel.tp_size > 1 else []
    environment += launch_environment(nearest.training)
    text = render_shell(program, torchrun(plan), arguments(plan, parallel, nearest.training), header, environment)
    notes = (
        f"vocabulary of {plan.model.vocab_size} tokens: pass your tokenizer (Megatron pads it to a multiple of 128 x tp)",
        *window_notes(plan.model, "Megatron-LM", writes_window=True),
        *dispatcher_notes(plan.model, nearest.training, "Megatron-LM"),
        *kv_head_notes(plan.model, parallel.tp_size, "Megatron-LM", subshards=True),
    )
    return Export(
        ExportFormat.MEGATRON, not differences, parallel, nearest.training, differences,
        (LaunchFile(program.replace(".py", ".sh"), "text/x-shellscript", text),), notes,
    )

"""Megatron-LM / Megatron-core: what it can run, and a plan as ``pretrain_gpt.py`` arguments.

Its distributed optimizer shards optimizer states over data-parallel ranks (ZeRO-1) and nothing
more (Megatron-LM ``--use-distributed-optimizer``); gradients and parameters stay replicated.

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
    PlanToExport,
    RecomputeForm,
    all_full,
    block_recompute_layers,
    differs,
    full_recompute_counts,
    recompute_form,
    render_shell,
)
from solver.spec.model import Architecture, MlpActivation, PositionEmbedding
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import Precision, ZeroStage


def violations(parallel: ParallelConfig) -> list[Violation]:
    zero = parallel.zero_stage
    if zero > ZeroStage.OS:
        return [Violation(Rule.FRAMEWORK_ZERO, f"megatron shards optimizer states only (ZeRO-1); zero_stage {int(zero)} is not available")]
    return []


def exact_config(plan: PlanToExport) -> tuple[ParallelConfig, tuple[Difference, ...]]:
    """The configuration nearest to the plan that Megatron runs exactly, and what differs."""
    parallel = plan.parallel
    out: list[Difference] = []
    if parallel.zero_stage > ZeroStage.OS:
        out.append(differs(
            "parallel.zero_stage", int(parallel.zero_stage), 1,
            "Megatron's distributed optimizer shards optimizer states only (ZeRO-1); gradients"
            " and parameters stay replicated, so each GPU needs more memory than planned",
        ))
        parallel = replace(parallel, zero_stage=ZeroStage.OS)
    parallel, recompute = exact_recompute(plan, parallel)
    return parallel, (*out, *recompute)


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


def arguments(plan: PlanToExport, parallel: ParallelConfig) -> list[Argument]:
    """``pretrain_gpt.py`` arguments for an exact configuration (data, tokenizer, optimizer and
    checkpoint arguments are the user's)."""
    model, training = plan.model, plan.training
    tp, pp = parallel.tp_size, parallel.pp_size
    args: list[Argument] = [("--tensor-model-parallel-size", str(tp)), ("--pipeline-model-parallel-size", str(pp))]
    if parallel.cp_size > 1:
        # Ring attention through Transformer Engine (cp_comm_type p2p, megatron-core's default).
        args.append(("--context-parallel-size", str(parallel.cp_size)))
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
    if method is not None:
        args += [("--recompute-method", method), ("--recompute-num-layers", str(num_layers))]
    if parallel.zero_stage == ZeroStage.OS:
        args.append(("--use-distributed-optimizer", None))
    if training.overlap_grad_reduce:
        args.append(("--overlap-grad-reduce", None))
        if parallel.zero_stage == ZeroStage.OS:
            args.append(("--overlap-param-gather", None))
    args += precision_arguments(training.precision)
    args.append(("--attention-backend", "flash" if training.flash_attention else "unfused"))
    if not training.fused_kernels:
        gelu = model.mlp_activation is MlpActivation.GELU
        args += [("--no-bias-gelu-fusion" if gelu else "--no-bias-swiglu-fusion", None),
                 ("--no-masked-softmax-fusion", None), ("--no-bias-dropout-fusion", None)]
    return args + model_arguments(plan)


def precision_arguments(precision: Precision) -> list[Argument]:
    if precision is Precision.FP16:
        return [("--fp16", None)]
    if precision is Precision.FP8:
        # FP8 GEMMs through Transformer Engine; weights, gradients and the rest stay bf16.
        return [("--bf16", None), ("--fp8-format", "hybrid"), ("--transformer-impl", "transformer_engine")]
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
    args += [("--seq-length", str(plan.training.seq_length)),
             ("--max-position-embeddings", str(max(model.seq_length, plan.training.seq_length)))]
    rope = model.position_embedding is PositionEmbedding.NONE
    args.append(("--position-embedding-type", "rope" if rope else "learned_absolute"))
    if model.mlp_activation is MlpActivation.SWIGLU:
        # Llama-style layers: gated MLP, RMSNorm, no biases (as the cost model counts them).
        args += [("--swiglu", None), ("--normalization", "RMSNorm"), ("--disable-bias-linear", None)]
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    return args


def torchrun(plan: PlanToExport) -> list[str]:
    return [
        "torchrun", f"--nnodes {plan.num_nodes}", f"--nproc-per-node {plan.processes_per_node}",
        '--node-rank "${NODE_RANK:-0}"', '--master-addr "${MASTER_ADDR:-localhost}"', '--master-port "${MASTER_PORT:-6000}"',
    ]


def export(plan: PlanToExport) -> Export:
    parallel, differences = exact_config(plan)
    program = "pretrain_bert.py" if plan.model.architecture is Architecture.ENCODER else "pretrain_gpt.py"
    header = [
        f"Megatron-LM launch for {plan.model.name} on {plan.num_gpus} GPUs ({plan.num_nodes} node(s) x {plan.processes_per_node}):"
        f" dp {parallel.dp_size} x tp {parallel.tp_size} x pp {parallel.pp_size}"
        + (f" x cp {parallel.cp_size}" if parallel.cp_size > 1 else "")
        + f", {plan.num_micro_batches} micro-batches per step.",
        "exact: the plan as planned." if not differences else "NOT exact: the nearest configuration Megatron runs; see the differences.",
        "Run on every node with NODE_RANK, MASTER_ADDR and MASTER_PORT set; add data, tokenizer, optimizer",
        "and checkpoint arguments in EXTRA_ARGS.",
    ]
    # Tensor- and sequence-parallel communication overlaps compute only when one CUDA stream
    # carries the kernels in order (Megatron-LM's documented requirement).
    environment = ["export CUDA_DEVICE_MAX_CONNECTIONS=1"] if parallel.tp_size > 1 else []
    text = render_shell(program, torchrun(plan), arguments(plan, parallel), header, environment)
    notes = (
        f"vocabulary of {plan.model.vocab_size} tokens: pass your tokenizer (Megatron pads it to a multiple of 128 x tp)",
    )
    return Export(
        ExportFormat.MEGATRON, not differences, parallel, plan.training, differences,
        (LaunchFile(program.replace(".py", ".sh"), "text/x-shellscript", text),), notes,
    )

"""The evaluator: one configuration in, predicted step time, throughput and memory out.

It is the single source of truth for time and memory; the optimizer and the validator call it.
Everything it adds up comes from the per-layer profile (analytic or measured) and the formulas
in ``solver.cost.schedule`` and ``solver.cost.memory``, each with its source.
"""

from __future__ import annotations

from solver.cost.compute import elementwise_time_s
from solver.cost.derive import resolve_profile
from solver.cost.flops import hardware_flops_per_iteration, model_flops_per_iteration
from solver.cost.memory import (
    GIB_BYTES,
    GRAD_ACCUMULATION_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    ZERO3_PREFETCHED_LAYERS,
    in_flight_micro_batches,
    model_state_bytes,
    optimizer_step_bytes_per_param,
    reserve_bytes,
)
from solver.cost.profile import LayerProfile, ModelProfile
from solver.cost.result import Evaluation, Prediction, StageReport
from solver.cost.schedule import (
    data_parallel_exposed_s,
    pipeline_comm_s,
    pipeline_time_s,
)
from solver.frameworks import framework_violations
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.legality import (
    check_structure,
    placement_violations,
    stage_layer_counts,
)
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Framework, Recompute, TrainingSpec


def stage_chunks(model: ModelSpec, parallel: ParallelConfig) -> list[list[tuple[int, bool]]]:
    """Per pipeline stage (GPU), its transformer layers in execution order with a
    full-recompute flag each. Chunk c (pipeline order) runs on stage c % pp (Megatron-LM's
    interleaved assignment); within a chunk the first ``full_recompute_layers[c]`` layers are
    fully recomputed."""
    counts = stage_layer_counts(model, parallel)
    stages: list[list[tuple[int, bool]]] = [[] for _ in range(parallel.pp_size)]
    first = 0
    for chunk, count in enumerate(counts):
        if parallel.full_recompute_layers is not None:
            recomputed = parallel.full_recompute_layers[chunk]
        else:
            recomputed = count if parallel.recompute is Recompute.FULL else 0
        stages[chunk % parallel.pp_size].extend((first + i, i < recomputed) for i in range(count))
        first += count
    return stages


def evaluate(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    parallel: ParallelConfig,
    num_gpus: int | None = None,
    profile: ModelProfile | None = None,
    framework: Framework = Framework.ANY,
    allow_tp_across_nodes: bool = True,
    max_memory_fraction: float = 1.0,
) -> Evaluation:
    """Predict one configuration. Raises SpecError when it is structurally illegal; returns an
    Evaluation with ``feasible=False`` and named violations when it is legal but does not fit
    or the framework cannot run it."""
    num_gpus = num_gpus or parallel.num_gpus
    check_structure(model, cluster, training, parallel, num_gpus)
    prof = resolve_profile(model, cluster, training, parallel, profile)
    if len(prof.transformer_layers) != model.num_layers:
        raise SpecError("profile.layers", f"the profile has {len(prof.transformer_layers)} transformer layers, the model {model.num_layers}")

    pp, v, dp = parallel.pp_size, parallel.virtual_stages, parallel.dp_size
    m = training.global_batch_size // (dp * parallel.micro_batch_size)
    selective = parallel.recompute is Recompute.SELECTIVE
    blocks = prof.transformer_layers
    embedding, head = prof.embedding, prof.head
    capacity = cluster.gpu.memory_bytes
    usable = capacity * max_memory_fraction

    stage_reports: list[StageReport] = []
    stage_times: list[dict[str, float]] = []
    for stage, layers in enumerate(stage_chunks(model, parallel)):
        members: list[tuple[LayerProfile, bool]] = [(blocks[i], full) for i, full in layers]
        has_embedding = stage == 0 and embedding is not None
        has_head = stage == pp - 1 and head is not None
        extras = [layer for layer, here in ((embedding, has_embedding), (head, has_head)) if here]
        all_members = members + [(layer, False) for layer in extras]
        times = {
            "forward": sum(layer.forward_s for layer, _ in all_members),
            "backward": sum(layer.backward_s for layer, _ in all_members),
            "recompute": sum(layer.recompute_s(full, selective) for layer, full in all_members),
            "tp_comm": sum(layer.tp_comm_s for layer, _ in all_members),
        }
        times["compute"] = times["forward"] + times["backward"]
        params = sum(layer.parameter_count for layer, _ in all_members)
        # With several micro-batches every backward adds into the gradient buffer (the local
        # shard of it once ZeRO-2/3 reduce-scatter after each micro-batch).
        accumulated = params / dp if parallel.zero_stage >= 2 else params
        times["grad_accumulation"] = (
            elementwise_time_s(cluster.gpu, GRAD_ACCUMULATION_BYTES_PER_PARAM * accumulated) if m > 1 else 0.0
        )
        times["total"] = times["compute"] + times["recompute"] + times["tp_comm"] + times["grad_accumulation"]
        largest_layer = max((layer.parameter_count for layer, _ in all_members), default=0)

        in_flight = in_flight_micro_batches(stage, pp, v, m)
        memory = model_state_bytes(params, parallel.zero_stage, dp, training.optimizer)
        kept = sum(layer.kept_bytes(full, selective) for layer, full in members)
        # Recomputing a layer in backward materialises its activations again; its input (the
        # checkpoint, already counted) is part of them.
        working = max((layer.activation_bytes - layer.checkpoint_bytes for layer, full in members if full), default=0)
        memory["activations"] = in_flight * kept + working
        memory["embedding_and_logits"] = (
            (in_flight * embedding.activation_bytes if has_embedding else 0)
            + (head.activation_bytes if has_head else 0)  # the last stage runs one micro-batch at a time
        )
        # ZeRO-3 holds the gathered 16-bit weights of the layer in use and the one prefetched,
        # never more than the unsharded weights it saves.
        memory["zero3_gather_buffers"] = (
            min(ZERO3_PREFETCHED_LAYERS * largest_layer, params * (1 - 1 / dp)) * WEIGHT_BYTES_PER_PARAM
            if parallel.zero_stage == 3 and dp > 1
            else 0.0
        )
        memory["reserve"] = reserve_bytes(sum(memory.values()))
        times["dp_exposed"] = data_parallel_exposed_s(
            cluster, parallel, m, params, largest_layer, times["forward"], times["backward"] + times["recompute"],
            regather_for_recompute=framework is Framework.DEEPSPEED and any(full for _, full in members),
            overlap_grad_reduce=training.overlap_grad_reduce,
        )
        shard = params / dp if parallel.zero_stage >= 1 else params
        times["optimizer"] = elementwise_time_s(cluster.gpu, optimizer_step_bytes_per_param(training.optimizer) * shard, kernels=4)
        stage_times.append(times)
        stage_reports.append(
            StageReport(
                stage=stage,
                layers=tuple(i for i, _ in layers),
                full_recompute_layers=tuple(i for i, full in layers if full),
                has_embedding=has_embedding,
                has_head=has_head,
                time_per_micro_batch_s=times["total"],
                in_flight_micro_batches=in_flight,
                memory_bytes=memory,
                parameter_count=params,
            )
        )

    slowest = max(range(pp), key=lambda i: stage_times[i]["total"])
    critical = stage_times[slowest]
    busy_s, bubble_s = pipeline_time_s(critical["total"], pp, v, m)
    message_bytes = blocks[0].output_bytes if blocks else 0
    pp_comm = pipeline_comm_s(cluster, parallel, m, message_bytes)
    # After the last backward each stage syncs its own gradients and steps its optimizer; the
    # step ends with the slowest of them.
    tail = max(stage_times, key=lambda t: t["dp_exposed"] + t["optimizer"])
    step_s = busy_s + bubble_s + pp_comm + tail["dp_exposed"] + tail["optimizer"]
    breakdown = {
        "compute_s": m * critical["compute"],
        "recompute_s": m * critical["recompute"],
        "tp_comm_s": m * critical["tp_comm"],
        "grad_accumulation_s": m * critical["grad_accumulation"],
        "pp_comm_s": pp_comm,
        "dp_comm_exposed_s": tail["dp_exposed"],
        "bubble_s": bubble_s,
        "optimizer_s": tail["optimizer"],
    }

    seq = training.seq_length
    model_flops = model_flops_per_iteration(model, training.global_batch_size, seq)
    recomputed_layers = sum(len(r.full_recompute_layers) for r in stage_reports)
    hardware_flops = hardware_flops_per_iteration(
        model, training.global_batch_size, seq, parallel.recompute, recomputed_layers / model.num_layers
    )
    peak = cluster.gpu.peak(training.precision)
    tokens_per_s = training.tokens_per_step / step_s
    prediction = Prediction(
        step_time_s=step_s,
        tokens_per_s=tokens_per_s,
        samples_per_s=training.global_batch_size / step_s,
        model_tflops_per_gpu=model_flops / step_s / num_gpus / 1e12,
        hardware_tflops_per_gpu=hardware_flops / step_s / num_gpus / 1e12,
        mfu=model_flops / step_s / num_gpus / peak,
        hfu=hardware_flops / step_s / num_gpus / peak,
        time_to_train_s=training.train_tokens / tokens_per_s if training.train_tokens else None,
        breakdown_s=breakdown,
    )

    violations = framework_violations(parallel, framework) + placement_violations(cluster, parallel, allow_tp_across_nodes)
    for report in stage_reports:
        if report.peak_bytes > usable:
            limit = (
                f"the GPU has {capacity / GIB_BYTES:.1f} GiB"
                if max_memory_fraction >= 1.0
                else f"{max_memory_fraction:.0%} of the GPU's {capacity / GIB_BYTES:.1f} GiB is {usable / GIB_BYTES:.1f} GiB"
            )
            violations.append(f"[memory] stage {report.stage} needs {report.peak_bytes / GIB_BYTES:.1f} GiB, {limit}")
    peak_stage = max(range(pp), key=lambda i: stage_reports[i].peak_bytes)
    return Evaluation(
        feasible=not violations,
        violations=tuple(violations),
        prediction=prediction,
        stages=tuple(stage_reports),
        capacity_bytes=capacity,
        peak_stage=peak_stage,
        num_micro_batches=m,
        profile_origins=prof.origins() if profile is not None else {},
    )

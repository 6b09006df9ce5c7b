"""Which configurations are legal, each rule named.

Structural rules (``check_structure``) make a configuration meaningless: the evaluator refuses it
with a SpecError naming the field. Framework and placement rules (``policy_violations``) describe
configurations that can be costed but that a framework cannot run or a request forbids; they are
reported as violations and the optimizer never returns them.
"""

from __future__ import annotations

from solver.spec.dimensions import NvmeOffload, Offload
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig, micro_batch_count
from solver.spec.rules import Rule, Violation
from solver.spec.training import OptimizerKind, Recompute, TrainingSpec, ZeroStage


def uniform_partition(num_layers: int, num_chunks: int) -> tuple[int, ...]:
    """Layers per chunk, as even as possible; the remainder goes to the middle chunks, away from
    the first (most activations in flight) and the last (the logits)."""
    base, extra = divmod(num_layers, num_chunks)
    counts = [base] * num_chunks
    if extra:
        start = max(0, (num_chunks - extra) // 2)
        for i in range(start, start + extra):
            counts[i] += 1
    return tuple(counts)


def stage_layer_counts(model: ModelSpec, parallel: ParallelConfig) -> tuple[int, ...]:
    return parallel.stage_layers or uniform_partition(model.num_layers, parallel.num_chunks)


def kv_heads_split(model: ModelSpec, training: TrainingSpec, tp_size: int) -> bool:
    """Whether ``tp_size`` ranks can share the model's KV heads: each holds whole ones (tp divides
    them), or, on a stack that sub-shards the QKV activations (``training.kv_head_subsharding``,
    Megatron-core 0.16+), tp is a multiple of them and each KV head serves tp / num_kv_heads ranks."""
    kv = model.num_kv_heads
    return kv % tp_size == 0 or (training.kv_head_subsharding and tp_size % kv == 0)


def tp_splits_model(model: ModelSpec, training: TrainingSpec, tp_size: int) -> bool:
    """Whether tensor parallelism of ``tp_size`` splits the model's heads, KV heads and MLP evenly."""
    return not (model.num_attention_heads % tp_size or model.ffn_hidden_size % tp_size) and kv_heads_split(model, training, tp_size)


def check_structure(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, parallel: ParallelConfig, num_gpus: int
) -> None:
    """Raise SpecError for the first rule the configuration breaks (``SpecError.rule`` names it).
    (Long but flat: one independent check per rule, in the order they are reported.)"""
    if num_gpus > cluster.num_gpus:
        raise SpecError("num_gpus", f"{num_gpus} GPUs requested, the cluster has {cluster.num_gpus}", Rule.GPU_COUNT)
    if parallel.num_gpus != num_gpus:
        raise SpecError(
            "parallel",
            f"dp_size * tp_size * pp_size * cp_size = {parallel.dp_size}*{parallel.tp_size}*{parallel.pp_size}"
            f"*{parallel.cp_size} = {parallel.num_gpus}, but num_gpus is {num_gpus}",
            Rule.GPU_COUNT,
        )
    tp = parallel.tp_size
    for what, value in (
        ("num_attention_heads", model.num_attention_heads),
        ("num_kv_heads", model.num_kv_heads),
        ("ffn_hidden_size", model.ffn_hidden_size),
        ("moe_ffn_hidden_size", model.moe_ffn_hidden_size if model.is_moe else tp),
    ):
        # KV heads: tp may also be a multiple of them where the stack sub-shards the QKV activations.
        if value % tp and not (what == "num_kv_heads" and kv_heads_split(model, training, tp)):
            more = ""
            if what == "num_kv_heads":  # say what would take a multiple of them
                more = (" nor is a multiple of it (training.kv_head_subsharding)" if training.kv_head_subsharding
                        else "; a stack that sub-shards QKV (training.kv_head_subsharding: Megatron-core 0.16+) also takes a multiple of it")
            raise SpecError("parallel.tp_size", f"tp_size {tp} does not divide {what}={value}{more}", Rule(f"tp_divides_{what}"))
    _check_context_parallel(training, parallel)
    _check_expert_parallel(model, parallel)
    _check_offload(cluster, training, parallel)
    _check_activation_offload(model, cluster, parallel)
    if not cluster.gpu.supports(training.precision):
        raise SpecError("training.precision", f"{cluster.gpu.name} has no {training.precision.value} tensor cores", Rule.PRECISION)
    per_replica = parallel.dp_size * parallel.micro_batch_size
    if training.global_batch_size % per_replica:
        raise SpecError(
            "training.global_batch_size",
            f"global_batch_size {training.global_batch_size} is not divisible by"
            f" dp_size * micro_batch_size = {per_replica}",
            Rule.BATCH_DIVISIBLE,
        )
    num_micro_batches = micro_batch_count(training.global_batch_size, parallel.dp_size, parallel.micro_batch_size)
    # More chunks than layers: the uniform split cannot fill them. An explicit layout may, where
    # only the first and the last chunk go without transformer layers: Megatron-core gives the
    # embedding and the loss a pipeline slot of their own (account_for_embedding_in_pipeline_split,
    # account_for_loss_in_pipeline_split; --pipeline-model-parallel-layout stages of "E" or "L").
    interior = parallel.stage_layers[1:-1] if parallel.stage_layers is not None else (0,)
    if parallel.num_chunks > model.num_layers and 0 in interior:
        raise SpecError(
            "parallel.pp_size",
            f"pp_size * virtual_stages = {parallel.num_chunks} exceeds num_layers={model.num_layers}"
            " (a layout may leave only the first and the last chunk without layers)",
            Rule.PP_AT_MOST_LAYERS,
        )
    if parallel.virtual_stages > 1:
        if parallel.pp_size == 1:
            raise SpecError("parallel.virtual_stages", "interleaving needs pp_size > 1", Rule.INTERLEAVE_NEEDS_PP)
        if parallel.stage_layers is None and model.num_layers % parallel.num_chunks:
            raise SpecError(
                "parallel.virtual_stages",
                f"num_layers={model.num_layers} is not divisible by"
                f" pp_size * virtual_stages = {parallel.num_chunks}",
                Rule.INTERLEAVE_LAYERS_DIVISIBLE,
            )
        if num_micro_batches % parallel.pp_size:
            raise SpecError(
                "parallel.virtual_stages",
                f"{num_micro_batches} micro-batches is not a multiple of pp_size={parallel.pp_size}",
                Rule.INTERLEAVE_MICRO_BATCHES,
            )
    if parallel.stage_layers is not None and sum(parallel.stage_layers) != model.num_layers:
        raise SpecError(
            "parallel.stage_layers",
            f"stage_layers sum to {sum(parallel.stage_layers)}, the model has {model.num_layers} layers",
            Rule.PARTITION_COVERS_LAYERS,
        )
    if parallel.full_recompute_layers is not None:
        counts = stage_layer_counts(model, parallel)
        for chunk, (recomputed, held) in enumerate(zip(parallel.full_recompute_layers, counts)):
            if recomputed > held:
                raise SpecError(
                    f"parallel.full_recompute_layers[{chunk}]",
                    f"{recomputed} recomputed layers, the chunk holds {held}",
                    Rule.RECOMPUTE_WITHIN_STAGE,
                )


def _check_context_parallel(training: TrainingSpec, parallel: ParallelConfig) -> None:
    """Context parallelism's structural rules (nothing to check at cp_size 1).

    The sequence is cut into 2 x cp chunks and rank r keeps chunks r and 2cp - 1 - r, so that
    every rank's causal attention work is the same (Megatron-core ``get_batch_on_this_cp_rank``,
    torchtitan's load-balanced ``context_parallel``): the sequence length must divide by 2 x cp.
    The ring exchange lives inside the fused attention kernel's wrapper: Megatron-core runs CP
    only through Transformer Engine's attention (its own ``DotProductAttention`` asserts
    ``context_parallel_size == 1``), torchtitan only through SDPA's flash / memory-efficient /
    cuDNN kernels, so materialised attention (``training.flash_attention`` false) cannot."""
    cp = parallel.cp_size
    if cp == 1:
        return
    if training.seq_length % (2 * cp):
        raise SpecError(
            "parallel.cp_size",
            f"seq_length {training.seq_length} is not divisible by 2 * cp_size = {2 * cp}"
            " (each rank keeps two of 2 x cp equal chunks, for balanced causal attention)",
            Rule.CP_DIVIDES_SEQUENCE,
        )
    if not training.flash_attention:
        raise SpecError(
            "parallel.cp_size",
            f"cp_size {cp} needs fused attention (training.flash_attention): Megatron-core and torchtitan"
            " run the ring exchange only inside their fused attention kernels",
            Rule.CP_NEEDS_FUSED_ATTENTION,
        )


def offload_zero_stage(offload: Offload, dp_cp_size: int, nvme: NvmeOffload = NvmeOffload.NONE) -> ZeroStage:
    """The lowest ZeRO stage offload runs with over ``dp_cp_size`` ranks that hold the same
    parameters: parameter offload is ZeRO-3's (ZeRO-Infinity; DeepSpeed takes offload_param only
    with stage 3), and so is anything on NVMe (DeepSpeed's config reference: "NVMe offloading is
    available only with ZeRO stage 3"; its stage-3 optimizer alone builds the NVMe swappers);
    optimizer offload steps each rank's shard of the optimizer states, so it needs ZeRO-1 or more
    where there are several ranks (ZeRO-Offload Sec 4.2 partitions as ZeRO-2; Megatron-core
    offloads its distributed optimizer's, ZeRO-1's, shard)."""
    if offload.offloads_params or nvme is not NvmeOffload.NONE:
        return ZeroStage.OS_G_P
    if offload is Offload.OPTIMIZER and dp_cp_size > 1:
        return ZeroStage.OS
    return ZeroStage.NONE


def nvme_fits_offload(offload: Offload, nvme: NvmeOffload) -> bool:
    """Whether ``nvme`` names only states ``offload`` takes off the GPU: the optimizer's need
    offload, the parameters' parameter offload (DeepSpeed's offload_param)."""
    if nvme is NvmeOffload.NONE:
        return True
    if nvme is NvmeOffload.OPTIMIZER:
        return offload is not Offload.NONE
    return offload.offloads_params


def _check_offload(cluster: ClusterSpec, training: TrainingSpec, parallel: ParallelConfig) -> None:
    """Offload's structural rules (nothing to check without offload). The host's memory, PCIe and
    memory bandwidth must be known to cost it, and for NVMe the drives' capacity and bandwidth.
    ZeRO-Offload and ZeRO-Infinity are described and costed here for data and tensor parallelism
    (solver.cost.offload), not under a pipeline. NVMe holds only what is offloaded
    (``nvme_fits_offload``). The ZeRO stage must be one offload runs with (``offload_zero_stage``).
    The host steps Adam or SGD; Muon's orthogonalisation runs on the GPU (solver.cost.muon)."""
    offload, nvme = parallel.offload, parallel.nvme_offload
    if not nvme_fits_offload(offload, nvme):
        raise SpecError(
            "parallel.nvme_offload",
            f"nvme_offload {nvme.value} keeps on NVMe what offload {offload.value} leaves on the GPU:"
            " the optimizer needs offload, the parameters optimizer+params",
            Rule.NVME_OFFLOAD_MODE,
        )
    if offload is Offload.NONE:
        return
    if not cluster.has_host_facts:
        raise SpecError(
            "parallel.offload",
            f"offload {offload.value} needs the cluster's host_memory_gib, pcie_gbytes_per_s and host_memory_gbytes_per_s;"
            f" {cluster.name} does not give them",
            Rule.OFFLOAD_NEEDS_HOST,
        )
    if nvme is not NvmeOffload.NONE and not cluster.has_nvme_facts:
        raise SpecError(
            "parallel.nvme_offload",
            f"nvme_offload {nvme.value} needs the cluster's nvme_gbytes, nvme_read_gbytes_per_s and nvme_write_gbytes_per_s;"
            f" {cluster.name} does not give them all",
            Rule.OFFLOAD_NEEDS_NVME,
        )
    if parallel.pp_size > 1:
        raise SpecError("parallel.offload", f"offload {offload.value} is planned with pp_size 1, got {parallel.pp_size}", Rule.OFFLOAD_WITH_PP)
    needed = offload_zero_stage(offload, parallel.dp_cp_size, nvme)
    if parallel.zero_stage < needed:
        on_nvme = f" with nvme_offload {nvme.value}" if nvme is not NvmeOffload.NONE else ""
        raise SpecError(
            "parallel.zero_stage",
            f"offload {offload.value}{on_nvme} over {parallel.dp_cp_size} data-parallel rank(s) needs ZeRO stage {int(needed)} or more,"
            f" got {int(parallel.zero_stage)}",
            Rule.OFFLOAD_NEEDS_ZERO,
        )
    if training.optimizer is OptimizerKind.MUON:
        raise SpecError(
            "training.optimizer",
            f"offload {offload.value} steps the optimizer on the host, which the planner costs for Adam and SGD;"
            " Muon orthogonalises each update with GEMMs on the GPU (solver.cost.muon)",
            Rule.OFFLOAD_OPTIMIZER_KIND,
        )


def _check_activation_offload(model: ModelSpec, cluster: ClusterSpec, parallel: ParallelConfig) -> None:
    """Partial activation offload's structural rules (nothing to check at 0 layers), as
    Megatron-core states them (NVIDIA/Megatron-LM 8f1c2f8, megatron/core/transformer/
    transformer_config.py ``__post_init__``): fewer layers than the model has
    ("CPU offloading can be done only for layers less than num_layers"; Transformer Engine's
    default synchroniser asserts num_layers <= model_layers - 1), no pipeline parallelism ("no
    support for Pipeline parallelism with CPU offloading"), no recomputation ("CPU offloading
    does not work when activation recomputation is enabled"); and the host facts to cost the
    copies with. Beside model-state offload, only as one framework runs both: Megatron-core's
    optimizer CPU offload (``offload`` optimizer), which keeps the gradients on the GPU until
    the step (ZeRO-0/1: no gradient copies beside the activations' in backward); no framework
    offloads parameters (DeepSpeed's ZeRO-Infinity) and the first N layers' activations."""
    layers = parallel.activation_offload_layers
    if not layers:
        return
    field = "parallel.activation_offload_layers"
    if not cluster.has_host_facts:
        raise SpecError(
            field,
            f"activation offload needs the cluster's host_memory_gib, pcie_gbytes_per_s and host_memory_gbytes_per_s;"
            f" {cluster.name} does not give them",
            Rule.OFFLOAD_NEEDS_HOST,
        )
    if layers >= model.num_layers:
        raise SpecError(field, f"{layers} layers offloaded, the model has {model.num_layers}: at most {model.num_layers - 1}", Rule.ACTIVATION_OFFLOAD_LAYERS)
    if parallel.pp_size > 1:
        raise SpecError(field, f"activation offload runs with pp_size 1, got {parallel.pp_size}", Rule.ACTIVATION_OFFLOAD_LAYERS)
    if parallel.recompute is not Recompute.NONE or parallel.full_recompute_layers and any(parallel.full_recompute_layers):
        raise SpecError(field, f"activation offload runs without recomputation, got recompute {parallel.recompute.value}", Rule.ACTIVATION_OFFLOAD_LAYERS)
    if parallel.offload is not Offload.NONE and (parallel.offload is not Offload.OPTIMIZER or parallel.zero_stage > ZeroStage.OS):
        raise SpecError(
            field,
            f"activation offload runs beside optimizer offload at ZeRO-0/1 only (Megatron-core), got offload"
            f" {parallel.offload.value} with zero_stage {int(parallel.zero_stage)}",
            Rule.ACTIVATION_OFFLOAD_LAYERS,
        )


def _check_expert_parallel(model: ModelSpec, parallel: ParallelConfig) -> None:
    """Expert parallelism's structural rules (nothing to check at ep_size 1 with the experts split
    over tp): a mixture-of-experts model, whose experts split evenly over the ep ranks
    (Megatron-core asserts ``num_moe_experts % expert_model_parallel_size == 0``), and ep ranks
    carved from the dp x cp ranks that replicate the dense parameters
    (``ParallelConfig.expert_dp_size``). With an expert tensor-parallel size of its own
    (``expert_tp_size``, etp), each expert's hidden size splits over etp ranks, and the ep x etp
    ranks of an expert group are carved from a stage's tp x dp x cp ranks: Megatron-core's
    ``parallel_state.initialize_model_parallel`` (NVIDIA/Megatron-LM 8f1c2f8ae) raises unless
    world_size divides by expert_tensor_parallel_size x expert_model_parallel_size x
    pipeline_model_parallel_size."""
    ep, etp = parallel.ep_size, parallel.etp_size
    if parallel.expert_tp_size is not None:
        field = "parallel.expert_tp_size"
        if not model.is_moe:
            raise SpecError(
                field, f"expert_tp_size {etp} (tp_size {parallel.tp_size}) needs a mixture-of-experts model; {model.name} is dense",
                Rule.ETP_NEEDS_EXPERTS,
            )
        if model.moe_ffn_hidden_size % etp:
            raise SpecError(
                field, f"expert_tp_size {etp} does not divide moe_ffn_hidden_size={model.moe_ffn_hidden_size}",
                Rule.ETP_DIVIDES_MOE_FFN_HIDDEN_SIZE,
            )
        ranks = parallel.tp_size * parallel.dp_cp_size
        if ranks % (ep * etp):
            raise SpecError(
                field,
                f"ep_size * expert_tp_size = {ep}*{etp} does not divide tp_size * dp_size * cp_size = {ranks}: an expert"
                " group's ranks are carved from a pipeline stage's tensor-, data- and context-parallel ranks",
                Rule.EXPERT_GROUP_DIVIDES_RANKS,
            )
    if ep == 1:
        return
    if not model.is_moe:
        raise SpecError("parallel.ep_size", f"ep_size {ep} needs a mixture-of-experts model; {model.name} is dense", Rule.EP_NEEDS_EXPERTS)
    if model.num_experts % ep:
        raise SpecError(
            "parallel.ep_size", f"ep_size {ep} does not divide num_experts={model.num_experts}", Rule.EP_DIVIDES_EXPERTS
        )
    if parallel.expert_tp_size is None and parallel.dp_cp_size % ep:
        raise SpecError(
            "parallel.ep_size",
            f"ep_size {ep} does not divide dp_size * cp_size = {parallel.dp_cp_size}: expert-parallel ranks are"
            " carved from the data- and context-parallel ranks",
            Rule.EP_DIVIDES_DATA_PARALLEL,
        )


def placement_violations(cluster: ClusterSpec, parallel: ParallelConfig, allow_tp_across_nodes: bool) -> list[Violation]:
    # TP ranks are adjacent (Megatron-LM's layout): a group stays in one NVLink domain only when
    # tp_size divides the domain's GPU count (tp 6 on 8-GPU nodes puts ranks 6-11 across two
    # nodes). The domain is the node unless the cluster's NVLink fabric spans more (a GB200 NVL72
    # rack: tp up to 72) or less (H200 NVL cards bridged in fours).
    domain = cluster.domain_gpus
    if not allow_tp_across_nodes and domain % parallel.tp_size:
        where = f"nodes of {domain} GPUs" if domain == cluster.gpus_per_node else f"NVLink domains of {domain} GPUs"
        return [
            Violation(
                Rule.TP_WITHIN_NODE,
                f"tp_size {parallel.tp_size} spans {where} (allow_tp_across_nodes is false)",
            )
        ]
    return []

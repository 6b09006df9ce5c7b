"""What a mixture-of-experts layer costs beyond a dense one, for one micro-batch on one GPU of a
tensor-parallel group of tp, a context-parallel group of cp and an expert-parallel group of ep.

An MoE layer is a dense layer whose MLP is replaced by a router, shared experts and routed
experts (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al.
2021; DeepSeekMoE, Dai et al. 2024). ``solver.cost.analytic`` costs the dense layer and applies
``MoeMlpCost`` to it: the MLP's GEMMs, activation-function and permutation bytes, kept
activations, tensor-parallel traffic and parameters are swapped for the MoE ones, and the token
dispatch and combine all-to-alls are added.

The layout is Megatron-core's (``MoEAlltoAllTokenDispatcher`` at NVIDIA/Megatron-LM 8f1c2f8ae,
megatron/core/transformer/moe/token_dispatcher.py), with an expert tensor-parallel size etp that
defaults to tp: each TP rank dispatches its 1/tp share of the micro-batch's b*s/cp tokens
(Megatron-core requires sequence parallelism with MoE and TP: ``MoELayer.forward`` raises
without it), the ep ranks exchange them all-to-all (``token_dispatch``: ``all_to_all`` over the
EP group), the expert-TP group of etp ranks all-gathers the received tokens
(``dispatch_postprocess``: ``gather_from_sequence_parallel_region`` over ``expt_tp``, skipped at
etp 1) so that each rank runs its 1/etp slice of its num_experts/ep local experts on them,
reduce-scatters the outputs over the same group (``combine_preprocess``), and a second
all-to-all returns them (combine). Backward runs every one of them again. On average every rank
sends and receives tokens/tp x k routed tokens whatever ep is (each of the ep ranks sends 1/ep of
its share to each), so expert parallelism divides the experts' memory, not their work; after
the etp gather a rank runs tokens x k x etp/tp routed tokens through experts 1/etp as wide, the
same FLOPs at any etp. At etp 1 with tp > 1 the dense TP ranks hold different tokens (sequence
parallel) and send them to ep ranks that are now adjacent (the expert rank grid puts etp, not
tp, innermost), with no expert-TP collectives at all. The flex dispatcher (DeepEP, HybridEP) puts
the same tokens on the same ranks in one exchange over the ep x etp group (``MoEFlexTokenDispatcher``:
its routing map repeated over the etp ranks of each expert), which is not costed apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from solver.cost.comm import all_reduce_s, all_to_all_s, ep_ranks_per_domain, forwarded_all_to_all_s, overlapped_exposed_s, tp_link
from solver.cost.compute import elementwise_time_s, gemm_time_s
from solver.cost.flops import (
    layer_expert_parameter_count,
    layer_forward_gemm_flops,
    layer_parameter_count,
)
from solver.spec.hardware import ClusterSpec
from solver.spec.model import MlpActivation, ModelSpec
from solver.spec.training import ExpertGemms, MoeDispatcher, Precision

BYTES_16BIT = 2  # dispatched tokens travel in bf16 (Megatron-core's default dispatcher)
# Router imbalance: the busiest expert rank processes more than the mean tokens * k / ep routed
# tokens, and the layer waits for it. Costed at the capacity factor 1.25: Switch Transformer
# (Fedus et al. 2021, arXiv 2101.03961, Sec 2.2 and Table 1) trains with capacity factors 1.0 and
# 1.25, i.e. each expert's buffer padded to (or tokens dropped beyond) 1.25 x its mean load;
# GShard (Lepikhin et al. 2020 Sec 2.2) sizes it at 2 x mean for top-2. A dropless router with
# load-balancing losses has a max/mean load of this order. It scales the routed experts' GEMMs,
# activations and element-wise work, not the all-to-all bytes (which follow top-k).
EXPERT_LOAD_FACTOR = 1.25
# Permuting tokens into expert order before the experts and back after (Megatron-core's
# ``permute`` / ``unpermute``): each reads and writes the routed tokens' h-wide 16-bit rows.
PERMUTE_BYTES_PER_ELEMENT = 2 * (2 + 2)
PERMUTE_KERNELS = 2


@dataclass(frozen=True)
class MoeMlpCost:
    """The MoE MLP of one layer against the dense MLP it replaces (per micro-batch, one GPU)."""

    dense_gemm_forward_s: float  # the dense MLP's up (+ gate) and down GEMMs, to be taken out
    gemm_forward_s: float  # router, shared experts and this rank's routed experts, forward
    elementwise_bytes: float  # forward HBM bytes added: wider activation function, permutations
    elementwise_kernels: int
    kept_bytes: float  # activation bytes kept for backward added (wider MLP, dispatched tokens)
    act_output_bytes: float  # of those, the routed experts' fc2 inputs (what ``moe_act`` recompute drops)
    act_recompute_s: float  # recomputing the routed experts' activation function in backward
    tp_comm_s: float  # the MoE MLP's tensor-parallel traffic, exposed: routed tokens' expert-TP gather / scatter, shared experts' TP collectives
    ep_comm_s: float  # dispatch + combine, forward and backward: four all-to-alls, on the wire
    parameter_count: int  # this GPU's parameters of the whole MoE layer
    expert_parameter_count: int  # of which routed experts (sharded over ep and etp)
    model_flops: float  # useful forward + backward FLOPs added on this GPU (active experts for the dense MLP)
    # FP8-family precisions quantise each GEMM's input forward and its output gradient backward
    # (solver.cost.analytic._fp8_cast_s charges the dense MLP's); the MoE MLP's, beyond those:
    quantised_forward_elements: float  # the routed experts' fc1 and fc2 inputs, the shared experts'
    quantised_backward_elements: float  # the routed and shared experts' output gradients
    quantised_tensors: int  # quantisation kernels per pass beyond the dense MLP's two (one per tensor, or per expert)


def dispatch_bytes(model: ModelSpec, tokens: float, tp_size: int) -> float:
    """Bytes one rank holds for one dispatch (or combine) all-to-all: its tokens/tp share of the
    micro-batch's tokens (the dense TP group's sequence-parallel split, whatever the experts' etp),
    each sent to k experts, h wide, 16 bit. The all-to-all sends (ep - 1)/ep of it to other ranks
    (``comm.all_to_all_s``)."""
    return tokens / tp_size * model.experts_per_token * model.hidden_size * BYTES_16BIT


def remote_domain_copies(model: ModelSpec, ep_size: int, ranks_per_domain: int) -> float:
    """How many other NVLink domains one token's top-k experts are on, on average, with the
    experts spread evenly over the ep_size / ranks_per_domain domains of the expert-parallel group
    and routing uniform (force-balanced, as the published MoE runs route). A token picks k of the
    E experts; a domain holding E / D of them is missed with probability C(E - E/D, k) / C(E, k).
    With group-limited routing whose groups fill whole domains (``ModelSpec.router_groups`` a
    multiple of D; DeepSeek-V3's 8 groups on 8 nodes at ep 64) the token reaches a domain when one
    of its top ``router_group_topk`` groups lies there: (D - 1)(1 - C(g - g/D, t) / C(g, t)), each
    chosen group taken to receive one of the k (DeepSeek-V3 Sec 2.1.2: at most M = 4 nodes)."""
    domains = ep_size // ranks_per_domain
    if domains <= 1:
        return 0.0
    groups = model.router_groups
    # What a domain holds E / D (or g / D) of, and how many of them a token picks.
    pool, picks = (groups, model.router_group_topk) if groups > 1 and groups % domains == 0 else (model.num_experts, model.experts_per_token)
    return (domains - 1) * (1 - math.comb(pool - pool // domains, picks) / math.comb(pool, picks))


def ep_comm_s(
    cluster: ClusterSpec, model: ModelSpec, tokens: float, tp_size: int, ep_size: int, expert_tp_size: int | None = None,
    dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL,
) -> float:
    """One MoE layer's all-to-alls on one rank: dispatch and combine forward, their gradients
    backward (2 + 2), as they take on the wire; ``ep_comm_exposed_s`` says what they add to the
    step. The ep ranks are etp apart (``expert_tp_size``; None: tp). The flex dispatcher
    (``dispatcher`` FLEX) sends each of the rank's tokens/tp tokens over the network once per other
    domain it reaches (``remote_domain_copies``, h wide, 16 bit) and forwards it over NVLink
    (``comm.forwarded_all_to_all_s``); Megatron-core's alltoall dispatcher sends every copy."""
    spacing = tp_size if expert_tp_size is None else expert_tp_size
    message = dispatch_bytes(model, tokens, tp_size)
    in_domain = ep_ranks_per_domain(cluster, ep_size, spacing)
    # A group that fills its domains evenly (an ep of 12 on nodes of 8 does not: costed as the alltoall).
    if dispatcher is MoeDispatcher.FLEX and ep_size % in_domain == 0:
        remote = remote_domain_copies(model, ep_size, in_domain)
        network = tokens / tp_size * remote * model.hidden_size * BYTES_16BIT
        return 4 * forwarded_all_to_all_s(cluster, message, network, ep_size, spacing)
    return 4 * all_to_all_s(cluster, message, ep_size, spacing)


def _at_etp(value: float, expert_tp_size: int, tp_size: int) -> float:
    """``value`` (a routed-token quantity at etp = tp) at ``expert_tp_size``: x etp / tp. Left
    untouched at etp = tp, so that those figures are what they were before etp existed."""
    return value if expert_tp_size == tp_size else value * expert_tp_size / tp_size


def ep_comm_exposed_s(comm_s: float, layer_compute_s: float, overlap: bool, slowdown: float) -> float:
    """Seconds one MoE layer's four all-to-alls (``comm_s``, per micro-batch) add to the step.

    Without overlap (``TrainingSpec.ep_comm_overlap`` False) they run on the compute stream and
    are waited for: all of ``comm_s``. With it, each runs beside the compute of another
    micro-batch's pass through the same layer: Megatron-core's combined 1F1B schedule
    (``--overlap-moe-expert-parallel-comm``) pairs one micro-batch's forward with another's
    backward and issues the dispatch and combine of one inside the attention and expert compute of
    the other; DeepSeek-V3's DualPipe (arXiv 2412.19437 Sec 3.2.1, Figure 4) does the same with a
    forward and a backward chunk. The compute they hide behind is the layer's forward and backward
    (``layer_compute_s``), which runs ``slowdown`` slower beside them (``GpuSpec.overlap_slowdown``):
    the same physics as the overlapped TP collectives (``comm.overlapped_exposed_s``)."""
    if not overlap:
        return comm_s
    return overlapped_exposed_s(comm_s, layer_compute_s, slowdown)


def moe_mlp_cost(
    model: ModelSpec, cluster: ClusterSpec, precision: Precision, tokens: int, tp_size: int, ep_size: int,
    saved_input_bytes: float = BYTES_16BIT, expert_gemms: ExpertGemms = ExpertGemms.GROUPED, expert_tp_size: int | None = None,
    act_input_bytes: float = BYTES_16BIT, dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL,
) -> MoeMlpCost:
    """The MoE MLP of one layer on one GPU (see the module docstring); ``tokens`` = b * s / cp;
    the routed experts split over ``expert_tp_size`` ranks (None: tp_size), the router and the
    shared experts over tp as the dense MLP.

    Kept for backward, per token through an expert (Megatron-core ``TEGroupedMLP`` and
    ``SharedExpertMLP`` at NVIDIA/Megatron-LM 8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2,
    megatron/core/transformer/moe/experts.py): fc1's input (the dispatched token, h wide), the
    activation function's input (fc1's output: SwiGLU's gate and up, 2 x 2 bytes per inner
    element; GELU's or squared ReLU's 2) and fc2's input (the activation's output). The two GEMM
    inputs are kept as ``saved_input_bytes`` per element: 2, or the FP8-family copy Transformer
    Engine's GEMMs keep (``TrainingSpec.low_precision_saved_inputs``); the activation function's
    input, routed and shared experts', ``act_input_bytes`` per element: 2, or 1 where the stack
    caches an FP8 copy (``TrainingSpec.moe_act_input_dtype``: DeepSeek-V3, arXiv 2412.19437 Sec
    3.3.3; the cast taken as fused into the activation kernel, whose extra 1-byte write per element
    forward the backward's 1-byte read instead of 2 pays back, so the element-wise bytes are
    unchanged). The router's input is the norm output the dense layer already keeps. ``moe_act``
    recompute (``act_output_bytes``, ``act_recompute_s``) drops
    fc2's input and runs the activation again in backward (experts.py
    ``activation_checkpoint.discard_output_and_register_recompute``).

    ``expert_gemms`` (``TrainingSpec.expert_gemms``): with PER_EXPERT each routed GEMM is one
    launch per local expert (Transformer Engine's ``GroupedLinear``), each at the per-kernel cost
    every kernel here pays (``GpuSpec.kernel_launch_s``); its four compute streams overlap the
    experts' work, which the pooled tiles of one batched GEMM stand for, but not their launches.
    With MXFP8 each local expert's rows are also quantised by a kernel of their own."""
    gpu, t, h = cluster.gpu, tp_size, model.hidden_size
    et = t if expert_tp_size is None else expert_tp_size  # the routed experts' tensor-parallel group (experts.py: expt_tp)
    gate_up = 2 if model.mlp_activation is MlpActivation.SWIGLU else 1
    f, fe, k = model.ffn_hidden_size, model.moe_ffn_hidden_size, model.experts_per_token
    dense = gemm_time_s(gpu, precision, tokens, gate_up * f / t, h) + gemm_time_s(gpu, precision, tokens, h, f / t)
    local_experts = model.num_experts // ep_size
    # Received by the busiest rank and gathered over its expert-TP group: tokens/tp x k x etp.
    routed_tokens = _at_etp(tokens * k * EXPERT_LOAD_FACTOR, et, t)
    per_expert = routed_tokens / local_experts  # rows of each local expert's grouped GEMM
    shared = model.num_shared_experts * fe
    per_expert_kernels = expert_gemms is ExpertGemms.PER_EXPERT
    # gemm_time_s charges one launch per batched GEMM; one per local expert adds the others.
    extra_launches_s = (local_experts - 1) * gpu.kernel_launch_s if per_expert_kernels else 0.0
    gemm_s = (
        gemm_time_s(gpu, precision, tokens, model.num_experts, h)  # router logits
        + gemm_time_s(gpu, precision, per_expert, gate_up * fe / et, h, batch=local_experts)  # routed up (+ gate)
        + gemm_time_s(gpu, precision, per_expert, h, fe / et, batch=local_experts)  # routed down
        + 2 * extra_launches_s
    )
    if shared:
        gemm_s += gemm_time_s(gpu, precision, tokens, gate_up * shared / t, h) + gemm_time_s(gpu, precision, tokens, h, shared / t)
    # What the activation function sees, in elements per tp-th (the routed experts' 1/etp slices
    # of routed_tokens rows counted as tp/etp of them).
    routed_elements = routed_tokens * fe if et == t else routed_tokens * fe * t / et
    inner_elements = routed_elements + tokens * shared
    activation_fn = (6 if gate_up == 2 else 4)  # HBM bytes per inner element: as the dense layer's
    elementwise = activation_fn * (inner_elements - tokens * f) / t + PERMUTE_BYTES_PER_ELEMENT * routed_tokens * h
    g = saved_input_bytes
    dense_act_input = BYTES_16BIT * gate_up  # the dense MLP's fc1 output, 16 bit: SwiGLU's gate and up, GELU's (squared ReLU's) one
    act_input = act_input_bytes * gate_up  # the experts' (TrainingSpec.moe_act_input_dtype)
    # Against the dense MLP's act input and down-projection input (analytic._kept_bytes), which
    # the MoE MLP replaces; the dense MLP's input (the norm output) stays, as the router's. The
    # last term takes the dense MLP's act input out at its own 16 bits (0 when the experts keep 16 bits too).
    kept = (
        (act_input + g) * (inner_elements - tokens * f) / t + g * routed_tokens * h + (g * tokens * h if shared else 0)
        + (act_input - dense_act_input) * tokens * f / t
    )
    act_output = g * routed_tokens * fe / et
    # The dense MLP's TP all-reduce of tokens x h (forward and backward) becomes an all-gather and
    # a reduce-scatter of the routed tokens (k x more rows) inside the expert-TP group, issued by
    # the token dispatcher between the all-to-alls: at etp = tp the same ring volume; at etp 1
    # none (the layer keeps its tokens sequence-parallel). The shared experts are Megatron-core's
    # SharedExpertMLP, an MLP on the dense TP group (moe/shared_experts.py at NVIDIA/Megatron-LM
    # 8f1c2f8ae: linear_fc1 column-parallel, linear_fc2 row-parallel), so at any etp they add
    # the dense MLP's own collective, one all-reduce of tokens x h (all-gather + reduce-scatter
    # under sequence parallelism) forward and one backward. Both stay exposed: the dispatcher's
    # are not Transformer Engine's overlapped GEMM collectives, and the shared experts run after
    # the routed ones unless --moe-shared-expert-overlap, which the cost model does not take.
    expert_gather_s = all_reduce_s(BYTES_16BIT * _at_etp(tokens * k * h, et, t), et, tp_link(cluster, et))
    shared_s = all_reduce_s(BYTES_16BIT * tokens * h, t, tp_link(cluster, t)) if shared else 0.0
    tp_moe = 2 * (expert_gather_s + shared_s)
    experts = layer_expert_parameter_count(model)
    dense_part = layer_parameter_count(model, moe=True) - experts
    expert_local = experts // (ep_size * et)
    return MoeMlpCost(
        dense_gemm_forward_s=dense,
        gemm_forward_s=gemm_s,
        elementwise_bytes=elementwise,
        elementwise_kernels=PERMUTE_KERNELS,
        kept_bytes=kept,
        act_output_bytes=act_output,
        act_recompute_s=elementwise_time_s(gpu, activation_fn * routed_tokens * fe / et, kernels=1),
        tp_comm_s=tp_moe,
        ep_comm_s=ep_comm_s(cluster, model, tokens, t, ep_size, et, dispatcher),
        parameter_count=dense_part // t + expert_local,
        expert_parameter_count=expert_local,
        model_flops=3.0 * (layer_forward_gemm_flops(model, tokens, moe=True) - layer_forward_gemm_flops(model, tokens)) / t,
        # fc1 reads h-wide rows, fc2 fe/etp-wide ones; backward quantises fc1's gate_up*fe/etp-wide and
        # fc2's h-wide output gradients. The dense MLP's tokens x (h + f/t) and x (gate_up*f/t + h)
        # are charged with the dense layer already.
        quantised_forward_elements=routed_tokens * (h + fe / et) + tokens * (h + shared / t) * bool(shared) - tokens * (h + f / t),
        quantised_backward_elements=(
            routed_tokens * (gate_up * fe / et + h) + tokens * (gate_up * shared / t + h) * bool(shared) - tokens * (gate_up * f / t + h)
        ),
        quantised_tensors=2 * (local_experts if per_expert_kernels and precision is Precision.MXFP8 else 1) + 2 * bool(shared) - 2,
    )

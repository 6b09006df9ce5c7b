"""Offload: model states kept in host memory instead of the GPU's, what that saves on the GPU, what
it needs on the host, and what it costs in time.

Sources: Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training" (arXiv
2101.06840), Sec 3-4: of the 16 bytes per parameter of mixed-precision Adam, the GPU keeps the
16-bit parameters (2) and the host the fp32 master weights, momentum and variance (12) and the
fp32 gradients (4); backward's 16-bit gradients go down over PCIe as they are produced
(overlapped with backward), the CPU runs Adam, and the 16-bit parameters come back up before the
next forward. With data parallelism each rank offloads and steps only its ZeRO-2 partition
(Sec 4.2). Its one-step delayed parameter update (DPU, Sec 4.1) is not modelled: the CPU step
and the upload are charged after backward, as in its default schedule. Rajbhandari et al. 2021,
"ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale Deep Learning" (arXiv
2104.07857), Sec 5-6: the 16-bit parameters live on the host too and each layer's are brought
to the GPU before it runs, in forward and again in backward, as ZeRO-3 gathers them, prefetched
beside the previous layer's compute; each rank moves its own 1/dp partition over PCIe and the
ranks all-gather them (ZeRO-3's all-gather, costed in ``solver.cost.schedule``).

Where the gradients are is the ZeRO stage's: under ZeRO-2/3 they stream to the host as backward
produces them (ZeRO-Offload's schedule, DeepSpeed's stage-2/3 offload); under ZeRO-0/1 the GPU
keeps its gradient buffer as without offload and the rank's shard goes down once, after the
last backward (Megatron-core's ``optimizer_cpu_offload``, whose HybridDeviceOptimizer copies the
gradients to the host at the step; DeepSpeed's stage-1 offload at the accumulation boundary).

With activations offloaded as well (ZeRO-Infinity Sec 5, DeepSpeed's cpu_checkpointing), the
inputs that fully recomputed layers keep for backward (their checkpoints) go to host memory as
forward produces them and come back as backward reaches them: the GPU holds two layers' worth
(one on its way down, one on its way up) instead of every recomputed layer's.

Partial activation offload (``ParallelConfig.activation_offload_layers``) is Megatron-core's
``cpu_offloading`` with ``cpu_offloading_num_layers`` N (NVIDIA/Megatron-LM 8f1c2f8,
megatron/core/transformer/transformer_block.py: each layer's forward runs inside Transformer
Engine's ``get_cpu_offload_context``), which Megatron-Bridge's performance recipes set for
Llama 3 70B under Megatron-FSDP (NVIDIA-NeMo/Megatron-Bridge df0289c,
scripts/performance/configs/llama/llama3_workload_base_configs.py: 20 layers on GB300, 40 on
GB200; utils/overrides.py sets cpu_offloading True, cpu_offloading_weights False). What moves
is Transformer Engine's (NVIDIA/TransformerEngine 5671fd3, the commit Megatron-Bridge pins,
transformer_engine/pytorch/cpu_offload.py, ``DefaultOffloadSynchronizer``): every tensor a layer
saves for backward through the saved-tensor hooks, except parameters and the weights its modules
mark not to offload (``mark_not_offload``: FP8 weight copies too) and tensors under 256K
elements (per-token norm statistics: under a hundredth of a layer, neglected here), of layers
0..N-1; so the GPU keeps the activations of L - N layers at the peak ("peak memory usage of
saving activations is (num_layers - num_offloaded_layers) * T", its docstring). Copies run on one
side stream, device to host into pinned buffers as each tensor is saved; layer i's GPU copy is
freed at the start of layer L - N + i's forward, where compute waits for its copy to have
finished; in backward layer i's reload starts when the backward of layer L - 1 - N + i begins,
and compute waits for it before layer i's backward. Host memory holds one micro-batch's N layers
(the buffers are freed after backward). ``activation_offload_exposed_s`` replays that schedule.

NVMe (``ParallelConfig.nvme_offload``) is ZeRO-Infinity's third tier (Rajbhandari et al. 2021,
arXiv 2104.07857, Sec 4-6) as DeepSpeed's ZeRO-3 runs it (deepspeedai/DeepSpeed edaa722,
deepspeed/runtime/zero/stage3.py and deepspeed/runtime/swap_tensor/). What lives where: with the
optimizer on NVMe, the fp32 master weights, momentum and variance and the fp32 gradients of the
rank's shard are files on the node's NVMe volume, and host memory keeps only the optimizer
swapper's pinned buffers (``offload_optimizer.buffer_count`` of them, one sub-group each); with the
parameters on NVMe too, the 16-bit parameters are files as well and host memory keeps the
parameter swapper's ``buffer_count`` x ``buffer_size`` pinned elements. The GPU holds what it holds
under host offload: the tier behind the host changes nothing on the GPU. Bandwidth-centric
partitioning (Sec 6.1): every rank reads and writes only its own 1/dp partition, all ranks of a
node at once, so each rank gets its share of the node's NVMe bandwidth (``nvme_share_bytes_per_s``;
the SC21 talk's DGX-2 figures: 28 GB/s of NVMe reads per node, 1.75 GB/s per GPU). The step
(stage3.py ``step``, per sub-group: ``_prepare_sub_group``, ``_optimizer_step``,
``_reassign_or_swap_out_partitioned_parameters``, ``_release_sub_group``): the gradients go to NVMe
at the accumulation boundary (``_finalize_offload_gradient_accumulation``: ``swap_out_gradients``,
asynchronous but flushed before the first sub-group is read back), then each sub-group's states and
gradients are read, stepped by the CPU, and its states (and with the parameters on NVMe its new
16-bit parameters) written back. DeepSpeed's default swapper (``PartitionedOptimizerSwapper``;
``pipeline_read``/``pipeline_write`` false) waits for each read and each write, so the step is
their sum with the CPU's (``nvme_step_s``); the pipelined swapper, which overlaps the next
sub-group's read and the last one's write with the step, is not what the export writes and is not
modelled. Parameters on NVMe are read for each layer in forward and again in backward; ZeRO-Infinity's
overlap-centric design (Sec 6.2) prefetches them, NVMe to host for a later layer while host to GPU
runs for the next and the GPU computes the current one, so a pass's parameters arrive at the
slower of the two links, beside compute (``offload_exposed_s``). Activation checkpoints go to host
memory only (DeepSpeed's cpu_checkpointing), never to NVMe.
"""

from __future__ import annotations

from solver.cost.memory import (
    MOMENT_BYTES,
    MOMENTS_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    ZERO3_PREFETCHED_LAYERS,
    optimizer_bytes_per_param,
)
from solver.spec.dimensions import NvmeOffload, Offload
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.rules import Rule
from solver.spec.training import MomentsDtype, OptimizerKind, ZeroStage

# The host's fp32 gradient buffer the CPU optimizer reads (ZeRO-Offload Sec 3: "fp32 ... gradients"
# on the CPU; DeepSpeed's stage-2 offload accumulates into a pinned fp32 buffer).
HOST_GRAD_BYTES_PER_PARAM = 4
# Fraction of nominal PCIe bandwidth a pinned host<->device copy reaches: CUDA's bandwidthTest
# moves about 12-13 GB/s over a Gen3 x16 link (15.75 GB/s nominal) and about 25 GB/s over Gen4
# x16 (31.5 GB/s), about 0.8 of nominal. Assumed for every generation (no Gen5 measurement in our
# sources).
PCIE_EFFICIENCY = 0.8
# Fraction of a node's nominal DRAM bandwidth (channels x transfer rate, data/nodes.json) that a
# streaming CPU kernel reaches: the 0.8 assumed for STREAM-style GPU kernels (hbm_efficiency),
# taken for the host too (no STREAM measurement of these hosts in our sources).
HOST_MEMORY_EFFICIENCY = 0.8
# DeepSpeed's CPU-Adam (the AVX-vectorised kernel of ZeRO-Offload Sec 4.1) streams per parameter:
# reads fp32 master weight, gradient, momentum and variance (16), writes weight, momentum and
# variance (12) and the 16-bit copy sent back to the GPU (2) = 30 bytes. It is memory bound on
# the host (Sec 4.1: vectorisation and tiling bring it to the memory's speed, 5-7x faster than
# PyTorch's CPU Adam per DeepSpeed's ZeRO-Offload tutorial). SGD: 8 + 4 read, 8 + 2 written = 22.
# With fp32 moments; ``cpu_optimizer_bytes_per_param`` narrows them.
CPU_OPTIMIZER_BYTES_PER_PARAM = {OptimizerKind.ADAM: 30, OptimizerKind.SGD: 22}


def cpu_optimizer_bytes_per_param(optimizer: OptimizerKind, moments: MomentsDtype = MomentsDtype.FP32) -> int:
    """Host memory traffic of the CPU optimizer step per parameter: CPU_OPTIMIZER_BYTES_PER_PARAM,
    each moment read and written in ``moments`` (2 bytes instead of 4 in bf16)."""
    narrower = MOMENTS_PER_PARAM[optimizer] * (MOMENT_BYTES[MomentsDtype.FP32] - MOMENT_BYTES[moments])
    return CPU_OPTIMIZER_BYTES_PER_PARAM[optimizer] - 2 * narrower

# --- NVMe (see the module; DeepSpeed edaa722 defaults unless the export writes its own) ---------
# The fp32 gradients DeepSpeed swaps out beside the optimizer states (OptimizerSwapper
# ``swap_out_gradients``; the master weights' dtype).
NVME_GRAD_BYTES_PER_PARAM = 4
# The optimizer swapper's pinned pool: ``offload_optimizer.buffer_count`` buffers (default 4, "at
# least the number of states maintained per parameter", DeepSpeed's config reference), each one
# sub-group of fp32 elements (OptimizerSwapper's ``largest_numel``, the largest sub-group).
NVME_OPTIMIZER_SWAP_BUFFERS = 4
NVME_SWAP_BYTES_PER_ELEMENT = 4
# Sub-group (``zero_optimization.sub_group_size``) the export writes with NVMe offload, in
# elements of a rank's partition. DeepSpeed's default of 1e9 makes the pool 4 x 4 bytes per
# parameter of any shard under a billion parameters: as much host memory as keeping the states
# there. 1e8 keeps the pool at 1.6 GB per rank while each read and write stays a 400 MB sequential
# transfer. A choice written into the export (so plan and launch agree), not a measurement.
NVME_SUB_GROUP_ELEMENTS = 1e8
# The parameter swapper's pinned pool: ``offload_param.buffer_count`` (5) x ``buffer_size`` (1e8
# elements) of 16-bit parameters (AsyncPartitionedParameterSwapper ``_configure_aio``), 1 GB per
# rank. The export writes ``max_in_cpu`` 0, so no parameters are kept in host memory besides.
NVME_PARAM_SWAP_BUFFERS = 5
NVME_PARAM_BUFFER_ELEMENTS = 1e8


def offloads_params(offload: Offload) -> bool:
    return offload.offloads_params


def offloads_activations(offload: Offload) -> bool:
    return offload is Offload.OPTIMIZER_PARAMS_ACTIVATIONS


def params_on_nvme(nvme: NvmeOffload) -> bool:
    return nvme is NvmeOffload.OPTIMIZER_PARAMS


# Checkpoints on the GPU under activation offload: one layer's being copied down in forward and
# one layer's brought back ahead of its backward.
OFFLOADED_CHECKPOINT_BUFFERS = 2


def checkpoint_buffer_bytes(largest_checkpoint_bytes: float, offload: Offload) -> float:
    """GPU memory activation offload keeps for checkpoints in transit (nothing without it)."""
    return OFFLOADED_CHECKPOINT_BUFFERS * largest_checkpoint_bytes if offloads_activations(offload) else 0.0


def streams_gradients(offload: Offload, zero_stage: ZeroStage) -> bool:
    """Whether gradients go to the host as backward produces them (ZeRO-2/3 with offload) rather
    than staying in the GPU's buffer until the step (ZeRO-0/1 with offload; see the module)."""
    return offload is not Offload.NONE and zero_stage >= ZeroStage.OS_G


def gpu_model_states(states: dict[str, float], offload: Offload, zero_stage: ZeroStage) -> dict[str, float]:
    """What of a stage's model states (``solver.cost.memory.model_state_bytes``) stays on the GPU:
    no optimizer states once the optimizer is offloaded; no whole gradients where they stream to
    the host (``offload_buffer_bytes`` holds them on the way); no resident weights once the
    parameters are offloaded (they stream up layer by layer)."""
    if offload is Offload.NONE:
        return states
    return {
        "weights": 0.0 if offloads_params(offload) else states["weights"],
        "gradients": 0.0 if streams_gradients(offload, zero_stage) else states["gradients"],
        "optimizer_states": 0.0,
    }


def offload_buffer_bytes(
    largest_layer_parameter_count: float, stage_parameter_count: float, offload: Offload, zero_stage: ZeroStage,
    grad_bytes_per_param: int,
) -> float:
    """GPU buffers offload needs: where gradients stream, one layer's staged for the copy down
    (the bucket ZeRO-Offload moves while backward goes on), and, with parameter offload, the
    16-bit parameters of the layer in use and the one prefetched (ZeRO-Infinity, as ZeRO-3's
    gather buffers), never more than the stage's parameters (``stage_parameter_count`` = inf:
    before the stage's layers are known)."""
    if offload is Offload.NONE:
        return 0.0
    layer = min(largest_layer_parameter_count, stage_parameter_count)
    buffers = grad_bytes_per_param * layer if streams_gradients(offload, zero_stage) else 0.0
    if offloads_params(offload):
        buffers += WEIGHT_BYTES_PER_PARAM * min(ZERO3_PREFETCHED_LAYERS * largest_layer_parameter_count, stage_parameter_count)
    return buffers


def host_bytes_per_gpu(
    optimizer_state_bytes: float, optimizer: OptimizerKind, offload: Offload, nvme: NvmeOffload = NvmeOffload.NONE,
    moments: MomentsDtype = MomentsDtype.FP32,
) -> float:
    """Host memory one GPU's offloaded states take, from what its optimizer states would take on
    the GPU (``optimizer_state_bytes``, sharded as ZeRO shards them): those states, the fp32
    gradients of the same shard, and with parameter offload its 16-bit parameters
    (ZeRO-Offload Sec 3: 12 + 4 bytes per parameter on the host; ZeRO-Infinity: + 2). What is on
    NVMe (``nvme``) leaves only the swappers' pinned buffers in host memory (see the module).
    ``moments``: the dtype of the optimizer's moments the states were sized with
    (``solver.cost.memory.optimizer_bytes_per_param``)."""
    if offload is Offload.NONE:
        return 0.0
    per_param = optimizer_bytes_per_param(optimizer, moments)
    shard = optimizer_state_bytes / per_param
    if nvme is NvmeOffload.NONE:
        host = shard * (per_param + HOST_GRAD_BYTES_PER_PARAM)
    else:
        host = NVME_OPTIMIZER_SWAP_BUFFERS * NVME_SWAP_BYTES_PER_ELEMENT * min(shard, NVME_SUB_GROUP_ELEMENTS)
    if offloads_params(offload):
        if params_on_nvme(nvme):
            host += NVME_PARAM_SWAP_BUFFERS * NVME_PARAM_BUFFER_ELEMENTS * WEIGHT_BYTES_PER_PARAM
        else:
            host += shard * WEIGHT_BYTES_PER_PARAM
    return host


def nvme_bytes_per_gpu(
    optimizer_state_bytes: float, optimizer: OptimizerKind, offload: Offload, nvme: NvmeOffload,
    moments: MomentsDtype = MomentsDtype.FP32,
) -> float:
    """NVMe one GPU's offloaded states take (nothing without NVMe offload): its shard's optimizer
    states and fp32 gradients, and with the parameters there its 16-bit parameters: 12 + 4 (+ 2)
    bytes per parameter of the shard for Adam, the states ZeRO-Infinity's NVMe tier holds (8 + 4
    with bf16 ``moments``)."""
    if offload is Offload.NONE or nvme is NvmeOffload.NONE:
        return 0.0
    states_per_param = optimizer_bytes_per_param(optimizer, moments)
    shard = optimizer_state_bytes / states_per_param
    per_param = states_per_param + NVME_GRAD_BYTES_PER_PARAM
    if params_on_nvme(nvme):
        per_param += WEIGHT_BYTES_PER_PARAM
    return shard * per_param


def gpus_sharing_host(cluster: ClusterSpec, num_gpus: int) -> int:
    """GPUs of one node that the plan uses: they share its host memory and its CPUs."""
    return min(cluster.gpus_per_node, num_gpus)


def pcie_s(cluster: ClusterSpec, message_bytes: float) -> float:
    """One GPU's copy of ``message_bytes`` to or from host memory over its PCIe link."""
    if message_bytes <= 0:
        return 0.0
    return message_bytes / (_given(cluster.pcie_bytes_per_s) * PCIE_EFFICIENCY)


def cpu_optimizer_step_s(
    cluster: ClusterSpec, shard_parameter_count: float, optimizer: OptimizerKind, num_gpus: int,
    moments: MomentsDtype = MomentsDtype.FP32,
) -> float:
    """The CPU optimizer step over one GPU's ``shard_parameter_count`` parameters, memory bound on
    the host: every GPU of the node steps its shard at once, so each gets its share of the node's
    DRAM bandwidth."""
    share = _given(cluster.host_memory_bytes_per_s) * HOST_MEMORY_EFFICIENCY / gpus_sharing_host(cluster, num_gpus)
    return cpu_optimizer_bytes_per_param(optimizer, moments) * shard_parameter_count / share


def nvme_share_bytes_per_s(cluster: ClusterSpec, num_gpus: int, write: bool = False) -> float:
    """One GPU's share of its node's NVMe read (or write) bandwidth: every GPU of the node moves
    its own partition at once (ZeRO-Infinity's bandwidth-centric partitioning, Sec 6.1)."""
    bandwidth = cluster.nvme_write_bytes_per_s if write else cluster.nvme_read_bytes_per_s
    return _given_nvme(bandwidth) / gpus_sharing_host(cluster, num_gpus)


def nvme_s(cluster: ClusterSpec, message_bytes: float, num_gpus: int, write: bool = False) -> float:
    """One GPU's read (or write) of ``message_bytes`` from (to) its node's NVMe volume."""
    if message_bytes <= 0:
        return 0.0
    return message_bytes / nvme_share_bytes_per_s(cluster, num_gpus, write)


def nvme_step_s(
    cluster: ClusterSpec, nvme: NvmeOffload, shard_parameter_count: float, optimizer: OptimizerKind, num_gpus: int,
    moments: MomentsDtype = MomentsDtype.FP32,
) -> float:
    """The step's NVMe traffic for one GPU, which DeepSpeed's default swapper does not overlap
    with the CPU step (see the module): the shard's fp32 gradients written at the accumulation
    boundary, its states and gradients read back, its states (and, with the parameters on NVMe,
    its new 16-bit parameters) written, each at the GPU's share of the node's bandwidth."""
    if nvme is NvmeOffload.NONE:
        return 0.0
    states = optimizer_bytes_per_param(optimizer, moments) * shard_parameter_count
    grads = NVME_GRAD_BYTES_PER_PARAM * shard_parameter_count
    params = WEIGHT_BYTES_PER_PARAM * shard_parameter_count if params_on_nvme(nvme) else 0.0
    return nvme_s(cluster, states + grads, num_gpus) + nvme_s(cluster, grads + states + params, num_gpus, write=True)


def offload_exposed_s(
    cluster: ClusterSpec, offload: Offload, zero_stage: ZeroStage, shard_parameter_count: float, largest_layer_shard: float,
    forward_s: float, backward_s: float, grad_bytes_per_param: int, checkpoint_bytes: float = 0.0,
    nvme: NvmeOffload = NvmeOffload.NONE, num_gpus: int = 1,
) -> float:
    """One micro-batch's PCIe traffic that compute does not hide, for one GPU whose shard (its
    1/dp of the stage, as ZeRO partitions it) is ``shard_parameter_count`` parameters:
    streamed gradients sent down during backward (ZeRO-Offload Sec 4.1), and with parameter
    offload the parameters brought up for forward and again for backward, prefetched beside the
    compute except the first layer's (ZeRO-Infinity Sec 6). PCIe copies run on the copy
    engines, so the compute beside them is not slowed. Gradients kept on the GPU go down at the
    step (``offload_step_s``). ``checkpoint_bytes``: one micro-batch's offloaded activation
    checkpoints, down during forward and up during backward. Parameters on NVMe (``nvme``, on
    ``num_gpus`` GPUs) reach the host at the GPU's share of the node's NVMe read bandwidth, in a
    pipeline with the PCIe copies (ZeRO-Infinity Sec 6.2): each pass moves them at the slower of
    the two, and the first layer waits for both."""
    if offload is Offload.NONE:
        return 0.0
    streamed = streams_gradients(offload, zero_stage)
    grads_down_s = pcie_s(cluster, grad_bytes_per_param * shard_parameter_count) if streamed else 0.0
    if not offloads_params(offload):
        return max(0.0, grads_down_s - backward_s)
    params_up_s = pcie_s(cluster, WEIGHT_BYTES_PER_PARAM * shard_parameter_count)
    first_layer_s = pcie_s(cluster, WEIGHT_BYTES_PER_PARAM * largest_layer_shard)
    if params_on_nvme(nvme):
        params_up_s = max(params_up_s, nvme_s(cluster, WEIGHT_BYTES_PER_PARAM * shard_parameter_count, num_gpus))
        first_layer_s += nvme_s(cluster, WEIGHT_BYTES_PER_PARAM * largest_layer_shard, num_gpus)
    checkpoints_s = pcie_s(cluster, checkpoint_bytes) if offloads_activations(offload) else 0.0
    # PCIe is full duplex: in forward parameters go up while checkpoints go down; in backward
    # parameters and checkpoints share the way up, gradients go down.
    forward_exposed = max(0.0, max(params_up_s, checkpoints_s) - forward_s)
    backward_exposed = max(0.0, max(params_up_s + checkpoints_s, grads_down_s) - backward_s)
    return forward_exposed + backward_exposed + first_layer_s


def offload_step_s(
    cluster: ClusterSpec, offload: Offload, zero_stage: ZeroStage, shard_parameter_count: float, optimizer: OptimizerKind,
    num_gpus: int, grad_bytes_per_param: int, nvme: NvmeOffload = NvmeOffload.NONE, moments: MomentsDtype = MomentsDtype.FP32,
) -> float:
    """The step after the last backward for one GPU: its gradient shard copied down where the GPU
    kept the gradients, the CPU optimizer over its shard, then (with only the optimizer
    offloaded) its updated 16-bit parameters copied up (ZeRO-Offload Sec 4.1, without DPU).
    With parameter offload they stay on the host for the next forward to stream. With the
    optimizer on NVMe, the swaps around the CPU step (``nvme_step_s``)."""
    if offload is Offload.NONE:
        return 0.0
    step_s = cpu_optimizer_step_s(cluster, shard_parameter_count, optimizer, num_gpus, moments)
    step_s += nvme_step_s(cluster, nvme, shard_parameter_count, optimizer, num_gpus, moments)
    if not streams_gradients(offload, zero_stage):
        step_s += pcie_s(cluster, grad_bytes_per_param * shard_parameter_count)
    if offloads_params(offload):
        return step_s
    return step_s + pcie_s(cluster, WEIGHT_BYTES_PER_PARAM * shard_parameter_count)


def host_copy_bytes_per_s(cluster: ClusterSpec, num_gpus: int) -> float:
    """What one GPU's copies to or from host memory reach while every GPU of its node copies at
    once: its host link (``pcie_bytes_per_s``: PCIe on x86 nodes, NVLink-C2C on Grace superchips;
    ``PCIE_EFFICIENCY`` of nominal, assumed for C2C too) or its share of the host's DRAM
    bandwidth (``HOST_MEMORY_EFFICIENCY`` of nominal), whichever is lower."""
    link = _given(cluster.pcie_bytes_per_s) * PCIE_EFFICIENCY
    memory = _given(cluster.host_memory_bytes_per_s) * HOST_MEMORY_EFFICIENCY / gpus_sharing_host(cluster, num_gpus)
    return min(link, memory)


def activation_offload_exposed_s(layers: tuple[tuple[float, float, float], ...], copy_bytes_per_s: float) -> float:
    """One micro-batch's compute time lost waiting for partial activation offload's copies, on a
    stage whose ``layers`` are (forward_s, backward_s, offloaded_bytes) in execution order, the
    first N with bytes to move (Transformer Engine's ``DefaultOffloadSynchronizer``, see the
    module): one copy stream moves layer i's activations down once its forward has produced
    them and must be done before layer L - N + i's forward starts; in backward it brings layer i
    back from the start of layer L - 1 - N + i's backward (the stream first waits for the
    compute queued so far) and compute waits for it before layer i's backward. Copies hide
    behind the compute of the layers between; what they do not hide is returned, in seconds."""
    count = len(layers)
    offloaded = sum(1 for _, _, moved in layers if moved > 0)
    if not offloaded:
        return 0.0
    copy_s = [moved / copy_bytes_per_s for _, _, moved in layers]
    # Forward: compute clock and copy-stream clock.
    clock = stream = 0.0
    done = [0.0] * count
    for k, (forward_s, _, _) in enumerate(layers):
        if k >= count - offloaded:
            clock = max(clock, done[k - (count - offloaded)])  # its GPU copy is freed here
        clock += forward_s
        if k < offloaded:
            stream = max(stream, clock) + copy_s[k]
            done[k] = stream
    exposed = clock - sum(forward_s for forward_s, _, _ in layers)
    # Backward, last layer first: the copy stream is idle by then (the forward's copies are done).
    clock = stream = 0.0
    ready = [0.0] * count
    for k in reversed(range(count)):
        i = k - (count - 1 - offloaded)
        if 0 <= i < offloaded:
            stream = max(stream, clock) + copy_s[i]
            ready[i] = stream
        if k < offloaded:
            clock = max(clock, ready[k])
        clock += layers[k][1]
    return exposed + clock - sum(backward_s for _, backward_s, _ in layers)


def _given(value: float | None) -> float:
    """A host figure ``check_structure`` has made sure of (Rule.OFFLOAD_NEEDS_HOST)."""
    if value is None:
        raise SpecError("cluster", "offload needs the cluster's host memory, PCIe and host memory bandwidth", Rule.OFFLOAD_NEEDS_HOST)
    return value


def _given_nvme(value: float | None) -> float:
    """An NVMe figure ``check_structure`` has made sure of (Rule.OFFLOAD_NEEDS_NVME)."""
    if value is None:
        raise SpecError("cluster", "offload to NVMe needs the cluster's NVMe capacity and bandwidths", Rule.OFFLOAD_NEEDS_NVME)
    return value

"""PyTorch FSDP: what it can run.

No pipeline schedule and no context parallelism here; it shards gradients with optimizer states (``SHARD_GRAD_OP`` = ZeRO-2)
or everything (``FULL_SHARD`` = ZeRO-3), or nothing (``NO_SHARD`` = plain data parallelism);
it has no optimizer-state-only sharding (ZeRO-1).
"""

from __future__ import annotations

from solver.spec.dimensions import NvmeOffload
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import ZeroStage


def violations(parallel: ParallelConfig) -> list[Violation]:
    out: list[Violation] = []
    if parallel.pp_size > 1:
        out.append(Violation(Rule.FRAMEWORK_PP, "fsdp has no pipeline parallelism; pp_size must be 1"))
    if parallel.zero_stage == ZeroStage.OS:
        out.append(Violation(Rule.FRAMEWORK_ZERO, "fsdp shards gradients with states (ZeRO-2) or everything (ZeRO-3); zero_stage 1 is not available"))
    if parallel.cp_size > 1:
        # FSDP (pytorch-fsdp1) shards the model only; splitting sequences is torchtitan's
        # context_parallel (FSDP2 + DTensor), which the 'fsdp' framework does not stand for.
        out.append(Violation(Rule.FRAMEWORK_CP, f"fsdp has no context parallelism; cp_size {parallel.cp_size} must be 1"))
    if parallel.ep_size > 1:
        # Expert parallelism needs a token dispatcher around the experts: torchtitan's
        # expert_parallel_degree, Megatron-core's, DeepSpeed-MoE's; FSDP alone has none.
        out.append(Violation(Rule.FRAMEWORK_EP, f"fsdp has no expert parallelism; ep_size {parallel.ep_size} must be 1"))
    if parallel.expert_tp_size is not None:
        out.append(Violation(
            Rule.FRAMEWORK_EXPERT_TP,
            f"fsdp has no expert tensor parallelism; parallel.expert_tp_size {parallel.expert_tp_size} must equal tp_size {parallel.tp_size}",
        ))
    if parallel.activation_offload_layers:
        # PyTorch FSDP's own options offload parameters (CPUOffload), not the first N layers'
        # activations on Transformer Engine's schedule (a Megatron-core setting).
        out.append(Violation(Rule.FRAMEWORK_ACTIVATION_OFFLOAD, "fsdp has no offload of the first N layers' activations (Megatron-core's cpu_offloading)"))
    if parallel.nvme_offload is not NvmeOffload.NONE:
        # PyTorch FSDP's CPUOffload moves parameters (and their gradients) to host memory only.
        out.append(Violation(Rule.FRAMEWORK_NVME, f"fsdp offloads to host memory only (CPUOffload); nvme_offload {parallel.nvme_offload.value} must be none"))
    return out

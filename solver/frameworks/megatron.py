"""Megatron-LM / Megatron-core: what it can run.

Its distributed optimizer shards optimizer states over data-parallel ranks (ZeRO-1) and nothing
more (Megatron-LM ``--use-distributed-optimizer``); gradients and parameters stay replicated.
"""

from __future__ import annotations

from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import ZeroStage


def violations(parallel: ParallelConfig) -> list[Violation]:
    zero = parallel.zero_stage
    if zero > ZeroStage.OS:
        return [Violation(Rule.FRAMEWORK_ZERO, f"megatron shards optimizer states only (ZeRO-1); zero_stage {int(zero)} is not available")]
    return []

"""DeepSpeed: what it can run.

Its pipeline engine accepts ZeRO-0/1 only: ZeRO-2/3 with pipeline parallelism is refused
(DeepSpeed ``PipelineEngine`` asserts the ZeRO stage is below 2).
"""

from __future__ import annotations

from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import ZeroStage


def violations(parallel: ParallelConfig) -> list[Violation]:
    zero, pp = parallel.zero_stage, parallel.pp_size
    if zero >= ZeroStage.OS_G and pp > 1:
        return [Violation(Rule.ZERO_WITH_PP, f"zero_stage {int(zero)} with pp_size {pp} is not supported (DeepSpeed allows only ZeRO-0/1 with pipelines)")]
    return []

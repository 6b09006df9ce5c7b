"""What each training framework can run: one module per framework (``megatron``, ``deepspeed``,
``fsdp``), each with its rules as ``violations(parallel)``; ``framework_violations`` asks the one
a request names. 'any' accepts what at least one of them runs, which rules out only ZeRO-2/3 with
pipeline parallelism (no framework here runs it)."""

from __future__ import annotations

from solver.frameworks import deepspeed, fsdp, megatron
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Violation
from solver.spec.training import Framework

_RULES = {
    Framework.ANY: deepspeed.violations,
    Framework.MEGATRON: megatron.violations,
    Framework.DEEPSPEED: deepspeed.violations,
    Framework.FSDP: fsdp.violations,
}


def framework_violations(parallel: ParallelConfig, framework: Framework) -> list[Violation]:
    """What ``framework`` cannot run of ``parallel`` (empty when it can)."""
    return _RULES[framework](parallel)

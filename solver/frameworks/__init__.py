"""What each training framework can run and how its launch config reads: one module per
framework (``megatron``, ``deepspeed``, ``fsdp``, ``torchtitan``, ``nemo``), each with its rules
as ``violations(parallel)`` and, where a plan can be exported to it, ``export(plan)``.
``framework_violations`` asks the one a request names. 'any' accepts what at least one of them
runs, which rules out only ZeRO-2/3 with pipeline parallelism (no framework here runs it).
``export_plan`` writes a plan in a framework's launch config (see ``solver.frameworks.export``)."""

from __future__ import annotations

from collections.abc import Callable

from solver.frameworks import deepspeed, fsdp, megatron, nemo, torchtitan
from solver.frameworks.export import Difference, Export, ExportFormat, LaunchFile, PlanToExport
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Violation
from solver.spec.training import Framework

__all__ = ["Difference", "Export", "ExportFormat", "LaunchFile", "PlanToExport", "export_plan", "framework_violations"]

_RULES = {
    Framework.ANY: deepspeed.violations,
    Framework.MEGATRON: megatron.violations,
    Framework.DEEPSPEED: deepspeed.violations,
    Framework.FSDP: fsdp.violations,
}

_EXPORTS: dict[ExportFormat, Callable[[PlanToExport], Export]] = {
    ExportFormat.MEGATRON: megatron.export,
    ExportFormat.DEEPSPEED: deepspeed.export,
    ExportFormat.TORCHTITAN: torchtitan.export,
    ExportFormat.NEMO: nemo.export,
}


def framework_violations(parallel: ParallelConfig, framework: Framework) -> list[Violation]:
    """What ``framework`` cannot run of ``parallel`` (empty when it can)."""
    return _RULES[framework](parallel)


def export_plan(plan: PlanToExport, export_format: ExportFormat) -> Export:
    """``plan`` as ``export_format``'s launch config: exact, or the nearest configuration the
    framework runs exactly with every difference named."""
    return _EXPORTS[ExportFormat(export_format)](plan)

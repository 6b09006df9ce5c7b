"""What each training framework can run and how its launch config reads: one module per
framework (``megatron``, ``deepspeed``, ``fsdp``, ``torchtitan``, ``nemo``), each with its rules
as ``violations(parallel)`` and, where a plan can be exported to it, ``export(plan)``.
``framework_violations`` asks the one a request names. 'any' accepts what at least one of them
runs; Megatron (and NeMo, through it) and torchtitan run context parallelism, DeepSpeed and FSDP
do not; only Megatron (and NeMo) offload the first N layers' activations (``activation_offload_layers``).
``export_plan`` writes a plan in a framework's launch config (see ``solver.frameworks.export``);
``export_violations`` and ``export_mechanics`` say how to judge what an export runs.
``nearest_exact`` is what a framework runs exactly nearest to a configuration: each module's
``exact_config``, the very function its export writes from, so a search that keeps only what
``nearest_exact`` calls exact returns only plans whose export is exact."""

from __future__ import annotations

from collections.abc import Callable

from solver.frameworks import deepspeed, fsdp, megatron, nemo, torchtitan
from solver.frameworks.export import Difference, Export, ExportFormat, LaunchFile, Nearest, PlanToExport
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import Framework, TrainingSpec

__all__ = [
    "FRAMEWORK_RULES", "Difference", "Export", "ExportFormat", "LaunchFile", "Nearest", "PlanToExport", "framework_format",
    "export_mechanics", "export_plan", "export_violations", "framework_violations", "nearest_exact",
]

# The rules a framework itself sets (as opposed to structure, placement or memory).
FRAMEWORK_RULES = frozenset({
    Rule.ZERO_WITH_PP, Rule.FRAMEWORK_ZERO, Rule.FRAMEWORK_PP, Rule.FRAMEWORK_CP, Rule.FRAMEWORK_EP, Rule.FRAMEWORK_EXPERT_TP,
    Rule.FRAMEWORK_ACTIVATION_OFFLOAD, Rule.FRAMEWORK_NVME,
})

# The frameworks the planner knows, each with its own rules.
_CONCRETE = {
    Framework.MEGATRON: megatron.violations,
    Framework.DEEPSPEED: deepspeed.violations,
    Framework.FSDP: fsdp.violations,
    Framework.TORCHTITAN: torchtitan.violations,
}


def any_violations(parallel: ParallelConfig) -> list[Violation]:
    """'any' refuses only what no framework runs (then with the first framework's reasons, in
    the order above): torchtitan runs FSDP2 (ZeRO-2/3) under a pipeline, Megatron and torchtitan
    context parallelism (issue 13, mechanism 6)."""
    found = [rules(parallel) for rules in _CONCRETE.values()]
    return [] if any(not violations for violations in found) else found[0]


_RULES = {Framework.ANY: any_violations, **_CONCRETE}

_EXPORTS: dict[ExportFormat, Callable[[PlanToExport], Export]] = {
    ExportFormat.MEGATRON: megatron.export,
    ExportFormat.DEEPSPEED: deepspeed.export,
    ExportFormat.TORCHTITAN: torchtitan.export,
    ExportFormat.NEMO: nemo.export,
}

_EXPORT_RULES: dict[ExportFormat, Callable[[ParallelConfig], list[Violation]]] = {
    ExportFormat.MEGATRON: megatron.violations,
    ExportFormat.DEEPSPEED: deepspeed.violations,
    ExportFormat.TORCHTITAN: torchtitan.violations,
    ExportFormat.NEMO: nemo.violations,
}

_EXACT: dict[ExportFormat, Callable[[PlanToExport], Nearest]] = {
    ExportFormat.MEGATRON: megatron.exact_config,
    ExportFormat.DEEPSPEED: deepspeed.exact_config,
    ExportFormat.TORCHTITAN: torchtitan.exact_config,
    ExportFormat.NEMO: nemo.exact_config,
}

# The launch config a request's framework is exported as ('any' has none; FSDP is a set of
# rules without an export).
_FORMATS = {
    Framework.MEGATRON: ExportFormat.MEGATRON,
    Framework.DEEPSPEED: ExportFormat.DEEPSPEED,
    Framework.TORCHTITAN: ExportFormat.TORCHTITAN,
}

# Whose mechanics the cost model applies to an export: NeMo trains through megatron-core.
_MECHANICS = {
    ExportFormat.MEGATRON: Framework.MEGATRON,
    ExportFormat.DEEPSPEED: Framework.DEEPSPEED,
    ExportFormat.TORCHTITAN: Framework.TORCHTITAN,
    ExportFormat.NEMO: Framework.MEGATRON,
}


def framework_violations(parallel: ParallelConfig, framework: Framework) -> list[Violation]:
    """What ``framework`` cannot run of ``parallel`` (empty when it can)."""
    return _RULES[framework](parallel)


def export_plan(plan: PlanToExport, export_format: ExportFormat) -> Export:
    """``plan`` as ``export_format``'s launch config: exact, or the nearest configuration the
    framework runs exactly with every difference named."""
    return _EXPORTS[ExportFormat(export_format)](plan)


def export_violations(parallel: ParallelConfig, export_format: ExportFormat) -> list[Violation]:
    """What ``export_format``'s own rules refuse of ``parallel`` (empty for what an export runs).
    Judge an export by these, not by the 'any' rules: torchtitan runs ZeRO-2/3 with pipelines."""
    return _EXPORT_RULES[ExportFormat(export_format)](parallel)


def export_mechanics(export_format: ExportFormat) -> Framework:
    """The framework whose mechanics the cost model applies to what ``export_format`` runs."""
    return _MECHANICS[ExportFormat(export_format)]


def framework_format(framework: Framework) -> ExportFormat | None:
    """The launch config a plan searched for ``framework`` is exported as (None: none)."""
    return _FORMATS.get(Framework(framework))


def nearest_exact(
    model: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, export_format: ExportFormat
) -> Nearest:
    """What ``export_format`` runs exactly nearest to ``parallel`` under ``training``, with every
    difference: exactly what ``export_plan`` writes and names (node size plays no part)."""
    return _EXACT[ExportFormat(export_format)](PlanToExport(model, training, parallel, gpus_per_node=1))

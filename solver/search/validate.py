"""An independent check of every plan the search returns.

It knows nothing of how the plan was found: it re-runs the evaluator on the configuration, and
checks the structure (``check_structure``), the request's pins and bounds, the framework and
placement rules, every stage's memory against the usable memory, the partition's shape, the
prediction the search reported, and the objective's own condition (min_gpus: the deadline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from solver.cost.result import Evaluation
from solver.frameworks import framework_violations
from solver.search.request import Objective, SearchRequest
from solver.spec.dimensions import config_values
from solver.spec.errors import SpecError
from solver.spec.legality import (
    check_structure,
    placement_violations,
    stage_layer_counts,
)
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule, Violation
from solver.spec.training import Recompute

RELATIVE_TOLERANCE = 1e-9  # the reported prediction must be the evaluator's, to rounding


@dataclass(frozen=True)
class ValidationReport:
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def recompute_values(parallel: ParallelConfig) -> set[str]:
    """The recompute settings a plan uses, as the constraint names them."""
    used = set()
    full = parallel.full_recompute_layers
    if full is None:
        used.add(parallel.recompute.value)
        return used
    counts = list(full)
    if any(counts):
        used.add(Recompute.FULL.value)
    if parallel.recompute is Recompute.SELECTIVE:
        used.add(Recompute.SELECTIVE.value)
    elif parallel.recompute is Recompute.NONE:
        used.add(Recompute.NONE.value)
    elif not any(counts):
        used.add(Recompute.FULL.value)  # labelled full, recomputing zero layers
    return used


def validate(
    request: SearchRequest, parallel: ParallelConfig, reported: Evaluation | None, num_gpus: int
) -> ValidationReport:
    problems: list[str] = []
    c = request.constraints
    model, cluster, training = request.model, request.cluster, request.training
    try:
        check_structure(model, cluster, training, parallel, num_gpus)
    except SpecError as error:
        return ValidationReport((f"structure: {error}",))
    if request.num_gpus is not None and num_gpus != request.num_gpus:
        problems.append(f"uses {num_gpus} GPUs, the request asks for {request.num_gpus}")
    for name, value in config_values(parallel, num_gpus).items():
        if name == "recompute":
            continue  # a plan may use several settings at once: checked below
        if not c.admits(name, value):
            problems.append(f"constraint: {name} = {value} is not allowed")
    for value in recompute_values(parallel):
        if not c.admits("recompute", value):
            problems.append(f"constraint: recompute {value} is not allowed")
    if parallel.virtual_stages > 1 and model.num_layers % parallel.num_chunks:
        problems.append(Violation(Rule.INTERLEAVE_LAYERS_DIVISIBLE, "interleaving needs num_layers divisible by pp_size * v"))
    problems += framework_violations(parallel, c.framework)
    problems += placement_violations(cluster, parallel, c.allow_tp_across_nodes)
    counts = stage_layer_counts(model, parallel)
    if min(counts) < 1:
        problems.append("partition: a pipeline chunk holds no transformer layer")

    fresh = request.evaluate(parallel, num_gpus)
    if not fresh.feasible:
        problems += [f"evaluator: {v}" for v in fresh.violations]
    usable = cluster.gpu.memory_bytes * c.max_memory_fraction
    for stage in fresh.stages:
        if stage.peak_bytes > usable:
            problems.append(f"memory: stage {stage.stage} needs {stage.peak_bytes / 2**30:.2f} GiB of {usable / 2**30:.2f} GiB")
    if reported is not None and reported.prediction is not None:
        a, b = reported.prediction.step_time_s, fresh.prediction.step_time_s
        if not math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE):
            problems.append(f"prediction: reported step time {a} s, the evaluator says {b} s")
        if not math.isclose(reported.peak_bytes, fresh.peak_bytes, rel_tol=RELATIVE_TOLERANCE):
            problems.append("prediction: reported peak memory differs from the evaluator's")
    if Objective(request.objective) is Objective.MIN_GPUS:
        ttt = fresh.prediction.time_to_train_s
        if ttt is None or request.deadline_s is None or ttt > request.deadline_s:
            problems.append(f"deadline: time to train {ttt} s exceeds deadline_s {request.deadline_s}")
    return ValidationReport(tuple(problems))

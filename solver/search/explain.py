"""Why a search found nothing, and the smallest changes that would make it find something.

Every suggested change is checked: the search runs again on the changed request (top 1) and the
suggestion carries the plan it found, predicted by the evaluator.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from solver.cost.memory import GIB_BYTES
from solver.search.request import Constraints, Objective
from solver.search.result import DeadlineMiss, Explanation, MemoryMiss, Suggestion
from solver.search.space import Shape
from solver.spec.dimensions import Offload, relaxable
from solver.spec.errors import SpecError
from solver.spec.rules import Rule
from solver.spec.training import Framework, Recompute

SUGGESTION_BUDGET_S = 20.0  # all suggestion checks together
# The sub-group a DeepSpeed ZeRO-3 step is first suggested to copy at a time: DeepSpeed's own default
# (runtime/zero/config.py at v0.7.0, 1e9); below it, a tenth of the request's.
SMALLER_SUB_GROUP_PARAMS = 10**9


def _binding(run) -> tuple[Rule, int]:
    """The rule that explains an empty result: the deadline or memory when either turned a plan
    down, else the rule that rejected the most shapes (ties: the first by name)."""
    rejected = run.rejected
    for rule in (Rule.DEADLINE, Rule.MEMORY):
        if rejected.get(rule):
            return rule, rejected[rule]
    if not rejected:
        return Rule.CONSTRAINTS, 0
    rule = max(sorted(rejected, key=lambda r: r.tag), key=lambda r: rejected[r])
    return rule, rejected[rule]


def rejection_counts(run) -> dict[str, int]:
    """Shapes rejected per rule, by tag (the validator's by its problems), sorted by tag."""
    counts = {rule.tag: n for rule, n in run.rejected.items() if rule is not Rule.VALIDATOR}
    for problems in run.validator_problems:
        key = f"{Rule.VALIDATOR.tag} {problems}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def _least_memory_config(shape):
    """The shape's configuration that needs the least memory: full recompute where allowed."""
    parallel = shape.uniform()
    if shape.full_recompute:
        parallel = replace(parallel, recompute=Recompute.FULL)
    return parallel


def closest_miss(run) -> MemoryMiss | None:
    """The legal configuration that comes closest to fitting, evaluated."""
    request = run.request
    c = request.constraints
    usable = request.cluster.gpu.memory_bytes * c.max_memory_fraction
    best = None
    # Memory grows with the micro-batch: per group of otherwise equal shapes, the smallest one.
    smallest: dict[tuple, Shape] = {}
    for shape in run.legal:
        if shape.offload is not Offload.NONE:
            continue  # the GPU-memory miss is without offload; offload's misses are [host_memory] rejections
        key = (shape.num_gpus, shape.tp_size, shape.pp_size, shape.zero_stage, shape.base_recompute,
               shape.full_recompute, shape.virtual_stages, shape.sequence_parallel, shape.cp_size, shape.ep_size,
               shape.expert_tp_size)
        if key not in smallest or shape.micro_batch_size < smallest[key].micro_batch_size:
            smallest[key] = shape
    seen = set()
    for shape in smallest.values():
        parallel = _least_memory_config(shape)
        if parallel in seen:
            continue
        seen.add(parallel)
        ev = request.evaluate(parallel, shape.num_gpus)
        if best is None or ev.peak_bytes < best[0]:
            best = (ev.peak_bytes, parallel, ev, shape.num_gpus)
    if best is None:
        return None
    peak, parallel, ev, num_gpus = best
    recompute = "full" if parallel.recompute is Recompute.FULL else parallel.recompute.value
    capacity = request.cluster.gpu.memory_bytes / GIB_BYTES
    limit = (f"the GPU has {capacity:.0f} GiB" if c.max_memory_fraction >= 1
             else f"{c.max_memory_fraction:.0%} of the GPU's {capacity:.0f} GiB is {usable / GIB_BYTES:.1f} GiB")
    text = (
        f"best case needs {peak / GIB_BYTES:.1f} GiB per GPU on stage {ev.peak_stage} with {parallel.layout_text()},"
        f" ZeRO-{int(parallel.zero_stage)}, {recompute} recompute,"
        f" micro-batch {parallel.micro_batch_size} on {num_gpus} GPUs; {limit}"
    )
    return MemoryMiss(
        text=text,
        peak_gib=peak / GIB_BYTES,
        usable_gib=usable / GIB_BYTES,
        num_gpus=num_gpus,
        parallel=parallel,
        memory_gib=ev.memory_to_dict()["breakdown_gib"],
        fits=ev.feasible,
    )


def _relaxed(constraints: Constraints, *dimensions: str, **changes) -> Constraints:
    allowed = {k: v for k, v in constraints.allowed.items() if k not in dimensions}
    return replace(constraints, allowed=allowed, **changes)


def _changes(run, miss: MemoryMiss | None):
    """(what, changed request) pairs, smallest changes first."""
    request = run.request
    c = request.constraints
    training = request.training
    cluster = request.cluster
    out = []
    if Objective(request.objective) is Objective.MIN_GPUS:
        out.append(("drop the deadline: the fastest plan", replace(request, objective=Objective.MIN_TIME_TO_TRAIN)))
    for dimension in relaxable():
        if dimension.name in c.allowed:
            out.append((f"lift the {dimension.name} constraint", replace(request, constraints=_relaxed(c, dimension.name))))
    if run.framework_training is not None:
        # Settings the framework runs otherwise (a precision, DeepSpeed's gradient reduction under a pipeline).
        runs, fields = run.framework_training
        changed = ", ".join(f"{name} {_setting(getattr(runs, name))}" for name in fields)
        out.append((f"the training settings {c.framework.value} runs ({changed})", replace(request, training=runs)))
    if c.framework is not Framework.ANY:
        out.append((f"a framework other than {c.framework.value} (any)", replace(request, constraints=replace(c, framework=Framework.ANY))))
    if c.max_memory_fraction < 1.0:
        out.append(("use all of the GPU's memory (max_memory_fraction 1.0)", replace(request, constraints=replace(c, max_memory_fraction=1.0))))
    if miss is not None and miss.memory_gib.get("optimizer_step_copy", 0.0) > 0:
        # The optimizer step's gradient copy sets the peak: step in smaller sub-groups
        # (solver.cost.memory.optimizer_step_copy_bytes; DeepSpeed's sub_group_size).
        current = training.optimizer_sub_group_params
        sub_group = current // 10 if 0 < current <= SMALLER_SUB_GROUP_PARAMS else SMALLER_SUB_GROUP_PARAMS
        if sub_group > 0:
            smaller_groups = replace(training, optimizer_sub_group_params=sub_group)
            out.append((f"step the optimizer in sub-groups of {sub_group:.0e} parameters (DeepSpeed's sub_group_size)",
                        replace(request, training=smaller_groups)))
    current = request.num_gpus or cluster.num_gpus
    if "num_gpus" in c.allowed:
        out.append(("lift the num_gpus constraint", replace(request, constraints=_relaxed(c, "num_gpus"))))
    for factor in (2, 4):
        more = current * factor
        if more <= cluster.num_gpus:
            out.append((f"use {more} GPUs", replace(request, num_gpus=more, constraints=_relaxed(c, "num_gpus"))))
        else:
            nodes = math.ceil(more / cluster.gpus_per_node)
            bigger = replace(cluster, num_nodes=nodes)
            out.append((f"use {more} GPUs ({nodes} nodes)", replace(request, cluster=bigger, num_gpus=more, constraints=_relaxed(c, "num_gpus"))))
    if training.seq_length >= 2 and training.seq_length % 2 == 0:
        shorter = replace(training, seq_length=training.seq_length // 2)
        out.append((f"a shorter sequence ({shorter.seq_length} tokens)", replace(request, training=shorter)))
    if training.global_batch_size % 2 == 0:
        smaller = replace(training, global_batch_size=training.global_batch_size // 2)
        out.append((f"a smaller global batch ({smaller.global_batch_size} sequences)", replace(request, training=smaller)))
    if miss is not None and not miss.fits:
        need_gib = math.ceil(miss.peak_gib / c.max_memory_fraction)
        gpu = replace(cluster.gpu, memory_bytes=need_gib * GIB_BYTES)
        out.append((f"a GPU with at least {need_gib} GiB of memory", replace(request, cluster=replace(cluster, gpu=gpu))))
    return out


def _setting(value) -> str:
    """A training setting as a request writes it (an enum's value; true/false)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(getattr(value, "value", value))


def explain(run, find_plans) -> Explanation:
    """Why ``run`` found nothing. ``find_plans`` is the search to check each suggested change
    with (``solver.search.loop.find_plans``), passed in so that this module does not import the
    loop that calls it."""
    rule, count = _binding(run)
    request = run.request
    miss = closest_miss(run) if run.legal else None
    if rule is Rule.MEMORY and (miss is None or miss.fits) and run.rejected.get(Rule.FRAMEWORK_EXACT):
        # What fits, the request's framework runs only otherwise (its training settings).
        rule, count = Rule.FRAMEWORK_EXACT, run.rejected[Rule.FRAMEWORK_EXACT]
    if rule is Rule.MEMORY and miss is not None:
        summary = "No configuration fits in memory: " + miss.text
    elif rule is Rule.DEADLINE:
        summary = f"No GPU count meets deadline_s {request.deadline_s:g} s"
    else:
        summary = f"No legal configuration: {rule.summary} ({count} rejected)"
    suggestions = _checked_suggestions(run, miss, find_plans)
    closest: MemoryMiss | DeadlineMiss | None = miss
    if rule is Rule.DEADLINE and suggestions and suggestions[0].change.startswith("drop the deadline"):
        fastest = suggestions[0]
        text = (
            f"the fastest plan trains in {fastest.time_to_train_s:.4g} s on {fastest.num_gpus} GPUs;"
            f" the deadline is {request.deadline_s:.4g} s"
        )
        closest = DeadlineMiss(text, fastest.time_to_train_s, fastest.num_gpus, fastest.parallel)
        summary += ": " + text
    return Explanation(rule, rule.summary, rejection_counts(run), closest, tuple(suggestions), summary)


def _checked_suggestions(run, miss: MemoryMiss | None, find_plans) -> list[Suggestion]:
    """Each change of ``_changes`` for which the search, run again on the changed request within
    the time left, finds a plan; with that plan's figures."""
    stop = min(time.perf_counter() + SUGGESTION_BUDGET_S, run.deadline)  # within the request's time budget
    suggestions = []
    for what, changed in _changes(run, miss):
        remaining = stop - time.perf_counter()
        if remaining <= 0:
            break
        try:
            plans, _ = find_plans(replace(changed, top_k=1, time_budget_s=min(remaining, changed.time_budget_s)))
        except SpecError:
            continue
        if plans:
            best = plans[0]
            p = best.evaluation.prediction
            suggestions.append(Suggestion(
                change=what,
                checked=True,
                num_gpus=best.num_gpus,
                parallel=best.parallel,
                step_time_s=p.step_time_s,
                time_to_train_s=p.time_to_train_s,
                peak_gib=best.evaluation.peak_bytes / GIB_BYTES,
            ))
    return suggestions

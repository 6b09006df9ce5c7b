"""Plan quality against the experts: published configurations vs the planner's best.

Run: ``python bench/plan_quality.py``. For every record of bench/data/published_runs.json that
publishes a full parallel layout (tp and pp given, dp given or implied by the GPU count), the
published configuration is built and evaluated exactly as bench/accuracy.py does (unknown
micro-batch / interleaving / recompute filled with the best feasible choice under the cost
model), and the planner searches the same model, cluster, batch and framework. Under our own
cost model the planner must predict at least the published throughput; where it picks another
configuration the dominant difference in the step-time breakdown is printed. Exit status 1 if
the planner ever predicts less than the published configuration.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.accuracy import (  # noqa: E402
    _candidates,
    _cluster_for,
    _model_for,
    load_inputs,
    load_records,
    not_expressible,
    record_settings,
    training_for,
)
from solver.cost.evaluate import evaluate
from solver.cost.result import Evaluation
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Framework

RELATIVE_SLACK = 1e-9  # "at least": equal predictions (the same plan) pass
BREAKDOWN_NAMES = {
    "compute_s": "compute", "recompute_s": "recomputation", "tp_comm_s": "tensor-parallel communication",
    "grad_accumulation_s": "gradient accumulation", "pp_comm_s": "pipeline communication",
    "dp_comm_exposed_s": "exposed data-parallel communication", "bubble_s": "pipeline bubble",
    "optimizer_s": "optimizer step",
}


def has_full_layout(record: dict) -> bool:
    par = record["parallel"]
    return par.get("tp") is not None and par.get("pp") is not None


def short(parallel: ParallelConfig) -> str:
    text = (f"dp{parallel.dp_size} tp{parallel.tp_size} pp{parallel.pp_size} v{parallel.virtual_stages}"
            f" z{int(parallel.zero_stage)} mb{parallel.micro_batch_size} {parallel.recompute.value}"
            f"{' sp' if parallel.sequence_parallel else ''}")
    if parallel.full_recompute_layers is not None:
        text += f" full/stage={list(parallel.full_recompute_layers)}"
    if parallel.stage_layers is not None:
        text += f" layers={list(parallel.stage_layers)}"
    return text


def why_different(published: Evaluation, planned: Evaluation) -> str:
    if not published.feasible:
        return "the published layout does not fit under the model: " + "; ".join(published.violations)
    a, b = published.prediction.breakdown_s, planned.prediction.breakdown_s
    saved = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in set(a) | set(b)}
    key = max(saved, key=lambda k: saved[k])
    if saved[key] <= 0:
        return "same step time"
    return (f"saves {saved[key]:.3f} s/step of {BREAKDOWN_NAMES.get(key, key)}"
            f" ({a.get(key, 0.0):.3f} -> {b.get(key, 0.0):.3f} s)")


def published_best(record, settings, model, cluster, training, framework) -> tuple[ParallelConfig, Evaluation] | None:
    """The published layout with unknown fields filled as bench/accuracy.py fills them."""
    gpus = record["cluster"]["gpus"]
    best = None
    for parallel in _candidates(record, settings, model, training.global_batch_size):
        try:
            ev = evaluate(model, cluster, training, parallel, num_gpus=gpus, framework=framework)
        except SpecError:
            continue
        key = (ev.feasible, ev.prediction.tokens_per_s)
        if best is None or key > best[0]:
            best = (key, parallel, ev)
    return None if best is None else (best[1], best[2])


def main() -> int:
    inputs = load_inputs()
    failures = 0
    print(f"{'run':46} {'published':44} {'tok/s/GPU':>9}  {'planner best':44} {'tok/s/GPU':>9} {'gain':>7}  why")
    for record in load_records():
        if not has_full_layout(record):
            print(f"{record['id']:46} skipped: no full parallel layout published")
            continue
        settings = record_settings(record, inputs)
        reason = not_expressible(record, settings)  # the accuracy bench's own check
        model = None if reason else _model_for(record, settings)
        if model is None:
            print(f"{record['id']:46} skipped: {reason or 'no model shape'}")
            continue
        cluster = _cluster_for(record, settings)
        # Plans must hold the longest batch, so both layouts are costed at the full length.
        training = training_for(record, settings, model, padded=False)
        framework = Framework(settings.get("framework", "any"))
        gpus = record["cluster"]["gpus"]
        published = published_best(record, settings, model, cluster, training, framework)
        if published is None:
            print(f"{record['id']:46} skipped: the published layout is not legal under the model")
            continue
        pub_parallel, pub_ev = published
        request = SearchRequest(model, cluster, training, num_gpus=gpus,
                                constraints=Constraints(framework=framework, allow_tp_across_nodes=True), top_k=1)
        result = search(request)
        pub_rate = pub_ev.prediction.tokens_per_s / gpus
        pub_text = short(pub_parallel) + ("" if pub_ev.feasible else " (INFEASIBLE)")
        if result.best is None:
            print(f"{record['id']:46} {pub_text:44} {pub_rate:9.0f}  {'(none: ' + result.explanation['summary'][:60] + ')':44}")
            failures += pub_ev.feasible
            continue
        best = result.best
        rate = best.evaluation.prediction.tokens_per_s / gpus
        ok = not pub_ev.feasible or rate >= pub_rate * (1 - RELATIVE_SLACK)
        failures += not ok
        gain = rate / pub_rate - 1
        why = "same configuration" if best.parallel == pub_parallel else why_different(pub_ev, best.evaluation)
        flag = "" if ok else "  <-- BELOW PUBLISHED"
        print(f"{record['id']:46} {pub_text:44} {pub_rate:9.0f}  {short(best.parallel):44} {rate:9.0f} {gain:+7.1%}  {why}{flag}")
    print(f"\n{'all' if not failures else failures} planner best{'s' if failures != 1 else ''}"
          f" {'predict at least the published throughput' if not failures else 'below the published configuration'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

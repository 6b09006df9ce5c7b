"""What the accuracy bench's predictions are made of, beside their errors.

Run: ``.venv/bin/python bench/step_shares.py [FAMILY ...] [--runs]``. For every run of the grown
accuracy bench (bench/accuracy.py) that has a prediction, it splits the predicted step time into
the cost model's parts (``StepBreakdown``: compute, recomputation, TP / PP / exposed DP
communication, gradient accumulation, pipeline bubble, optimizer step) and prints, per family, the
mean share of each part beside the family's signed error; then, over all runs, the Pearson
correlation between each part's share and the signed error.

A part whose share follows the error across families is where a missing or surplus cost is
likely to sit; a part that is large where the model is right may be standing in for a cost the
model does not charge elsewhere. The tool measures, it changes nothing: a mechanism it points at
still needs its own source (docs/wip/README.md keeps what was found with it).

``--runs`` prints every run's shares as well. Families can be named to restrict the output.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import accuracy, vtrain  # noqa: E402
from solver.cost.result import BREAKDOWN_KEYS  # noqa: E402


@dataclass(frozen=True)
class RunShares:
    run_id: str
    family: str
    error: float  # signed: > 0, the model is optimistic (bench/accuracy.py RunResult.error)
    step_time_s: float  # the prediction's step time
    shares: dict[str, float]  # each BREAKDOWN_KEYS part over the step time


def run_shares(results: list[accuracy.RunResult]) -> list[RunShares]:
    """The shares of every result with a prediction (and its evaluation)."""
    found = []
    for result in results:
        if result.error is None or result.evaluation is None:
            continue
        prediction = result.evaluation.prediction
        step_s = prediction.step_time_s
        parts = {key: prediction.breakdown_s.get(key, 0.0) / step_s for key in BREAKDOWN_KEYS}
        found.append(RunShares(result.run_id, result.family, result.error, step_s, parts))
    return found


def family_means(runs: list[RunShares]) -> dict[str, tuple[int, float, dict[str, float]]]:
    """Per family: run count, mean signed error and mean share of each part."""
    groups: dict[str, list[RunShares]] = defaultdict(list)
    for run in runs:
        groups[run.family].append(run)
    return {
        family: (
            len(members),
            sum(r.error for r in members) / len(members),
            {key: sum(r.shares[key] for r in members) / len(members) for key in BREAKDOWN_KEYS},
        )
        for family, members in groups.items()
    }


def share_error_correlations(runs: list[RunShares]) -> dict[str, float]:
    """Per part: the (Pearson) correlation of its share with the signed error over ``runs``; NaN
    where a part's share is the same in every run."""
    return {key: vtrain.pearson_r([r.shares[key] for r in runs], [r.error for r in runs]) for key in BREAKDOWN_KEYS}


def _short(key: str) -> str:
    return key.removesuffix("_s").replace("_comm", "").replace("_exposed", "")[:9]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="only these families (default: all)")
    parser.add_argument("--runs", action="store_true", help="print every run's shares too")
    args = parser.parse_args(argv)
    runs = run_shares(accuracy.evaluate_bench())
    if args.families:
        unknown = sorted(set(args.families) - {r.family for r in runs})
        if unknown:
            parser.error(f"no evaluated runs in families: {', '.join(unknown)}")
        runs = [r for r in runs if r.family in args.families]
    header = " ".join(f"{_short(key):>9}" for key in BREAKDOWN_KEYS)
    if args.runs:
        print(f"{'run':60} {'error':>7} {'step s':>9} {header}")
        for r in runs:
            print(f"{r.run_id[:60]:60} {r.error:+7.1%} {r.step_time_s:9.3f} " + " ".join(f"{r.shares[k]:9.1%}" for k in BREAKDOWN_KEYS))
        print()
    print(f"{'family':18} {'n':>4} {'signed':>7} {header}")
    for family, (count, signed, shares) in sorted(family_means(runs).items()):
        print(f"{family:18} {count:4d} {signed:+7.1%} " + " ".join(f"{shares[k]:9.1%}" for k in BREAKDOWN_KEYS))
    correlations = share_error_correlations(runs)
    print(
        f"\ncorrelation of each part's share with the signed error over {len(runs)} runs: "
        + ", ".join(f"{_short(k)} {'-' if math.isnan(c) else f'{c:+.2f}'}" for k, c in correlations.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Error bars from the bench's residuals (issue 13, mechanism 8).

Every run of the grown accuracy bench (bench/accuracy.py) leaves a residual: the measured
throughput over the predicted one, r = measured / predicted. Runs are grouped by the software stack
that ran them (bench/data/run_inputs.json) and the GPU generation; a group keeps its own band once
it holds MIN_RUNS runs, else its stack's, else every run's. A group's band is the shortest interval
of residuals that holds a share c of them; a prediction's range is then
[predicted x r_low, predicted x r_high] in throughput, and the inverse in step time.

The share c is the smallest (in steps of 1%) for which the bands hold the measured value for at
least 80% of runs judged the honest way, each run left out of the band it is judged by
(leave-one-out): no wider than it needs to be. The script prints coverage and mean width. ``--write`` stores the bands in
catalog/data/error_bands.json, where the service reads them (``catalog.error_band``);
tests/test_error_bands.py checks that the stored file is what this script computes from the
current model, so a change to the cost model must refresh it.

    .venv/bin/python bench/error_bands.py [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import catalog  # noqa: E402
from bench import accuracy  # noqa: E402

BANDS_FILE = ROOT / "catalog" / "data" / "error_bands.json"
MIN_RUNS = 8  # a smaller group borrows its stack's band, then every run's
TARGET_COVERAGE = 0.80  # issue 13: the range holds the measured value for at least 80% of runs


@dataclass(frozen=True)
class Residual:
    run_id: str
    stack: str
    gpu: str  # the catalog GPU that ran it
    ratio: float  # measured / predicted throughput
    moe: bool = False  # a mixture-of-experts model: judged apart (catalog.error_band_keys)


def residuals() -> list[Residual]:
    """One residual per evaluated run of the grown bench."""
    inputs = accuracy.load_inputs()
    records = {record["id"]: record for record in accuracy.bench_records()}
    found = []
    for result in accuracy.evaluate_bench():
        if result.error is None:
            continue
        settings = accuracy.record_settings(records[result.run_id], inputs)
        gpu = catalog.get_entry("nodes", settings["node"])["gpu"]
        model = accuracy._model_for(records[result.run_id], settings)
        moe = model is not None and model.is_moe
        found.append(Residual(result.run_id, settings.get("stack", "unknown"), gpu, 1 / (1 + result.error), moe))
    return found


def shortest_band(ratios: list[float], coverage: float) -> tuple[float, float]:
    """The narrowest [low, high] (in log ratio) holding ceil(coverage x n) of ``ratios``."""
    values = sorted(ratios)
    k = max(1, math.ceil(coverage * len(values)))
    best = min(range(len(values) - k + 1), key=lambda i: math.log(values[i + k - 1] / values[i]))
    return values[best], values[best + k - 1]


def bands(found: list[Residual], coverage: float) -> dict[str, dict]:
    """Every group's band, for groups of at least MIN_RUNS runs ('all' always)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in found:
        for key in catalog.error_band_keys(r.stack, r.gpu, r.moe):
            groups[key].append(r.ratio)
    table = {}
    for key, ratios in sorted(groups.items()):
        if len(ratios) < MIN_RUNS and key != "all":
            continue
        low, high = shortest_band(ratios, coverage)
        table[key] = {"low_ratio": round(low, 4), "high_ratio": round(high, 4), "runs": len(ratios)}
    return table


def band_for(table: dict[str, dict], stack: str, gpu: str, moe: bool = False) -> tuple[str, dict]:
    key = next(k for k in catalog.error_band_keys(stack, gpu, moe) if k in table)
    return key, table[key]


def holds(table: dict[str, dict], run: Residual) -> tuple[bool, dict]:
    """Whether the band ``run`` takes from ``table`` holds its measured value, and that band."""
    _, band = band_for(table, run.stack, run.gpu, run.moe)
    return bool(band["low_ratio"] <= run.ratio <= band["high_ratio"]), band


def leave_one_out(found: list[Residual], coverage: float) -> tuple[float, float]:
    """(coverage, mean width) with each run judged by bands computed without it."""
    covered, widths = 0, []
    for i, run in enumerate(found):
        table = bands(found[:i] + found[i + 1:], coverage)
        held, band = holds(table, run)
        covered += held
        widths.append(band["high_ratio"] / band["low_ratio"] - 1)
    return covered / len(found), sum(widths) / len(widths)


def choose_coverage(found: list[Residual]) -> float:
    """The smallest share (0.80, 0.81, ...) whose bands hold TARGET_COVERAGE of runs left out."""
    for percent in range(80, 100):
        if leave_one_out(found, percent / 100)[0] >= TARGET_COVERAGE:
            return percent / 100
    return 1.0


def document(found: list[Residual], coverage: float) -> dict:
    return {
        "_about": (
            "Measured / predicted throughput ratios bounding a prediction, per software stack and GPU "
            "generation, from the residuals of the accuracy bench (bench/error_bands.py writes this file; "
            f"each band is the shortest interval holding {coverage:.0%} of its group's runs, the least share whose "
            f"bands hold {TARGET_COVERAGE:.0%} of runs left out of them; groups under "
            f"{MIN_RUNS} runs fall back to their stack's band, then to every run's)."
        ),
        "coverage": coverage,
        "min_runs": MIN_RUNS,
        "bands": bands(found, coverage),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"store the bands in {BANDS_FILE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    found = residuals()
    coverage = choose_coverage(found)
    doc = document(found, coverage)
    print(f"{'group':36s} {'runs':>5s} {'low':>7s} {'high':>7s}   throughput range around a prediction")
    for key, band in doc["bands"].items():
        print(f"{key:36s} {band['runs']:5d} {band['low_ratio']:7.3f} {band['high_ratio']:7.3f}   "
              f"{band['low_ratio'] - 1:+.0%} .. {band['high_ratio'] - 1:+.0%}")
    table = doc["bands"]
    in_sample = sum(holds(table, r)[0] for r in found) / len(found)
    loo, width = leave_one_out(found, coverage)
    print(f"\n{len(found)} runs; each band holds {coverage:.0%} of its group. Coverage: {in_sample:.1%} in sample, {loo:.1%} leaving each run out "
          f"(target >= {TARGET_COVERAGE:.0%}); mean width {width:.1%} (high / low - 1)")
    if args.write:
        BANDS_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {BANDS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""vTrain's 1,440 single-node Megatron-DeepSpeed runs on A100 (bench/data/vtrain_single_public.csv,
VIA-Research/vTrain, MIT): a held-out check of the compute side, and where the Megatron-DeepSpeed
stack's host time per layer comes from.

On one node no traffic crosses the network, so these runs test what the accuracy bench's
multi-node rows mix with collectives: GEMM, element-wise and attention time, and the framework's
fixed work per layer. The smallest configurations (hidden 1024, tp 1-4, micro-batch 1-2) show a
floor of time per layer that their GPU work does not explain; ``host_floor_s`` derives the stack
fact from it. Not part of the accuracy bench's families.

    .venv/bin/python bench/vtrain_single.py
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import accuracy  # noqa: E402

CSV_PATH = Path(__file__).parent / "data" / "vtrain_single_public.csv"
FORWARD_PASSES = 4  # full recompute: forward, recomputed forward, backward (twice a forward)


def load_rows() -> list[dict[str, int | float]]:
    with CSV_PATH.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))[1:]
    keys = ("gpus", "global_batch", "micro_batch", "hidden", "heads", "layers", "seq_len", "tp", "dp", "pp")
    return [{**{k: int(v) for k, v in zip(keys, row)}, "iteration_s": float(row[-1]) / 1000} for row in rows]


def per_layer_micro_batch_s(row: dict) -> float:
    """Measured seconds per layer and micro-batch on one stage: the iteration over the 1F1B
    schedule's m + p - 1 slots of L / p layers."""
    m = row["global_batch"] // (row["dp"] * row["micro_batch"])
    return row["iteration_s"] / ((m + row["pp"] - 1) * row["layers"] / row["pp"])


def host_floor_s(rows: list[dict]) -> float:
    """The framework's time per layer and forward pass: the median per-layer time of the smallest
    configurations (hidden 1024, tp <= 4, micro-batch <= 2), over its 4 forward passes' worth."""
    small = [per_layer_micro_batch_s(r) for r in rows if r["hidden"] == 1024 and r["tp"] <= 4 and r["micro_batch"] <= 2]
    return statistics.median(small) / FORWARD_PASSES


def record(index: int, row: dict) -> dict:
    """A row as a bench record of the vtrain source (run_inputs.json: node, stack, vocabulary)."""
    return {
        "id": f"vtrain-single-{index:04d}",
        "source": "VIA-Research/vTrain data/ground_truth_single.csv",
        "model": {"params_b": None, "layers": row["layers"], "hidden": row["hidden"], "heads": row["heads"],
                  "seq_len": row["seq_len"], "vocab": None, "ffn_hidden": None},
        "cluster": {"gpu": "A100-80GB", "gpus": row["gpus"], "gpus_per_node": 8},
        "parallel": {"tp": row["tp"], "pp": row["pp"], "dp": row["dp"], "zero_stage": None, "micro_batch": row["micro_batch"],
                     "global_batch": row["global_batch"], "interleave": None, "recompute": "full", "sequence_parallel": None},
        "measured": {"iteration_time_s": row["iteration_s"]},
    }


def errors(rows: list[dict]) -> list[tuple[dict, float]]:
    """(row, signed throughput error) for every row the model expresses."""
    inputs = accuracy.load_inputs()
    found = []
    for index, row in enumerate(rows):
        result = accuracy.evaluate_record(record(index, row), inputs)
        if result.error is not None:
            found.append((row, result.error))
    return found


def main() -> int:
    rows = load_rows()
    print(f"host floor: {host_floor_s(rows) * 1e3:.2f} ms per layer and forward pass "
          "(catalog stack megatron-deepspeed-2022, host_s_per_layer)")
    found = errors(rows)
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row, error in found:
        groups[(row["hidden"], row["tp"])].append(error)
    print(f"\n{'hidden':>6s} {'tp':>3s} {'n':>4s} {'MAPE':>7s} {'signed':>7s}")
    for (hidden, tp), errs in sorted(groups.items()):
        print(f"{hidden:6d} {tp:3d} {len(errs):4d} {statistics.mean(abs(e) for e in errs):7.1%} {statistics.mean(errs):+7.1%}")
    mape = statistics.mean(abs(e) for _, e in found)
    print(f"\n{len(found)} of {len(rows)} runs: MAPE {mape:.1%}, signed {statistics.mean(e for _, e in found):+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

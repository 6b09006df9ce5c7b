"""vTrain's public multi-node ground truth as bench records, and the rank statistic it is judged by.

bench/data/vtrain_multi_public.csv holds 47 measured Megatron-DeepSpeed iteration times on A100
clusters (VIA-Research/vTrain, MIT licence, data/ground_truth_multi.csv; see bench/data/SOURCES.md).
Each row becomes a record in the schema of bench/data/published_runs.json, so the accuracy bench
evaluates it like any published run; the cluster and software facts every row shares (nodes,
network, precision, kernels, gradient-reduce overlap, vocabulary) are the ``vtrain`` source of
bench/data/run_inputs.json, with their sources.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
CSV_PATH = DATA / "vtrain_multi_public.csv"
SOURCE = "VIA-Research/vTrain data/ground_truth_multi.csv (Megatron-DeepSpeed, A100), public rows"


def load_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def row_record(index: int, row: dict[str, str]) -> dict:
    """One CSV row as a published-run record. Every validation config of vTrain
    (config/validation/multi/*.json) sets use_checkpoint true (full recompute) and
    pipeline_scheduling 1f1b (no interleaving); the vocabulary is left to run_inputs.json."""
    tp, dp, pp, micro = (int(row[key]) for key in ("tp", "dp", "pp", "micro_batch"))
    params_b = float(row["params_b"])
    return {
        # The index keeps ids unique: the file measures some configurations twice.
        "id": f"vtrain-{index:02d}-{row['params_b']}B-tp{tp}-pp{pp}-dp{dp}-mb{micro}",
        "source": SOURCE,
        "model": {
            "params_b": params_b,
            "layers": int(row["layers"]),
            "hidden": int(row["hidden"]),
            "heads": int(row["heads"]),
            "seq_len": int(row["seq_len"]),
            "vocab": None,
            "ffn_hidden": None,
        },
        "cluster": {"gpu": "A100-80GB", "gpus": int(row["gpus"]), "gpus_per_node": 8},
        "parallel": {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "zero_stage": None,
            "micro_batch": micro,
            "global_batch": int(row["global_batch"]),
            "interleave": None,
            "recompute": "full",
            "sequence_parallel": None,
        },
        "measured": {"iteration_time_s": float(row["iteration_ms"]) / 1000.0},
    }


def load_records(path: Path = CSV_PATH) -> list[dict]:
    return [row_record(index, row) for index, row in enumerate(load_rows(path))]


def model_key(record: dict) -> str:
    """Rows of one model shape: vTrain ranks layouts of the same model against each other."""
    shape = record["model"]
    return f"{shape['params_b']:g}B (L{shape['layers']} h{shape['hidden']})"


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values``; tied values share the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman_rho(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (ties shared).
    NaN with fewer than two points or when either side is constant."""
    if len(xs) != len(ys):
        raise ValueError("spearman_rho needs two sequences of the same length")
    if len(xs) < 2:
        return float("nan")
    return pearson_r(average_ranks(np.asarray(xs, dtype=float)), average_ranks(np.asarray(ys, dtype=float)))


def pearson_r(xs: Sequence[float] | np.ndarray, ys: Sequence[float] | np.ndarray) -> float:
    """Pearson's correlation of two equal-length sequences; NaN with fewer than two points or
    when either side is constant."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) != len(y):
        raise ValueError("pearson_r needs two sequences of the same length")
    if len(x) < 2:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    denominator = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum()) / denominator if denominator else float("nan")

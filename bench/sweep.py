"""Sweep speed and the scaling exponent against the seeds' (issue 15).

Run: ``python bench/sweep.py``. Prints

1. the wall time of a sweep of GPT-3 175B over 13 GPU counts (8 to 32,768, powers of two) x 3
   GPU types (DGX A100 80GB, DGX H100, HGX H200 node types, each sized to the point), one best
   plan per point, in 2 processes and in 1 (target: <= 5 s on 2 cores), and the CPU time of each
   (the wall time grows when other work shares the cores), with each GPU type's fitted power law
   and knee;
2. for BERT-large on DGX A100 from 8 to 1,024 GPUs, the fitted exponent b of
   ``time = a * p^-b`` next to the seeds' MLPerf figure (228.3 * p^-0.7392 minutes). A
   comparison to read, not a target: MLPerf submissions grow the global batch with the cluster
   (256 sequences on 8 GPUs, 10,240 on 1,024: bench/data/published_runs.json) and a larger
   batch needs more samples to converge, which the planner does not model yet (issue 15 part 3);
   here each batch size is a series of its own at a fixed token budget.

Not a test: the tests hold the fit, knee and front deterministically (tests/test_sweep*.py).
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import catalog  # noqa: E402
from solver.search.request import Objective, SearchRequest  # noqa: E402
from solver.spec.training import TrainingSpec  # noqa: E402
from solver.sweep.analysis import SweepAnalysis, analyse  # noqa: E402
from solver.sweep.grid import GridPoint, GridRange, expand  # noqa: E402
from solver.sweep.run import plan_points  # noqa: E402

TARGET_S = 5.0
SEED_B = 0.7392  # MLPerf BERT on DGX A100: time to train = 228.3 p^-0.7392 minutes (the seeds)
GPT3_NODES = ["dgx-a100-80gb", "dgx-h100", "hgx-h200"]
# GPT-3 175B as trained: 1,536 sequences of 2,048 tokens per step, 300B tokens (Brown et al. 2020, Table 2.1 and 2.2).
GPT3_TRAINING = TrainingSpec(1536, 2048, train_tokens=300e9)
# BERT-large pre-training at sequence length 512 (MLPerf BERT), fp16 as in the v0.7 submissions.
BERT_NODE = "dgx-a100-40gb"
BERT_BATCHES = [1024, 8192]
BERT_TOKENS = 10e9


def node_price_usd(node: str) -> float | None:
    """The price of the first catalog cluster built of this node type (the API's rule)."""
    priced = [c for c in catalog.list_entries("clusters") if c.get("node") == node and c.get("gpu_hour_price_usd")]
    return priced[0]["gpu_hour_price_usd"] if priced else None


def sized_cluster(node: str, num_gpus: int):
    entry = catalog.get_entry("nodes", node)
    num_nodes = max(1, -(-num_gpus // entry["gpus_per_node"]))
    return catalog.cluster_spec_from_dict({**entry, "num_nodes": num_nodes, "gpu_hour_price_usd": node_price_usd(node)})


def tasks(model_name: str, points: list[GridPoint], training: TrainingSpec) -> list[tuple[GridPoint, SearchRequest]]:
    model = catalog.get_model(model_name)
    out = []
    for point in points:
        point_training = TrainingSpec(
            point.global_batch_size, training.seq_length, precision=training.precision, train_tokens=training.train_tokens
        )
        request = SearchRequest(
            model, sized_cluster(point.cluster, point.num_gpus), point_training, num_gpus=point.num_gpus,
            objective=Objective.MIN_TIME_TO_TRAIN, top_k=1,
        )
        out.append((point, request))
    return out


def print_series(analysis: SweepAnalysis) -> None:
    for series in analysis.series:
        fit = "no fit" if series.fit is None else f"b = {series.fit.b:.4f}, R^2 = {series.fit.r_squared:.4f}"
        knee = "none" if series.knee_num_gpus is None else f"{series.knee_num_gpus} GPUs"
        counts = f"{series.points[0].num_gpus}-{series.points[-1].num_gpus} GPUs" if series.points else "no feasible point"
        print(f"  {series.cluster:>14}, batch {series.global_batch_size:>5}: feasible {counts}; {fit}; knee (< 80%): {knee}")


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished child processes (the sweep's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def gpt3_speed() -> None:
    points = expand(GPT3_NODES, GridRange(8, 32768, factor=2), GPT3_TRAINING.global_batch_size)
    work = tasks("gpt3-175b", points, GPT3_TRAINING)
    started, cpu_started = time.perf_counter(), _cpu_s()
    planned = plan_points(work, workers=2)
    two_s, two_cpu_s = time.perf_counter() - started, _cpu_s() - cpu_started
    started, cpu_started = time.perf_counter(), _cpu_s()
    serial = plan_points(work, workers=1)
    one_s, one_cpu_s = time.perf_counter() - started, _cpu_s() - cpu_started
    if [p.result for p in planned] != [p.result for p in serial]:
        raise SystemExit("the 2-process and 1-process sweeps planned different points: the search is not deterministic")
    feasible = sum(p.result.feasible for p in planned)
    print(f"GPT-3 175B, {len(points)} points (13 GPU counts 8..32768 x {len(GPT3_NODES)} GPU types), {feasible} feasible:")
    print(f"  2 processes: {two_s:.2f} s (target {TARGET_S:.0f} s: {'met' if two_s <= TARGET_S else 'NOT met'}); 1 process: {one_s:.2f} s")
    print(f"  CPU: {two_cpu_s:.2f} s in 2 processes (spawned workers included), {one_cpu_s:.2f} s in 1"
          f" (wall above CPU / processes: other work shares the cores)")
    analysis = analyse([p.result for p in planned])
    print_series(analysis)
    front = [planned[i].result for i in analysis.pareto]
    print("  Pareto front (time to train vs cost; H200 has no catalog price): " + ", ".join(
        f"{p.cluster} x {p.num_gpus}: {p.time_to_train_s / 86400:.1f} d, ${p.cost_usd / 1e6:.2f}M" for p in front
        if p.time_to_train_s is not None and p.cost_usd is not None
    ))


def bert_exponent() -> None:
    points = expand([BERT_NODE], GridRange(8, 1024, factor=2), BERT_BATCHES)
    training = TrainingSpec(BERT_BATCHES[0], 512, precision="fp16", train_tokens=BERT_TOKENS)
    planned = plan_points(tasks("bert-large", points, training), workers=2)
    analysis = analyse([p.result for p in planned])
    print(f"BERT-large on {BERT_NODE}, 8..1024 GPUs, fixed global batch per series:")
    print_series(analysis)
    for series in analysis.series:
        if series.fit is not None:
            print(f"  fitted b = {series.fit.b:.4f} at batch {series.global_batch_size} vs the seeds' MLPerf b = {SEED_B}")


if __name__ == "__main__":
    gpt3_speed()
    bert_exponent()

"""Split a step into what each micro-batch costs and what each sample costs, measured and predicted.

Runs of the bench that differ only in their micro-batch size (same model, cluster, layout, global
batch and stack) measure the same work cut into fewer, larger micro-batches. On the critical path
of a synchronous pipeline (1F1B: Narayanan et al. 2021, arXiv 2104.04473, Sec 2.2; interleaved with
v model chunks per stage: its bubble (pp - 1) / v micro-batches) a step takes

    step_s = (m + (pp - 1) / v) x (fixed_s + per_sample_s x b)

where m = global_batch / (b x dp) micro-batches of b samples pass each stage. ``fixed_s`` is what a
micro-batch costs on a stage whatever its size (kernel launches and host work, latencies,
synchronisations), ``per_sample_s`` what grows with its tokens (GEMMs, element-wise bytes,
collective bytes). Two or more micro-batch sizes give both by least squares; the split of the
measured step against the split of the predicted one says which side of the cost model is off,
which a single run's error cannot. The step's parts outside the micro-batches (the optimizer step,
the exposed gradient reduction) are taken into the two terms; runs that differ in them (not here:
the same model and layout) would need them apart.

``python bench/microbatch_split.py`` prints one line per group of runs. It is a diagnostic: it
moves no prediction and tests nothing against a target.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import accuracy  # noqa: E402

# Fields of a record and of its run_inputs settings that may differ within a group.
_FREE_RECORD_FIELDS = ("id", "where_in_source", "measured", "notes", "source")
_FREE_PARALLEL_FIELDS = ("micro_batch", "gradient_accumulation")
_FREE_SETTINGS_FIELDS = ("why",)


@dataclass(frozen=True)
class Split:
    """One group of runs: fixed and per-sample seconds per micro-batch and stage."""

    run_ids: tuple[str, ...]
    micro_batches: tuple[int, ...]
    measured_fixed_s: float
    measured_per_sample_s: float
    predicted_fixed_s: float
    predicted_per_sample_s: float


def critical_micro_batches(global_batch: int, micro_batch: int, dp_size: int, pp_size: int, virtual_stages: int = 1) -> float:
    """Micro-batch passes on a step's critical path: m + (pp - 1) / v (see the module docstring)."""
    return global_batch / (micro_batch * dp_size) + (pp_size - 1) / virtual_stages


def fit_split(micro_batches: list[int], passes: list[float], step_s: list[float]) -> tuple[float, float]:
    """(fixed_s, per_sample_s) that make passes_i x (fixed_s + per_sample_s x b_i) closest to
    step_s_i in least squares; exact for two sizes."""
    if len(set(micro_batches)) < 2:
        raise ValueError("a split needs at least two micro-batch sizes")
    design = np.array([[n, n * b] for n, b in zip(passes, micro_batches)], dtype=float)
    solution, *_ = np.linalg.lstsq(design, np.array(step_s, dtype=float), rcond=None)
    return float(solution[0]), float(solution[1])


def _group_key(record: dict, settings: dict) -> str:
    kept = {k: v for k, v in record.items() if k not in _FREE_RECORD_FIELDS}
    kept["parallel"] = {k: v for k, v in record["parallel"].items() if k not in _FREE_PARALLEL_FIELDS}
    kept["settings"] = {k: v for k, v in settings.items() if k not in _FREE_SETTINGS_FIELDS}
    return json.dumps(kept, sort_keys=True, default=str)


def _step_s(metric: str, value: float, record: dict) -> float | None:
    """A run's step time from its compared metric: the iteration time, or the global batch's
    tokens over the cluster's tokens per second."""
    if metric == "iteration_time_s":
        return value
    if metric == "tokens_per_sec_per_gpu":
        tokens = record["parallel"]["global_batch"] * record["model"]["seq_len"]
        return tokens / (value * record["cluster"]["gpus"])
    return None


def splits(records: list[dict] | None = None) -> list[Split]:
    """Every group of evaluated bench runs that differ only in micro-batch size, split."""
    inputs = accuracy.load_inputs()
    records = accuracy.bench_records() if records is None else records
    groups: dict[str, list[tuple[dict, accuracy.RunResult]]] = {}
    for record in records:
        parallel = record.get("parallel") or {}
        if not all(parallel.get(k) for k in ("micro_batch", "global_batch", "dp", "pp")):
            continue
        result = accuracy.evaluate_record(record, inputs)
        if result.predicted is None or result.measured is None:
            continue
        key = _group_key(record, accuracy.record_settings(record, inputs))
        groups.setdefault(key, []).append((record, result))
    out = []
    for members in groups.values():
        sizes = [record["parallel"]["micro_batch"] for record, _ in members]
        if len(set(sizes)) < 2:
            continue
        passes, measured, predicted = [], [], []
        for record, result in members:
            par = record["parallel"]
            passes.append(critical_micro_batches(par["global_batch"], par["micro_batch"], par["dp"], par["pp"], par.get("virtual_pipeline") or 1))
            measured.append(_step_s(result.metric, result.measured, record))
            predicted.append(_step_s(result.metric, result.predicted, record))
        if None in measured or None in predicted:
            continue
        m_fixed, m_sample = fit_split(sizes, passes, measured)  # type: ignore[arg-type]
        p_fixed, p_sample = fit_split(sizes, passes, predicted)  # type: ignore[arg-type]
        out.append(Split(tuple(r["id"] for r, _ in members), tuple(sizes), m_fixed, m_sample, p_fixed, p_sample))
    return out


def main() -> int:
    rows = splits()
    print("Per micro-batch and stage: fixed ms + per-sample ms x b, measured against predicted")
    print(f"{'first run of the group':58s} {'b':>9s} {'fixed meas':>10s} {'pred':>8s} {'/sample meas':>12s} {'pred':>8s} {'ratio':>6s}")
    for row in rows:
        ratio = row.measured_per_sample_s / row.predicted_per_sample_s if row.predicted_per_sample_s > 0 else float("nan")
        sizes = ",".join(str(b) for b in sorted(set(row.micro_batches)))
        print(
            f"{row.run_ids[0][:58]:58s} {sizes:>9s} {row.measured_fixed_s * 1e3:10.1f} {row.predicted_fixed_s * 1e3:8.1f} "
            f"{row.measured_per_sample_s * 1e3:12.2f} {row.predicted_per_sample_s * 1e3:8.2f} {ratio:6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Peak memory of the cost model against published, measured peak GPU memory (issue 13, mechanism 5).

Run: ``.venv/bin/python bench/memory.py`` (or ``make bench``). For every record of
bench/data/published_memory.json it builds the solver inputs from the record's ``run`` (catalog
model or the record's model shape, node and GPU, the published split), evaluates them through the
public solver API and prints the prediction of the quantity the figure counts (its "measures":
allocated, active, reserved or device-used; ``predicted_measure_bytes``) on the GPU the figure is about (the record's
``stage``: Megatron-LM logs its last rank; otherwise the largest stage, as the other sources
report their largest GPU) against the measured figure, with the signed error (predicted /
measured - 1: positive = the model predicts more memory than was measured), the memory verdict on
the capacity of the GPU that ran it (every figure comes from a run that ran, so "NO" is a false
out-of-memory) and the predicted breakdown. Records that measure ``out_of_memory`` are published
runs that stopped with CUDA out of memory: they carry no figure, and the planner must say they do
not fit on that GPU (a table of their predicted peaks follows the first). Under the tables: n,
within 10%, MAPE and signed mean per family, the summary, the rules other than memory the planner
says a published split breaks, and the records it cannot express, each with its reason. It is a
report: it exits 0.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import catalog  # noqa: E402
from catalog.conversion import STACK_FACTS  # noqa: E402
from solver.cost.evaluate import evaluate
from solver.cost.memory import RUNTIME_RESERVE_BYTES
from solver.cost.result import GIB_BYTES, MEMORY_KEYS, Evaluation, device_held_bytes
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule
from solver.spec.training import Precision, Recompute, TrainingSpec, ZeroStage

DATA = Path(__file__).parent / "data" / "published_memory.json"
WITHIN_TARGET = 0.10  # issue 13: within 10% on every published memory figure
# What a record of a run that ran out of memory "measures": no figure, only that it did not fit.
OUT_OF_MEMORY = "out_of_memory"


@dataclass(frozen=True)
class MemoryResult:
    """One record: the measured figure and, where the planner can express the run, its prediction."""

    record_id: str
    family: str
    measures: str  # what the figure counts (published_memory.json "measures")
    measured_gib: float | None  # None for a run that ran out of memory (OUT_OF_MEMORY)
    predicted_gib: float | None = None  # of the quantity the figure counts (predicted_measure_bytes)
    peak_gib: float | None = None  # the stage's whole predicted peak, reserve included
    fits: bool | None = None  # no memory violation on the capacity of the GPU that ran it
    other_violations: tuple[str, ...] = ()  # rules other than memory the planner says it breaks
    stage: int = 0  # the pipeline stage compared (measured_stage)
    breakdown_gib: dict[str, float] = field(default_factory=dict)  # that stage's, by MEMORY_KEYS
    step_segment_gib: float = 0.0  # reserved beside the peak for the buffers after backward (reserved figures only)
    skipped: str = ""  # why the record cannot be expressed

    @property
    def error(self) -> float | None:
        """Signed error, predicted / measured - 1 (positive: the model predicts more memory)."""
        if self.predicted_gib is None or self.measured_gib is None:
            return None
        return self.predicted_gib / self.measured_gib - 1


@dataclass(frozen=True)
class Summary:
    evaluated: int
    within_target: int
    mape: float
    signed_mean: float
    worst_id: str
    worst_error: float
    false_out_of_memory: int  # runs that ran but the planner says do not fit in memory
    other_infeasible: int  # runs that ran but the planner rejects for a rule other than memory
    out_of_memory: int = 0  # runs that ran out of memory, evaluated (OUT_OF_MEMORY records)
    false_fit: int = 0  # of those, the ones the planner says fit


def load_document() -> dict:
    return json.loads(DATA.read_text())


def load_records() -> list[dict]:
    return load_document()["records"]


def not_expressible(record: dict) -> str:
    """Why the planner cannot express the record's run, or "" when it can."""
    run = record["run"]
    if record.get("not_expressible"):
        return record["not_expressible"]
    if run.get("precision") not in {p.value for p in Precision}:
        return f"precision {run.get('precision')!r} is not a planner precision"
    return ""


def model_for(run: dict) -> ModelSpec:
    """The run's model at its sequence length: a catalog model, or the shape the record gives
    (``model_shape``, the catalog's model fields) where the catalog has none."""
    shape = catalog.get_entry("models", run["model"]) if run.get("model") else run["model_shape"]
    return catalog.model_spec_from_dict({**shape, "seq_length": run["seq_length"]})


def cluster_for(run: dict) -> ClusterSpec:
    """The run's catalog node, enough of them for its GPUs, with the GPU's capacity replaced by the
    one the source states (``gpu_memory_gib``) where the catalog's part differs."""
    node = catalog.get_entry("nodes", run["node"])
    gpu_entry = catalog.get_entry("gpus", node["gpu"])
    if run.get("gpu_memory_gib"):
        gpu_entry = {**gpu_entry, "memory_gib": run["gpu_memory_gib"]}
    spec = {**node, "num_nodes": max(1, math.ceil(run["num_gpus"] / node["gpus_per_node"]))}
    return catalog.cluster_spec_from_dict(spec, gpu=catalog.gpu_spec_from_dict(gpu_entry))


def training_for(run: dict) -> TrainingSpec:
    """The run's stack facts (``run["stack"]``, catalog/data/stacks.json), with the run's own
    kernel settings over them."""
    facts = catalog.get_stack_facts(run["stack"]) if run.get("stack") else {}
    overrides = {name: run[name] for name in STACK_FACTS if name in run}
    return TrainingSpec(
        global_batch_size=run["global_batch_size"],
        seq_length=run["seq_length"],
        precision=run["precision"],
        optimizer=run.get("optimizer", "adam"),
        **{**facts, **overrides},
    )


def parallel_for(run: dict) -> ParallelConfig:
    stage_layers = run.get("stage_layers")
    return ParallelConfig(
        dp_size=run["dp_size"],
        tp_size=run["tp_size"],
        pp_size=run["pp_size"],
        zero_stage=ZeroStage(run["zero_stage"]),
        micro_batch_size=run["micro_batch_size"],
        recompute=Recompute(run["recompute"]),
        virtual_stages=run.get("virtual_stages", 1),
        cp_size=run.get("cp_size", 1),
        sequence_parallel=run.get("sequence_parallel", False),
        stage_layers=tuple(stage_layers) if stage_layers else None,
    )


def measured_stage(evaluation: Evaluation, run: dict) -> int:
    """The pipeline stage whose GPU the figure is about: ``run["stage"]`` ("last" for the last
    pipeline stage, as Megatron-LM logs memory on the last rank), else the largest one (every
    other source reports the maximum over its GPUs)."""
    stage = run.get("stage")
    if stage is None:
        return evaluation.peak_stage
    return len(evaluation.stages) - 1 if stage == "last" else int(stage)


# The figures that count what the caching allocator reserves, not only what tensors hold.
RESERVED_MEASURES = ("max_reserved", "nvidia_smi_used")


def predicted_measure_bytes(
    memory: dict[str, float], measures: str, step_segment_bytes: float = 0.0, capacity_bytes: float = float("inf")
) -> float:
    """The predicted counterpart of what a figure counts (published_memory.json "measures"):
    PyTorch's peak allocated or active bytes are the tensors alone, without the reserve; its
    peak reserved bytes add the caching allocator's fragmentation (the reserve's share in
    proportion to what is allocated) but not the CUDA context, cuBLAS workspaces and NCCL
    buffers, which live outside the allocator (RUNTIME_RESERVE_BYTES); NVML's used memory is
    everything on the device. Both reserved figures (RESERVED_MEASURES) also hold the segments the
    buffers after backward took beside the activations' cached blocks (``step_segment_bytes``,
    solver.cost.stage.step_copy_segment_bytes), up to what the GPU holds."""
    allocated = sum(value for key, value in memory.items() if key != "reserve")
    if measures in ("max_allocated", "max_active"):
        return allocated
    held = device_held_bytes(allocated + memory["reserve"], step_segment_bytes, capacity_bytes)
    if measures == "max_reserved":
        return held - RUNTIME_RESERVE_BYTES
    return held


def evaluate_record(record: dict) -> MemoryResult:
    measured = None if record["measures"] == OUT_OF_MEMORY else float(record["measured_gib"])
    base = MemoryResult(record["id"], record.get("family", ""), record["measures"], measured)
    why = not_expressible(record)
    if why:
        return replace(base, skipped=why)
    run = record["run"]
    try:
        evaluation = evaluate(
            model_for(run), cluster_for(run), training_for(run), parallel_for(run), num_gpus=run["num_gpus"]
        )
    except SpecError as err:
        return replace(base, skipped=f"the planner rejects the published split: {err}")
    stage = measured_stage(evaluation, run)
    peak = evaluation.stages[stage]
    return replace(
        base,
        # A run that ran out of memory is compared by its whole peak against the GPU (``fits``).
        predicted_gib=predicted_measure_bytes(
            dict(peak.memory_bytes), record["measures"], peak.step_segment_bytes, evaluation.capacity_bytes
        ) / GIB_BYTES if measured is not None else None,
        peak_gib=peak.peak_bytes / GIB_BYTES,
        fits=not any(v.rule is Rule.MEMORY for v in evaluation.violations),
        other_violations=tuple(str(v) for v in evaluation.violations if v.rule is not Rule.MEMORY),
        stage=stage,
        breakdown_gib={key: peak.memory_bytes[key] / GIB_BYTES for key in MEMORY_KEYS},
        step_segment_gib=peak.step_segment_bytes / GIB_BYTES,
    )


def evaluate_all(records: list[dict] | None = None) -> list[MemoryResult]:
    return [evaluate_record(record) for record in (load_records() if records is None else records)]


def ran_out_of_memory(results: list[MemoryResult]) -> list[MemoryResult]:
    """The evaluated records of runs that ran out of memory (OUT_OF_MEMORY)."""
    return [r for r in results if r.measures == OUT_OF_MEMORY and not r.skipped]


def summarize(results: list[MemoryResult]) -> Summary:
    scored = [r for r in results if r.error is not None]
    ran_out = ran_out_of_memory(results)
    errors = [r.error for r in scored if r.error is not None]
    worst = max(scored, key=lambda r: abs(r.error or 0.0))
    return Summary(
        evaluated=len(scored),
        within_target=sum(abs(e) <= WITHIN_TARGET for e in errors),
        mape=sum(abs(e) for e in errors) / len(errors),
        signed_mean=sum(errors) / len(errors),
        worst_id=worst.record_id,
        worst_error=worst.error or 0.0,
        false_out_of_memory=sum(r.fits is False for r in scored),
        other_infeasible=sum(bool(r.other_violations) for r in scored),
        out_of_memory=len(ran_out),
        false_fit=sum(r.fits is True for r in ran_out),
    )


# Short column names for the predicted breakdown (StageMemory's fields, in order).
BREAKDOWN_COLUMNS = {
    "weights": "wts",
    "gradients": "grads",
    "optimizer_states": "optim",
    "activations": "act",
    "embedding_and_logits": "emb+log",
    "zero3_gather_buffers": "z3buf",
    "optimizer_step_copy": "step",
    "reserve": "rsrv",
}


def family_lines(results: list[MemoryResult]) -> list[str]:
    """n, how many within the target, MAPE and signed mean error per family (source)."""
    families = sorted({r.family for r in results if r.error is not None})
    width = max([18, *(len(family) for family in families)])
    lines = [f"{'family':{width}s} {'n':>3s} {'within':>6s} {'MAPE':>6s} {'signed':>7s}"]
    for family in families:
        errors = [r.error for r in results if r.family == family and r.error is not None]
        lines.append(
            f"{family:{width}s} {len(errors):3d} {sum(abs(e) <= WITHIN_TARGET for e in errors):6d} "
            f"{sum(abs(e) for e in errors) / len(errors):6.1%} {sum(errors) / len(errors):+7.1%}"
        )
    return lines


def report_lines(results: list[MemoryResult]) -> list[str]:
    width = max((len(r.record_id) for r in results), default=6)
    lines = [
        "Peak memory per GPU: predicted vs published measurement (GiB; error = predicted / measured - 1)",
        "",
        f"{'record':{width}s} {'measures':15s} {'measured':>8s} {'predicted':>9s} {'error':>7s} {'fits':>4s}  "
        + " ".join(f"{name:>6s}" for name in BREAKDOWN_COLUMNS.values()) + f" {'stpseg':>6s}",
    ]
    for r in results:
        if r.error is None:
            continue
        parts = " ".join(f"{r.breakdown_gib.get(key, 0.0):6.1f}" for key in BREAKDOWN_COLUMNS)
        # The segments of the buffers after backward count only in the reserved figures.
        segment = r.step_segment_gib if r.measures in RESERVED_MEASURES else 0.0
        lines.append(
            f"{r.record_id:{width}s} {r.measures:15s} {r.measured_gib:8.2f} {r.predicted_gib:9.2f} {r.error:+7.1%} "
            f"{'yes' if r.fits else 'NO':>4s}  {parts} {segment:6.1f}"
        )
    ran_out = ran_out_of_memory(results)
    if ran_out:
        lines += [
            "",
            "Runs that ran out of memory (the planner must say they do not fit): predicted peak of the largest stage, GiB",
            "",
            f"{'record':{width}s} {'peak':>9s} {'fits':>4s}  " + " ".join(f"{name:>6s}" for name in BREAKDOWN_COLUMNS.values()),
        ]
        for r in ran_out:
            parts = " ".join(f"{r.breakdown_gib.get(key, 0.0):6.1f}" for key in BREAKDOWN_COLUMNS)
            lines.append(f"{r.record_id:{width}s} {r.peak_gib or 0.0:9.2f} {'YES' if r.fits else 'no':>4s}  {parts}")
    lines += [""] + family_lines(results)
    summary = summarize(results)
    lines += [
        "",
        f"within {WITHIN_TARGET:.0%}: {summary.within_target} of {summary.evaluated} (target: all); "
        f"MAPE {summary.mape:.1%}; signed mean {summary.signed_mean:+.1%}; "
        f"worst {summary.worst_id} ({summary.worst_error:+.1%}); "
        f"said not to fit although they ran: {summary.false_out_of_memory}; "
        f"rejected by another rule although they ran: {summary.other_infeasible}; "
        f"said to fit although they ran out of memory: {summary.false_fit} of {summary.out_of_memory}",
    ]
    rejected = [r for r in results if r.other_violations]
    if rejected:
        lines += ["", "rules other than memory the planner says a published run breaks:"]
        lines += [f"  {r.record_id}: {'; '.join(r.other_violations)}" for r in rejected]
    skipped = [r for r in results if r.skipped]
    if skipped:
        lines += ["", f"not expressible ({len(skipped)}):"]
        lines += [f"  {r.record_id}: {r.skipped}" for r in skipped]
    return lines


def main() -> int:
    print("\n".join(report_lines(evaluate_all())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

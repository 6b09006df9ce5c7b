"""Accuracy of the cost model against published, measured training runs.

Run: ``.venv/bin/python bench/accuracy.py`` (or ``make bench``). For every record of
bench/data/published_runs.json it builds the solver inputs (bench/data/run_inputs.json says how,
with sources), evaluates them through the public solver API and prints predicted vs measured
throughput, the signed error and the mean absolute percentage error (MAPE).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import catalog  # noqa: E402
from solver.cost.evaluate import evaluate
from solver.cost.flops import total_parameter_count
from solver.cost.result import Evaluation
from solver.spec.errors import SpecError
from solver.spec.model import Architecture, ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Framework, Recompute, TrainingSpec, ZeroStage

DATA = Path(__file__).parent / "data"
MAPE_TARGET = 0.10
WORST_TARGET = 0.20


@dataclass(frozen=True)
class RunResult:
    run_id: str
    metric: str  # what was compared
    measured: float | None
    predicted: float | None
    filled: str  # unknown fields filled by the benchmark
    skipped: str = ""  # why the record could not be evaluated

    @property
    def error(self) -> float | None:
        """Signed throughput error: predicted / measured - 1 (for a time, measured / predicted - 1)."""
        if self.measured is None or self.predicted is None:
            return None
        if self.metric == "iteration_time_s":
            return self.measured / self.predicted - 1
        return self.predicted / self.measured - 1


def load_records() -> list[dict]:
    return json.loads((DATA / "published_runs.json").read_text())


def load_inputs() -> dict:
    return json.loads((DATA / "run_inputs.json").read_text())


def _source_key(run_id: str, sources: dict) -> str:
    return next(key for key in sources if run_id.startswith(key))


def _model_for(record: dict, settings: dict) -> ModelSpec | None:
    if settings.get("model"):
        return catalog.get_model(settings["model"])
    shape = record["model"]
    if shape.get("layers") is None or shape.get("hidden") is None:
        return None
    for entry in catalog.list_entries("models"):
        if (entry["num_layers"], entry["hidden_size"], entry["num_attention_heads"], entry["vocab_size"]) == (
            shape["layers"], shape["hidden"], shape["heads"], shape["vocab"]
        ) and entry["ffn_hidden_size"] == (shape.get("ffn_hidden") or 4 * shape["hidden"]):
            return catalog.model_spec_from_dict({**entry, "seq_length": shape["seq_len"]})
    return ModelSpec(
        name=record["id"],
        num_layers=shape["layers"],
        hidden_size=shape["hidden"],
        num_attention_heads=shape["heads"],
        vocab_size=shape["vocab"],
        seq_length=shape["seq_len"],
        ffn_hidden_size=shape.get("ffn_hidden"),
        architecture=Architecture(settings.get("architecture", "decoder")),
    )


def _cluster_for(record: dict, settings: dict):
    node = catalog.get_entry("nodes", settings["node"])
    gpus = record["cluster"]["gpus"]
    spec = {**node, "num_nodes": max(1, math.ceil(gpus / node["gpus_per_node"]))}
    if settings.get("inter_node_gbytes_per_s"):
        spec["inter_node_gbytes_per_s"] = settings["inter_node_gbytes_per_s"]
    return catalog.cluster_spec_from_dict(spec)


def _metric(measured: dict) -> tuple[str, float] | None:
    for key in ("iteration_time_s", "tokens_per_sec_per_gpu", "sequences_per_sec", "tflops_per_gpu", "mfu"):
        if measured.get(key) is not None:
            return key, float(measured[key])
    return None


def gpt_neox_logged_parameter_count(model: ModelSpec, tp_size: int) -> int:
    """The parameter count GPT-NeoX's logger uses (``megatron/utils.py`` ``get_total_params``):
    every model-parallel rank's local count, summed. Layer norms and the biases of row-parallel
    GEMMs (attention output, MLP down-projection) are whole on each tensor-parallel rank, so they
    count tp_size times."""
    h = model.hidden_size
    replicated_per_layer = 2 * (2 * h) + 2 * h  # two layer norms (weight, bias), two row-parallel biases
    replicated = model.num_layers * replicated_per_layer + 2 * h  # + the final layer norm
    return total_parameter_count(model) + (tp_size - 1) * replicated


def gpt_neox_2022_flops_per_token(model: ModelSpec, seq_length: int, tp_size: int) -> float:
    """FLOPs per token by GPT-NeoX's logger as it stood from 2021 until September 2023
    (``megatron/logging.py`` ``get_flops``, replaced by PR #1044): 6 * params for the dense
    layers plus 60 * s * h * L for attention, with no term for activation recomputation."""
    params = gpt_neox_logged_parameter_count(model, tp_size)
    return 6.0 * params + 60.0 * seq_length * model.hidden_size * model.num_layers


def _reported_flops_per_token(convention: str, model: ModelSpec, seq_length: int, tp_size: int) -> float | None:
    """FLOPs per token in the record's own TFLOP/s convention; None for Megatron-LM's eq. 3, which
    is the evaluation's hardware FLOPs (recompute included)."""
    if convention == "megatron":
        return None
    if convention == "gpt_neox_2022":
        return gpt_neox_2022_flops_per_token(model, seq_length, tp_size)
    raise ValueError(f"unknown reported_flops convention {convention!r}")


def _predicted(metric: str, evaluation: Evaluation, num_gpus: int, flops_per_token: float | None) -> float:
    p = evaluation.prediction
    return {
        "iteration_time_s": p.step_time_s,
        "tokens_per_sec_per_gpu": p.tokens_per_s / num_gpus,
        "sequences_per_sec": p.samples_per_s,
        "tflops_per_gpu": (
            p.hardware_tflops_per_gpu if flops_per_token is None else p.tokens_per_s * flops_per_token / num_gpus / 1e12
        ),
        "mfu": p.mfu,
    }[metric]


def _candidates(record: dict, settings: dict, model: ModelSpec, global_batch: int):
    """Every parallel configuration consistent with what the record publishes."""
    par = record["parallel"]
    gpus = record["cluster"]["gpus"]
    tp, pp = par.get("tp") or 1, par.get("pp") or 1
    dp = par.get("dp") or gpus // (tp * pp)
    per_replica = global_batch // dp
    micro = [par["micro_batch"]] if par.get("micro_batch") else [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if per_replica % b == 0]
    if settings.get("virtual_stages"):
        virtual = [settings["virtual_stages"]]
    elif par.get("interleave") and pp > 1:
        virtual = [v for v in range(1, model.num_layers // pp + 1) if model.num_layers % (pp * v) == 0][:8]
    else:
        virtual = [1]
    known = par.get("recompute")
    recompute = [Recompute(known)] if known in ("none", "selective", "full") else list(Recompute)
    sp = [bool(par["sequence_parallel"])] if par.get("sequence_parallel") is not None else [False]
    zero = par.get("zero_stage")
    zero = ZeroStage(zero if zero is not None else settings.get("zero_stage", 0))
    for mb, v, rc, seq_par in itertools.product(micro, virtual, recompute, sp):
        yield ParallelConfig(dp, tp, pp, zero, mb, rc, v, seq_par)


def record_settings(record: dict, inputs: dict) -> dict:
    """The record's source settings, overridden by its own entry in run_inputs.json."""
    sources = inputs["sources"]
    return {**sources[_source_key(record["id"], sources)], **inputs["records"].get(record["id"], {})}


def training_for(record: dict, settings: dict, model: ModelSpec, padded: bool = True) -> TrainingSpec:
    """The record's training settings. ``padded``: cost a step at the mean padded sample length
    where the source pads each batch only to its longest sample (``mean_padded_seq_length``);
    False: at the full sequence length, which is what memory must hold."""
    gpus = record["cluster"]["gpus"]
    full_length = record["model"].get("seq_len") or model.seq_length
    return TrainingSpec(
        global_batch_size=record["parallel"].get("global_batch") or settings["global_batch_per_gpu"] * gpus,
        seq_length=(settings.get("mean_padded_seq_length") or full_length) if padded else full_length,
        precision=settings.get("precision", "bf16"),
        optimizer=settings.get("optimizer", "adam"),
        flash_attention=settings.get("flash_attention", True),
        overlap_grad_reduce=settings.get("overlap_grad_reduce", True),
        fused_kernels=settings.get("fused_kernels", True),
    )


def evaluate_record(record: dict, inputs: dict) -> RunResult:
    settings = record_settings(record, inputs)
    metric = _metric(record["measured"])
    model = _model_for(record, settings)
    if metric is None or model is None:
        why = "no model shape in the record" if model is None else "no per-run throughput metric"
        return RunResult(record["id"], metric[0] if metric else "-", metric[1] if metric else None, None, "", skipped=why)
    cluster = _cluster_for(record, settings)
    gpus = record["cluster"]["gpus"]
    training = training_for(record, settings, model)
    global_batch = training.global_batch_size
    framework = Framework(settings.get("framework", "any"))
    best: tuple[bool, float, ParallelConfig, Evaluation] | None = None
    for parallel in _candidates(record, settings, model, global_batch):
        try:
            ev = evaluate(model, cluster, training, parallel, num_gpus=gpus, framework=framework)
        except SpecError:
            continue
        key = (ev.feasible, ev.prediction.tokens_per_s)
        if best is None or key > best[:2]:
            best = (ev.feasible, ev.prediction.tokens_per_s, parallel, ev)
    if best is None:
        return RunResult(record["id"], metric[0], metric[1], None, "", skipped="no legal configuration")
    _, _, parallel, ev = best
    # Batches of the longest samples must still fit in memory.
    fits = ev.feasible and evaluate(
        model, cluster, training_for(record, settings, model, padded=False), parallel, num_gpus=gpus, framework=framework
    ).feasible
    par = record["parallel"]
    filled = []
    if not par.get("micro_batch"):
        filled.append(f"mb={parallel.micro_batch_size}")
    if parallel.virtual_stages > 1 or par.get("interleave"):
        filled.append(f"v={parallel.virtual_stages}")
    if par.get("recompute") not in ("none", "selective", "full"):
        filled.append(f"rc={parallel.recompute.value}")
    if settings.get("mean_padded_seq_length"):
        filled.append(f"padded_len={settings['mean_padded_seq_length']}")
    convention = settings.get("reported_flops", "megatron")
    flops_per_token = _reported_flops_per_token(convention, model, training.seq_length, parallel.tp_size)
    if metric[0] == "tflops_per_gpu" and flops_per_token is not None:
        filled.append(f"flops={convention}")
    if not fits:
        filled.append("INFEASIBLE")
    return RunResult(record["id"], metric[0], metric[1], _predicted(metric[0], ev, gpus, flops_per_token), " ".join(filled))


def evaluate_all() -> list[RunResult]:
    inputs = load_inputs()
    return [evaluate_record(record, inputs) for record in load_records()]


def summary(results: list[RunResult]) -> tuple[float, float, int]:
    """(MAPE, worst absolute error, runs evaluated)."""
    errors = [abs(r.error) for r in results if r.error is not None]
    return sum(errors) / len(errors), max(errors), len(errors)


def main() -> int:
    results = evaluate_all()
    print(f"{'run':48} {'metric':24} {'measured':>10} {'predicted':>10} {'error':>8}  filled")
    for r in results:
        if r.skipped:
            print(f"{r.run_id:48} {r.metric:24} {'':>10} {'':>10} {'skip':>8}  {r.skipped}")
            continue
        print(f"{r.run_id:48} {r.metric:24} {r.measured:10.4g} {r.predicted:10.4g} {r.error:+8.1%}  {r.filled}")
    mape, worst, count = summary(results)
    print(f"\nMAPE over {count} runs: {mape:.1%} (target <= {MAPE_TARGET:.0%}); worst {worst:.1%} (target <= {WORST_TARGET:.0%})")
    return 0 if mape <= MAPE_TARGET and worst <= WORST_TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())

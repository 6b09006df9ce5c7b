"""A plan request with ``constraints.framework`` returns only plans that framework runs and
exports exactly (issue 14, part 1).

The case: GPT-3 175B on 128 A100-40GB with tp 4 and pp 16, where memory is tight enough that the
search, left to itself, recomputes a different number of layers per stage on an uneven split,
which no framework runs as planned. With the framework named, every candidate's export is exact,
the framework's own parser reads it (the checks of ``test_export_frameworks``), and its predicted
figures are an evaluation of the exported settings.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import test_export_frameworks as frameworks_read

import catalog
import solver.search.loop as loop
from solver.cost.evaluate import evaluate
from solver.frameworks import (
    ExportFormat,
    PlanToExport,
    export_mechanics,
    export_plan,
    framework_format,
    nearest_exact,
)
from solver.search.loop import framework_exact, search
from solver.search.request import Constraints, SearchRequest
from solver.search.result import SearchStats
from solver.search.space import SearchRun
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule
from solver.spec.training import Framework, Recompute, TrainingSpec, ZeroStage

MODEL = catalog.get_model("gpt3-175b")
CLUSTER = catalog.get_cluster("dgx-a100-40gb-x16")
TRAINING = TrainingSpec(global_batch_size=1536, seq_length=2048)
PINS = {"tp_size": 4, "pp_size": 16, "virtual_stages": 1}
# DeepSpeed's pipeline engine reduces gradients after the last backward pass: a request for it
# with a pipeline asks for that (the default overlaps them, which it cannot run).
TRAININGS = {
    Framework.MEGATRON: TRAINING,
    Framework.DEEPSPEED: replace(TRAINING, overlap_grad_reduce=False),
    Framework.TORCHTITAN: TRAINING,
}


def request_for(framework: Framework, training: TrainingSpec | None = None) -> SearchRequest:
    return SearchRequest(
        MODEL, CLUSTER, training or TRAININGS[framework], top_k=3,
        constraints=Constraints.parse({**PINS, "framework": framework.value}),
    )


def exported(request: SearchRequest, parallel: ParallelConfig):
    export_format = framework_format(request.constraints.framework)
    assert export_format is not None
    return export_plan(PlanToExport(MODEL, request.training, parallel, CLUSTER.gpus_per_node), export_format)


@pytest.fixture(scope="module", params=list(TRAININGS), ids=lambda f: f.value)
def searched(request):
    """(request, plans searched as before this rule, plans searched now) for one framework."""
    framework = request.param
    planned = request_for(framework)
    patch = pytest.MonkeyPatch()
    patch.setattr(loop, "framework_exact", lambda run, parallel, num_gpus: parallel)
    try:
        unrestricted = search(planned)
    finally:
        patch.undo()
    return planned, unrestricted, search(planned)


def test_the_frameworks_own_best_plan_is_not_exact_without_the_rule(searched):
    planned, unrestricted, _ = searched
    best = unrestricted.candidates[0].parallel
    assert best.full_recompute_layers is not None and len(set(best.full_recompute_layers)) > 1  # per-stage recompute
    assert not exported(planned, best).exact


def test_every_candidate_exports_exactly_and_is_predicted_as_exported(searched):
    planned, unrestricted, result = searched
    assert result.candidates, result.explanation
    export_format = framework_format(planned.constraints.framework)
    assert export_format is not None
    for candidate in result.candidates:
        export = exported(planned, candidate.parallel)
        assert export.exact and export.differences == (), export.differences
        assert export.parallel == candidate.parallel and export.training == planned.training
        fresh = evaluate(
            MODEL, CLUSTER, export.training, export.parallel, num_gpus=export.parallel.num_gpus,
            framework=export_mechanics(export_format),
        )
        assert fresh.feasible
        assert math.isclose(fresh.prediction.step_time_s, candidate.evaluation.prediction.step_time_s, rel_tol=1e-12)
        assert math.isclose(fresh.peak_bytes, candidate.evaluation.peak_bytes, rel_tol=1e-12)
    # Exactness costs time here (more recomputation, the framework's own split), never less.
    assert result.best.evaluation.prediction.step_time_s >= unrestricted.best.evaluation.prediction.step_time_s
    # The nearest exact plan, not proven the best exact one.
    assert result.stats.proven_optimal is False


def test_the_frameworks_own_parser_reads_every_candidate(searched, monkeypatch, tmp_path):
    planned, _, result = searched
    for index, candidate in enumerate(result.candidates):
        name = f"searched-{index}"
        plan = PlanToExport(MODEL, planned.training, candidate.parallel, CLUSTER.gpus_per_node)
        monkeypatch.setitem(frameworks_read.SHAPES, name, plan)
        framework = planned.constraints.framework
        if framework is Framework.MEGATRON:
            frameworks_read.test_megatron_core_reads_the_megatron_export(name)
        elif framework is Framework.DEEPSPEED:
            frameworks_read.test_deepspeed_reads_the_deepspeed_export(name, monkeypatch)
        else:
            frameworks_read.test_torchtitan_reads_the_torchtitan_export(name, tmp_path)


def test_megatron_gets_one_block_of_recompute_for_every_stage():
    result = search(request_for(Framework.MEGATRON))
    best = result.best.parallel
    # --recompute-method block --recompute-num-layers N: the same N on every (even) stage.
    assert best.stage_layers is None and best.full_recompute_layers is not None
    assert len(set(best.full_recompute_layers)) == 1


def test_deepspeed_overlapping_gradients_under_a_pipeline_is_explained_not_exported():
    result = search(request_for(Framework.DEEPSPEED, TRAINING))  # overlap_grad_reduce, pp 16 pinned
    assert not result.candidates
    explanation = result.explanation
    assert explanation.binding_constraint is Rule.FRAMEWORK_EXACT
    changes = {s.change: s for s in explanation.suggestions}
    fix = changes["the training settings deepspeed runs (overlap_grad_reduce false)"]
    assert fix.parallel.pp_size == 16
    assert exported(request_for(Framework.DEEPSPEED), fix.parallel).exact


@pytest.mark.parametrize("framework", [Framework.ANY, Framework.FSDP])
def test_a_request_without_an_exported_framework_is_searched_as_before(framework):
    """'any' and FSDP (rules, no launch config) return what the search planned, untouched."""
    request = replace(request_for(Framework.MEGATRON), constraints=Constraints.parse({**PINS, "framework": framework.value}))
    run = SearchRun(request, SearchStats(), math.inf)
    per_stage = ParallelConfig(
        dp_size=2, tp_size=4, pp_size=16, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL,
        full_recompute_layers=(6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 3, 3, 2, 1, 0, 0),
    )
    assert framework_exact(run, per_stage, 128) is per_stage
    assert run.replaced_bound == math.inf and not run.rejected


@pytest.mark.parametrize("export_format", list(ExportFormat))
@pytest.mark.parametrize("shape", list(frameworks_read.SHAPES))
def test_the_search_and_the_export_ask_the_same_question(export_format, shape):
    """``nearest_exact`` (what the search keeps) is what the export writes, difference for difference."""
    plan = frameworks_read.SHAPES[shape]
    export = export_plan(plan, export_format)
    nearest = nearest_exact(plan.model, plan.training, plan.parallel, export_format)
    assert (nearest.parallel, nearest.training, nearest.differences, nearest.exact) == (
        export.parallel, export.training, export.differences, export.exact)


def test_the_export_endpoint_of_a_framework_plan_is_exact_and_predicted_as_planned(api):
    body = {
        "model": "gpt3-175b", "cluster": "dgx-a100-40gb-x16",
        "training": {"global_batch_size": 1536, "seq_length": 2048},
        "constraints": {**PINS, "framework": "megatron"}, "top_k": 1,
    }
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    best = plan["candidates"][0]
    export = api.get(f"/v1/plans/{plan['id']}/export", params={"format": "megatron"}).json()
    assert export["exact"] is True and export["differences"] == []
    assert export["parallel"] == best["parallel"]
    assert math.isclose(export["prediction"]["step_time_s"], best["prediction"]["step_time_s"], rel_tol=1e-9)

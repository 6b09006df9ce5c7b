"""Issue 13, mechanism 2: the software stack is an input. A request names the stack that will run
the job; the stack sets the kernel and overlap facts, the request may override each, and a stored
plan says which stack and facts it assumed. Through HTTP on SQLite and Postgres."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import catalog
from catalog.conversion import STACK_FACTS
from conftest import assert_problem, error_fields, unique_name
from solver.cost.evaluate import evaluate
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage

STACKS_FILE = Path(catalog.__file__).parent / "data" / "stacks.json"


def _evaluation(**training: object) -> dict:
    return {
        "model": "gpt3-13b",
        "cluster": "dgx-a100-80gb-x1",
        "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 2048, **training},
        "parallel": {
            "dp_size": 1, "tp_size": 8, "pp_size": 1, "zero_stage": 0, "micro_batch_size": 2,
            "recompute": "selective", "virtual_stages": 1, "sequence_parallel": True,
        },
    }


def test_every_stack_states_every_fact_with_its_source():
    data = json.loads(STACKS_FILE.read_text())
    names = [stack["name"] for stack in data["stacks"]]
    assert len(names) == len(set(names)) >= 6
    assert data["default"] in names
    for stack in data["stacks"]:
        assert set(stack["facts"]) == set(STACK_FACTS), stack["name"]
        assert set(stack["sources"]) == set(STACK_FACTS), stack["name"]
        assert all(len(text) > 10 for text in stack["sources"].values()), stack["name"]
        assert stack["framework"] in ("any", "megatron", "deepspeed", "fsdp", "torchtitan")


def test_catalog_lists_the_stacks_and_marks_the_default(api):
    response = api.get("/v1/catalog/stacks")
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    defaults = [item["name"] for item in items if item["default"]]
    assert defaults == [catalog.default_stack_name()] == ["torchtitan-2025"]
    nemo = api.get("/v1/catalog/stacks/megatron-core-2024").json()
    assert nemo["facts"]["tp_comm_overlap"] is True and nemo["facts"]["overlap_p2p_comm"] is True
    assert "ub_tp_comm_overlap" in nemo["sources"]["tp_comm_overlap"]
    missing = api.get("/v1/catalog/stacks/megatron-core")
    problem = assert_problem(missing, 404)
    assert "megatron-core-2024" in problem["suggestions"]


def test_a_stack_sets_the_facts_and_a_request_overrides_them(api):
    """NeMo/Megatron-core's TP overlap (TE userbuffers) hides the transformer layers' TP
    collectives inside their GEMMs (solver physics: tests/test_collectives.py); the default stack
    runs them between GEMMs; a request naming the stack but turning the overlap off gets the
    default's figure back. The API answers what the solver computes from the stack's facts."""
    default = api.post("/v1/evaluations", json=_evaluation())
    overlapped = api.post("/v1/evaluations", json=_evaluation(stack="megatron-core-2024"))
    overridden = api.post("/v1/evaluations", json=_evaluation(stack="megatron-core-2024", tp_comm_overlap=False))
    for response in (default, overlapped, overridden):
        assert response.status_code == 200, response.text
    tp = {name: r.json()["prediction"]["breakdown_s"]["tp_comm_s"]
          for name, r in (("default", default), ("overlapped", overlapped), ("overridden", overridden))}
    assert 0 < tp["overlapped"] < 0.25 * tp["default"]
    assert tp["overridden"] == pytest.approx(tp["default"], rel=1e-12)
    model, cluster = catalog.get_model("gpt3-13b"), catalog.get_cluster("dgx-a100-80gb-x1")
    parallel = ParallelConfig(1, 8, 1, ZeroStage.NONE, 2, Recompute.SELECTIVE, sequence_parallel=True)
    for stack, name in ((None, "default"), ("megatron-core-2024", "overlapped")):
        training = TrainingSpec(64, 2048, **catalog.get_stack_facts(stack))
        expected = evaluate(model, cluster, training, parallel, num_gpus=8).prediction
        assert tp[name] == pytest.approx(expected.breakdown_s["tp_comm_s"], rel=1e-9)


def test_an_unknown_stack_is_a_422_naming_the_field_with_suggestions(api):
    response = api.post("/v1/evaluations", json=_evaluation(stack="nemo-2407"))
    problem = assert_problem(response, 422)
    assert error_fields(problem) == ["body.training.stack"]
    assert problem["suggestions"]


def test_a_stored_plan_says_which_stack_and_facts_it_assumed(api):
    name = unique_name("stack")
    model = {"name": name, "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 32000,
             "seq_length": 512}
    body = {"model": model, "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 16, "seq_length": 512},
            "top_k": 1}
    first = api.post("/v1/plans", json=body)
    assert first.status_code == 201, first.text
    training = first.json()["request"]["training"]
    assert training["stack"] == "torchtitan-2025"
    assert {k: training[k] for k in STACK_FACTS} == catalog.get_stack_facts("torchtitan-2025")
    # Naming the default stack, or spelling out one of its facts, is the same question.
    named = api.post("/v1/plans", json=body | {"training": body["training"] | {"stack": "torchtitan-2025"}})
    spelled = api.post("/v1/plans", json=body | {"training": body["training"] | {"fused_kernels": True}})
    assert named.status_code == spelled.status_code == 200, (named.text, spelled.text)
    assert named.json()["id"] == spelled.json()["id"] == first.json()["id"]
    # Another stack is another question, and its plan records that stack's facts.
    older = api.post("/v1/plans", json=body | {"training": body["training"] | {"stack": "megatron-lm-2021"}})
    assert older.status_code == 201, older.text
    assert older.json()["id"] != first.json()["id"]
    older_training = older.json()["request"]["training"]
    assert older_training["stack"] == "megatron-lm-2021"
    assert older_training["flash_attention"] is False and older_training["overlap_grad_reduce"] is False


def test_cli_lists_and_shows_stacks(tmp_path):
    import io

    from app.cli import main

    out = io.StringIO()
    assert main(["catalog", "stacks"], out=out) == 0
    names = [item["name"] for item in json.loads(out.getvalue())["items"]]
    assert "torchtitan-2025" in names and "megatron-core-2024" in names
    out = io.StringIO()
    assert main(["catalog", "stacks", "deepspeed-zero3-2021"], out=out) == 0
    assert json.loads(out.getvalue())["facts"]["zero3_collectives"] == "per_tensor"

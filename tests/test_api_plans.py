"""/v1/plans through HTTP on SQLite and Postgres: search, idempotency (also under concurrent
identical requests), listing with cursors, deletion, saturation and restarts."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

import httpx
import pytest
from sqlalchemy.exc import IntegrityError

from app.core.db import utc_now
from app.plans import service
from app.plans.models import Plan
from app.plans.schemas import PlanRequest
from conftest import assert_problem, error_fields, server_settings, start_server, unique_name

SMALL_MODEL = {
    "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 32000, "seq_length": 1024,
}


def plan_body(**overrides) -> dict:
    body = {
        "model": "gpt3-1.3b",
        "cluster": "dgx-a100-80gb-x1",
        "num_gpus": 8,
        "training": {"global_batch_size": 256, "seq_length": 2048, "precision": "bf16", "train_tokens": 3e11},
        "objective": "max_throughput",
        "top_k": 3,
    }
    body.update(overrides)
    return body


def small_model(api: httpx.Client) -> str:
    """A custom model only this test plans for, so listings are the test's own."""
    name = unique_name("plan-test")
    assert api.post("/v1/catalog/models", json=SMALL_MODEL | {"name": name}).status_code == 201
    return name


def parallel_product(parallel: dict) -> int:
    return parallel["dp_size"] * parallel["tp_size"] * parallel["pp_size"]


def test_creates_a_plan_and_answers_a_repeat_with_the_stored_plan(api):
    body = plan_body(training=plan_body()["training"] | {"global_batch_size": 512})
    created = api.post("/v1/plans", json=body)
    assert created.status_code == 201, created.text
    plan = created.json()
    assert created.headers["location"] == f"/v1/plans/{plan['id']}"
    assert plan["status"] == "succeeded"
    assert plan["explanation"] is None
    candidates = plan["candidates"]
    assert 1 <= len(candidates) <= 3
    assert [c["rank"] for c in candidates] == list(range(1, len(candidates) + 1))
    assert plan["best"] == candidates[0]
    for candidate in candidates:
        parallel = candidate["parallel"]
        assert parallel_product(parallel) == 8
        assert 512 % (parallel["dp_size"] * parallel["micro_batch_size"]) == 0
        assert candidate["memory"]["peak_gib"] <= candidate["memory"]["capacity_gib"]
    throughputs = [c["prediction"]["tokens_per_s"] for c in candidates]
    assert throughputs[0] == max(throughputs)
    assert plan["request"]["objective"] == "max_throughput" and plan["request"]["top_k"] == 3
    assert plan["catalog_snapshot"]["model"] == {
        "source": "builtin", "entry": {k: v for k, v in api.get("/v1/catalog/models/gpt3-1.3b").json().items() if k != "builtin"}
    }
    assert plan["catalog_snapshot"]["gpu"]["entry"]["name"] == "a100-sxm4-80gb"
    assert plan["versions"]["ortools"] == metadata.version("ortools")
    assert plan["versions"]["solver"].startswith(metadata.version("partitura"))

    repeat = api.post("/v1/plans", json=body)
    assert repeat.status_code == 200
    assert repeat.json() == plan
    assert repeat.headers["location"] == f"/v1/plans/{plan['id']}"
    assert api.get(f"/v1/plans/{plan['id']}").json() == plan


def test_the_best_candidate_agrees_with_an_evaluation_of_its_configuration(api):
    plan = api.post("/v1/plans", json=plan_body()).json()
    parallel = {k: v for k, v in plan["best"]["parallel"].items() if v is not None}
    evaluation = api.post(
        "/v1/evaluations",
        json={"model": "gpt3-1.3b", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
              "training": plan_body()["training"], "parallel": parallel},
    )
    assert evaluation.status_code == 200, evaluation.text
    assert evaluation.json()["prediction"]["step_time_s"] == pytest.approx(
        plan["best"]["prediction"]["step_time_s"], rel=1e-9
    )


def test_constraints_pin_every_candidate(api):
    body = plan_body(constraints={"tp_size": 2, "recompute": "selective", "micro_batch_size": {"min": 1, "max": 2}})
    response = api.post("/v1/plans", json=body)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["candidates"]
    for candidate in plan["candidates"]:
        assert candidate["parallel"]["tp_size"] == 2
        assert candidate["parallel"]["recompute"] == "selective"
        assert 1 <= candidate["parallel"]["micro_batch_size"] <= 2
    assert plan["request"]["constraints"] == {
        "tp_size": 2, "recompute": "selective", "micro_batch_size": {"min": 1, "max": 2}
    }


@pytest.mark.parametrize("recompute", [["full"], ["selective", "full"]])
def test_a_recompute_pin_is_honoured(api, recompute):
    response = api.post("/v1/plans", json=plan_body(constraints={"tp_size": 2, "recompute": recompute}))
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["candidates"]
    assert {c["parallel"]["recompute"] for c in plan["candidates"]} <= set(recompute)


def test_an_impossible_request_is_an_infeasible_plan_with_an_explanation(api):
    response = api.post("/v1/plans", json=plan_body(model="gpt3-175b"))
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["status"] == "infeasible"
    assert plan["best"] is None and plan["candidates"] == []
    assert plan["explanation"]
    listed = api.get("/v1/plans", params={"model": "gpt3-175b", "status": "infeasible"}).json()["items"]
    assert plan["id"] in [item["id"] for item in listed]


def test_list_filters_and_cursor_pagination(api):
    model = small_model(api)
    ids = []
    for batch in (64, 128, 256):
        body = plan_body(model=model, training={"global_batch_size": batch, "seq_length": 1024})
        response = api.post("/v1/plans", json=body)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])

    first = api.get("/v1/plans", params={"model": model, "limit": 2}).json()
    assert [item["id"] for item in first["items"]] == ids[::-1][:2]  # newest first
    assert first["next_cursor"]
    second = api.get("/v1/plans", params={"model": model, "limit": 2, "cursor": first["next_cursor"]}).json()
    assert [item["id"] for item in second["items"]] == [ids[0]]
    assert second["next_cursor"] is None

    item = first["items"][0]
    assert (item["model"], item["cluster"], item["status"], item["num_gpus"]) == (model, "dgx-a100-80gb-x1", "succeeded", 8)
    stored = api.get(f"/v1/plans/{item['id']}").json()
    assert item["best_parallel"] == stored["best"]["parallel"]
    assert item["best_tokens_per_s"] == pytest.approx(stored["best"]["prediction"]["tokens_per_s"])
    assert api.get("/v1/plans", params={"model": model, "status": "infeasible"}).json()["items"] == []
    assert api.get("/v1/plans", params={"model": model, "cluster": "selene"}).json()["items"] == []


def test_list_parameter_errors(api):
    assert error_fields(assert_problem(api.get("/v1/plans", params={"cursor": "garbage"}), 422)) == ["query.cursor"]
    assert error_fields(assert_problem(api.get("/v1/plans", params={"limit": 0}), 422)) == ["query.limit"]
    assert error_fields(assert_problem(api.get("/v1/plans", params={"status": "done"}), 422)) == ["query.status"]


def test_delete_and_unknown_plans(api):
    model = small_model(api)
    plan = api.post("/v1/plans", json=plan_body(model=model)).json()
    # Plan ids are opaque: a prefix of a stored one is a 404 that suggests no id (issue 17: the
    # 404 listed real plan ids to whoever asked).
    problem = assert_problem(api.get(f"/v1/plans/{plan['id'][:8]}"), 404)
    assert problem["suggestions"] == [] and plan["id"] not in str(problem)
    assert api.delete(f"/v1/plans/{plan['id']}").status_code == 204
    problem = assert_problem(api.get(f"/v1/plans/{plan['id']}"), 404)
    assert plan["id"] in problem["detail"]
    assert_problem(api.delete(f"/v1/plans/{plan['id']}"), 404)
    assert api.get("/v1/plans", params={"model": model}).json()["items"] == []
    # Deleted means forgotten: the same request is planned afresh, under a new id.
    again = api.post("/v1/plans", json=plan_body(model=model))
    assert again.status_code == 201 and again.json()["id"] != plan["id"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"constraints": {"tp_size": 0}}, "body.constraints.tp_size"),
        ({"constraints": {"pp_size": {"min": 4, "max": 2}}}, "body.constraints.pp_size"),
        ({"constraints": {"recompute": ["full", "some"]}}, "body.constraints.recompute[1]"),
        ({"constraints": {"warp_size": 2}}, "body.constraints.warp_size"),
        ({"objective": "fastest"}, "body.objective"),
        ({"top_k": 0}, "body.top_k"),
        ({"model": "gpt-3"}, "body.model"),
        ({"num_gpus": 9}, "body.num_gpus"),
        ({"training": {"global_batch_size": 0, "seq_length": 2048}}, "body.training.global_batch_size"),
        ({"time_budget_s": -1}, "body.time_budget_s"),
    ],
)
def test_bad_plan_requests_are_422s_naming_the_field(api, overrides, field):
    problem = assert_problem(api.post("/v1/plans", json=plan_body(**overrides)), 422)
    assert field in error_fields(problem), problem


def test_time_budget_is_capped_by_the_server_and_reported(api):
    model = small_model(api)
    plan = api.post("/v1/plans", json=plan_body(model=model, time_budget_s=10_000)).json()
    assert plan["request"]["time_budget_s"] == 60.0  # the test server's PARTITURA_PLAN_TIME_BUDGET_S
    assert plan["timed_out"] == plan["search"]["timed_out"]


def test_concurrent_identical_requests_store_one_plan(api):
    model = small_model(api)
    body = plan_body(model=model)
    with ThreadPoolExecutor(max_workers=4) as threads:
        responses = list(threads.map(lambda _: api.post("/v1/plans", json=body), range(4)))
    assert sorted(r.status_code for r in responses) == [200, 200, 200, 201], [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    assert len(api.get("/v1/plans", params={"model": model}).json()["items"]) == 1


def test_a_request_racing_an_uncommitted_identical_one_returns_the_winner(api, live_server):
    """Two services answer the same request; the first holds its insert uncommitted while the
    second searches and inserts: the unique key makes the second return the first's plan."""
    state = live_server.app.state
    body = PlanRequest.model_validate(plan_body(model=small_model(api)))

    def answer(session):
        return service.create_plan(session, state.solver_pool, state.metrics, state.settings, state.versions, body)

    first_session, second_session = state.sessionmaker(), state.sessionmaker()
    try:
        first = answer(first_session)
        assert first.created
        outcome = {}
        racer = threading.Thread(target=lambda: outcome.setdefault("second", answer(second_session)))
        racer.start()
        first_session.commit()
        racer.join(timeout=120)
        second_session.commit()
        assert outcome["second"].created is False
        assert outcome["second"].document.id == first.document.id
    finally:
        first_session.close()
        second_session.close()


def test_the_database_rejects_a_second_plan_with_the_same_request_hash(live_server):
    state = live_server.app.state

    def row(plan_id: str) -> Plan:
        return Plan(
            id=plan_id, created_at=utc_now(), request_hash="f" * 64, status="infeasible", model_name="m",
            cluster_name="c", objective="max_throughput", num_gpus=1, timed_out=False, request={},
            catalog_snapshot={}, solver_version="v", ortools_version="v", search_stats={}, explanation={"why": "test"},
        )

    with state.sessionmaker() as session:
        session.add(row(unique_name("hash-a")))
        session.commit()
    with state.sessionmaker() as session:
        session.add(row(unique_name("hash-b")))
        with pytest.raises(IntegrityError):
            session.flush()
        session.rollback()
    with state.sessionmaker() as session:
        session.query(Plan).filter(Plan.request_hash == "f" * 64).delete()
        session.commit()


def test_a_saturated_solver_pool_answers_503_with_retry_after(api, live_server):
    pool = live_server.app.state.solver_pool
    stored = api.post("/v1/plans", json=plan_body(model=small_model(api)))
    assert stored.status_code == 201
    with pool.reserved(pool.capacity):
        refused = api.post("/v1/plans", json=plan_body(model=small_model(api)))
        problem = assert_problem(refused, 503)
        assert refused.headers["retry-after"] == "7"  # the test server's PARTITURA_RETRY_AFTER_S
        # A stored plan needs no solver: it is still answered.
        assert api.post("/v1/plans", json=plan_body(model=stored.json()["request"]["model"])).status_code == 200
    assert problem["type"].endswith("solver-saturated")
    assert problem["status"] == 503
    response = api.post("/v1/plans", json=plan_body(model=small_model(api)))
    assert response.status_code == 201


def test_plans_survive_a_restart(api, database_url):
    plan = api.post("/v1/plans", json=plan_body(model=small_model(api))).json()
    restarted = start_server(server_settings(database_url))
    try:
        with httpx.Client(base_url=restarted.base_url, timeout=60) as other:
            assert other.get(f"/v1/plans/{plan['id']}").json() == plan
    finally:
        restarted.stop()


def test_metrics_count_solves_and_plans(api):
    api.post("/v1/plans", json=plan_body(model=small_model(api)))
    text = api.get("/metrics").text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line and line[0] != "#"
    }
    assert samples['partitura_solve_duration_seconds_count{outcome="succeeded"}'] >= 1
    assert samples['partitura_plans_created_total{status="succeeded"}'] >= 1
    assert samples['partitura_plans{status="succeeded"}'] >= 1


def test_a_search_past_its_budget_is_stored_and_marked_timed_out(api):
    body = plan_body(
        model="gpt3-175b", cluster="dgx-a100-80gb-x128", num_gpus=None,
        training={"global_batch_size": 1536, "seq_length": 2048}, time_budget_s=0.001,
    )
    response = api.post("/v1/plans", json={k: v for k, v in body.items() if v is not None})
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["timed_out"] is True and plan["search"]["timed_out"] is True
    assert plan["request"]["time_budget_s"] == 0.001
    listed = api.get("/v1/plans", params={"model": "gpt3-175b", "cluster": "dgx-a100-80gb-x128"}).json()["items"]
    assert [item["timed_out"] for item in listed if item["id"] == plan["id"]] == [True]


def test_two_replicas_on_one_database_answer_identical_requests_with_one_plan(api, database_url):
    replica = start_server(server_settings(database_url))
    try:
        body = plan_body(model=small_model(api))
        with httpx.Client(base_url=replica.base_url, timeout=120) as other, ThreadPoolExecutor(max_workers=4) as threads:
            clients = [api, other, api, other]
            responses = list(threads.map(lambda client: client.post("/v1/plans", json=body), clients))
        assert sorted(r.status_code for r in responses) == [200, 200, 200, 201], [r.text for r in responses]
        assert len({r.json()["id"] for r in responses}) == 1
    finally:
        replica.stop()


def test_a_plan_is_written_in_one_transaction(live_server):
    """A failure while writing the candidates leaves no plan row behind."""
    from app.plans.models import PlanCandidate

    state = live_server.app.state
    plan_id = unique_name("atomic")
    plan = Plan(
        id=plan_id, created_at=utc_now(), request_hash=unique_name("hash").ljust(64, "0"), status="succeeded",
        model_name="m", cluster_name="c", objective="max_throughput", num_gpus=1, timed_out=False, request={},
        catalog_snapshot={}, solver_version="v", ortools_version="v", search_stats={}, explanation=None,
    )
    for _ in range(2):  # two candidates with the same rank break uq_plan_candidates_plan_id_rank
        plan.candidates.append(PlanCandidate(rank=1, parallel={}, document={}))
    with state.sessionmaker() as session:
        session.add(plan)
        with pytest.raises(IntegrityError):
            session.flush()
        session.rollback()
    with state.sessionmaker() as session:
        assert session.get(Plan, plan_id) is None


def test_objectives(api):
    base = {k: v for k, v in plan_body(cluster="dgx-a100-80gb-x8").items() if k != "num_gpus"}
    base["training"] = {"global_batch_size": 256, "seq_length": 2048, "train_tokens": 3e10}

    cost = api.post("/v1/plans", json=base | {"objective": "min_cost"}).json()
    costs = [c["objective_value"] for c in cost["candidates"]]
    assert cost["status"] == "succeeded" and costs == sorted(costs)

    fastest = api.post("/v1/plans", json=base | {"objective": "min_time_to_train"}).json()
    times = [c["prediction"]["time_to_train_s"] for c in fastest["candidates"]]
    assert times == sorted(times)
    assert times[0] == pytest.approx(3e10 / fastest["best"]["prediction"]["tokens_per_s"], rel=1e-6)

    deadline_s = 30 * 86400
    fewest = api.post("/v1/plans", json=base | {"objective": "min_gpus", "deadline_s": deadline_s}).json()
    best = fewest["best"]
    assert best["prediction"]["time_to_train_s"] <= deadline_s
    gpus = [parallel_product(c["parallel"]) for c in fewest["candidates"]]
    assert gpus == sorted(gpus) and gpus[0] < 64


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"objective": "min_gpus"}, "body.deadline_s"),
        ({"objective": "min_time_to_train", "training": {"global_batch_size": 256, "seq_length": 2048}}, "body.training.train_tokens"),
    ],
)
def test_an_objective_without_what_it_needs_is_a_422(api, overrides, field):
    body = {k: v for k, v in plan_body(model=small_model(api)).items() if k != "num_gpus"} | overrides
    problem = assert_problem(api.post("/v1/plans", json=body), 422)
    assert error_fields(problem) == [field]


def test_a_plan_keeps_its_catalog_snapshot_when_the_catalog_changes(api):
    name = small_model(api)
    body = plan_body(model=name)
    first = api.post("/v1/plans", json=body).json()
    assert first["catalog_snapshot"]["model"] == {
        "source": "custom", "entry": SMALL_MODEL | {"name": name, "mlp_activation": "gelu", "tied_embeddings": True,
                                                    "architecture": "decoder", "position_embedding": "learned"},
    }
    assert api.delete(f"/v1/catalog/models/{name}").status_code == 204
    assert api.get(f"/v1/plans/{first['id']}").json()["catalog_snapshot"] == first["catalog_snapshot"]

    # The same name now means another model: the same request body is a new question.
    changed = SMALL_MODEL | {"name": name, "num_layers": 12}
    assert api.post("/v1/catalog/models", json=changed).status_code == 201
    second = api.post("/v1/plans", json=body)
    assert second.status_code == 201
    assert second.json()["id"] != first["id"]
    assert second.json()["catalog_snapshot"]["model"]["entry"]["num_layers"] == 12

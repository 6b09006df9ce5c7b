"""Jobs (issue 15 part 2): sweeps and plans asked with ``Prefer: respond-async`` answer 202 with
a job to poll. On SQLite (the default, ``make run``) the API process runs the points itself;
these tests drive that end to end on a live server over a database built by the migrations.
tests/test_jobs_postgres.py runs the same API against ``partitura worker`` processes."""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from app.cli import main
from app.core.db import make_engine, make_sessionmaker
from app.core.migrate import upgrade
from app.jobs import service as jobs_service
from app.jobs.models import Job, JobPoint
from app.jobs.router import wants_async
from app.sweeps.schemas import SweepRequest
from app.tokens import service as tokens_service
from app.tokens.scopes import Scope
from conftest import assert_problem, empty_database, server_settings, start_server

ASYNC = {"Prefer": "respond-async"}
# Seconds a small job may take on 2 busy cores before a test gives up on it.
JOB_TIMEOUT_S = 120.0


def small_sweep(**overrides: Any) -> dict[str, Any]:
    """A sweep of 4 small points; train_tokens makes its plan requests new (plans are stored by
    request, and a point planned before is not searched again)."""
    body = {
        "model": "gpt3-125m",
        "cluster": "dgx-a100-80gb",
        "num_gpus": [2, 4, 8, 16],
        "training": {"global_batch_size": 32, "seq_length": 1024, "train_tokens": 1e9 + random.randrange(10**9)},
        "objective": "min_time_to_train",
    }
    body.update(overrides)
    return body


def poll(client: httpx.Client, href: str, done: Callable[[dict], bool], timeout_s: float = JOB_TIMEOUT_S) -> dict:
    """GET ``href`` until ``done(document)``; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.get(href)
        assert response.status_code == 200, response.text
        document = response.json()
        if done(document):
            return document
        assert time.monotonic() < deadline, f"gave up waiting on {href}: {document}"
        time.sleep(0.1)


def finished(job: dict) -> bool:
    return job["status"] in ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with empty_database("sqlite", tmp_path_factory.mktemp("jobs")) as url:
        upgrade(url)
        server = start_server(server_settings(url))
        try:
            with httpx.Client(base_url=server.base_url, timeout=60.0) as client:
                yield client
        finally:
            server.stop()


def test_prefer_header_parsing():
    assert wants_async("respond-async")
    assert wants_async("wait=10, Respond-Async")
    assert wants_async("respond-async; foo=bar")
    assert not wants_async(None) and not wants_async("") and not wants_async("return=minimal")


def test_sweep_job_runs_to_its_sweep_on_sqlite(sqlite_server):
    body = small_sweep()
    response = sqlite_server.post("/v1/sweeps", json=body, headers=ASYNC)
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}" == job["href"]
    assert response.headers["preference-applied"] == "respond-async"
    assert job["kind"] == "sweep" and job["points_total"] == 4 and job["status"] in ("queued", "running", "succeeded")
    job = poll(sqlite_server, job["href"], finished)
    assert job["status"] == "succeeded", job
    assert job["points_done"] == job["points_total"] == 4
    assert job["result"]["kind"] == "sweep" and job["error"] is None
    assert job["started_at"] is not None and job["finished_at"] is not None
    sweep = sqlite_server.get(job["result"]["href"]).json()
    assert sweep["id"] == job["result"]["id"]
    assert [p["num_gpus"] for p in sweep["points"]] == [2, 4, 8, 16]
    assert all(p["status"] == "succeeded" and p["plan_id"] for p in sweep["points"])
    # The same sweep asked synchronously answers the same points from the same stored plans.
    direct = sqlite_server.post("/v1/sweeps", json=body)
    assert direct.status_code == 201, direct.text
    assert [p["plan_id"] for p in direct.json()["points"]] == [p["plan_id"] for p in sweep["points"]]
    assert direct.json()["series"] == sweep["series"]


def test_plan_job_runs_to_its_plan_on_sqlite(sqlite_server):
    body = {
        "model": "gpt3-125m", "cluster": "dgx-a100-80gb-x1",
        "training": {"global_batch_size": 32, "seq_length": 1024, "train_tokens": 1e9 + random.randrange(10**9)},
        "objective": "max_throughput",
    }
    response = sqlite_server.post("/v1/plans", json=body, headers={"Prefer": "respond-async, wait=5"})
    assert response.status_code == 202, response.text
    job = poll(sqlite_server, response.headers["location"], finished)
    assert job["status"] == "succeeded" and job["kind"] == "plan" and job["points_done"] == job["points_total"] == 1
    plan = sqlite_server.get(job["result"]["href"]).json()
    assert plan["id"] == job["result"]["id"] and plan["status"] == "succeeded"
    # The plan is the one a direct request answers (200: stored before).
    again = sqlite_server.post("/v1/plans", json=body)
    assert again.status_code == 200 and again.json()["id"] == plan["id"]


def test_a_sweep_job_checks_its_request_before_it_exists(sqlite_server):
    problem = assert_problem(sqlite_server.post("/v1/sweeps", json=small_sweep(cluster=["no-such-cluster"]), headers=ASYNC), 422)
    assert problem["errors"][0]["field"] == "body.cluster.0"


def test_a_point_beyond_its_cluster_is_done_at_once(sqlite_server):
    # dgx-a100-80gb-x1 has 8 GPUs: 16 is not planned (a note), the rest is.
    response = sqlite_server.post("/v1/sweeps", json=small_sweep(cluster="dgx-a100-80gb-x1"), headers=ASYNC)
    assert response.status_code == 202, response.text
    job = poll(sqlite_server, response.headers["location"], finished)
    assert job["status"] == "succeeded" and job["points_done"] == 4
    sweep = sqlite_server.get(job["result"]["href"]).json()
    assert sweep["points"][3]["status"] == "infeasible" and sweep["points"][3]["plan_id"] is None


def test_unknown_job_and_finished_job_cancel(sqlite_server):
    assert_problem(sqlite_server.get("/v1/jobs/no-such-job"), 404)
    assert_problem(sqlite_server.delete("/v1/jobs/no-such-job"), 404)
    response = sqlite_server.post("/v1/sweeps", json=small_sweep(num_gpus=[2]), headers=ASYNC)
    job = poll(sqlite_server, response.headers["location"], finished)
    assert job["status"] == "succeeded"
    problem = assert_problem(sqlite_server.delete(job["href"]), 409)
    assert "succeeded" in problem["detail"]


class _Held:
    """A runner that keeps what it is given: the job stays queued, as if the process that took
    it had stopped before running it."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, list[int]]] = []

    def submit(self, job_id: str, positions: list[int]) -> None:
        self.submitted.append((job_id, positions))

    def finish(self, job_id: str) -> None:
        raise AssertionError("nothing to finish")


def test_a_job_outlives_the_process_that_took_it(tmp_path):
    """A job stored and never run (its process stopped) is run by the next process on the
    same SQLite database, and a cancelled one is not."""
    with empty_database("sqlite", tmp_path) as url:
        upgrade(url)
        engine = make_engine(url)
        held = _Held()
        try:
            with make_sessionmaker(engine)() as session:
                kept = jobs_service.submit_sweep(session, held, SweepRequest.model_validate(small_sweep(num_gpus=[2, 4])))
                dropped = jobs_service.submit_sweep(session, held, SweepRequest.model_validate(small_sweep(num_gpus=[2])))
                jobs_service.cancel_job(session, dropped.id)
                session.commit()
        finally:
            engine.dispose()
        assert [positions for _, positions in held.submitted] == [[0, 1], [0]]
        assert kept.status == "queued"
        server = start_server(server_settings(url))
        try:
            with httpx.Client(base_url=server.base_url, timeout=60.0) as client:
                job = poll(client, kept.href, finished)
                assert job["status"] == "succeeded" and job["points_done"] == 2
                assert client.get(dropped.href).json()["status"] == "cancelled"
        finally:
            server.stop()
        engine = make_engine(url)
        try:
            with make_sessionmaker(engine)() as session:
                points = session.query(JobPoint).filter(JobPoint.job_id == dropped.id).all()
                assert [p.status for p in points] == ["cancelled"] and points[0].attempts == 0
                assert session.get(Job, dropped.id).result_id is None
        finally:
            engine.dispose()


def test_a_worker_needs_postgres(tmp_path):
    out = io.StringIO()
    assert main(["worker"], env={"DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}, out=out) == 1
    assert "run inside `partitura serve`" in out.getvalue()


def test_a_job_belongs_to_its_token(tmp_path):
    """With authentication required a job, like its sweep, is its token's: another token gets
    a 404, a read-only one cannot cancel."""
    with empty_database("sqlite", tmp_path) as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            with make_sessionmaker(engine)() as session:
                tokens = [tokens_service.create_token(session, name, scopes, None) for name, scopes in (
                    ("owner", [Scope.READ, Scope.PLAN]), ("other", [Scope.READ, Scope.PLAN]), ("reader", [Scope.READ]),
                )]
                session.commit()
        finally:
            engine.dispose()
        server = start_server(server_settings(url, auth_mode="required"))
        clients = [
            httpx.Client(base_url=server.base_url, timeout=60.0, headers={"Authorization": f"Bearer {token.token}"})
            for token in tokens
        ]
        owner, other, reader = clients
        try:
            response = owner.post("/v1/sweeps", json=small_sweep(num_gpus=[2, 4]), headers=ASYNC)
            assert response.status_code == 202, response.text
            href = response.headers["location"]
            assert_problem(other.get(href), 404)
            assert_problem(other.delete(href), 404)
            assert_problem(reader.delete(href), 403)
            job = poll(owner, href, finished)
            assert job["status"] == "succeeded"
            assert owner.get(job["result"]["href"]).status_code == 200
            assert_problem(other.get(job["result"]["href"]), 404)
        finally:
            for client in clients:
                client.close()
            server.stop()


def test_the_openapi_document_describes_jobs(sqlite_server):
    document = sqlite_server.get("/openapi.json").json()
    for path, operation_id in (("/v1/sweeps", "create_sweep"), ("/v1/plans", "create_plan")):
        operation = document["paths"][path]["post"]
        assert operation["operationId"] == operation_id
        accepted = operation["responses"]["202"]
        assert accepted["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Job"}
        assert {"Location", "Preference-Applied"} <= set(accepted["headers"])
        assert [p["name"] for p in operation["parameters"] if p["in"] == "header"] == ["prefer"]
    jobs = document["paths"]["/v1/jobs/{job_id}"]
    assert jobs["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Job"}
    assert {"200", "404", "409"} <= set(jobs["delete"]["responses"])
    job = document["components"]["schemas"]["Job"]
    assert job["properties"]["status"]["enum"] == ["queued", "running", "succeeded", "failed", "cancelled"]
    assert {"points_done", "points_total", "result", "error", "href"} <= set(job["properties"])

"""Jobs on Postgres (issue 15 part 2): the API defers each point to procrastinate and
``partitura worker`` processes run them. Two workers share a sweep; a worker killed with
SIGKILL mid-sweep loses nothing (another runs its point again) and no point completes twice;
cancelling stops the points not yet run. Every test has a fresh database, dropped afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, text
from test_jobs import ASYNC, JOB_TIMEOUT_S, finished, poll, small_sweep

from app.core.db import make_engine
from app.core.migrate import upgrade
from conftest import LiveServer, empty_database, server_settings, start_server

# Heartbeats of the test workers: one a second, so a killed worker is taken for dead after 3 s.
HEARTBEAT_S = 1.0
WORKER_START_TIMEOUT_S = 60.0


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[str]:
    with empty_database("postgres", tmp_path) as url:
        upgrade(url)
        yield url


@pytest.fixture
def engine(postgres: str) -> Iterator[Engine]:
    engine = make_engine(postgres)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def server(postgres: str) -> Iterator[LiveServer]:
    server = start_server(server_settings(postgres))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60.0) as client:
        yield client


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = JOB_TIMEOUT_S, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(interval_s)


def scalar(engine: Engine, sql: str, **params: object) -> object:
    with engine.connect() as connection:
        return connection.execute(text(sql), params).scalar()


def last_worker_id(engine: Engine) -> int:
    """The newest registered worker's id; workers started later get larger ones (a count would
    not do: a starting worker prunes the dead ones)."""
    return int(scalar(engine, "SELECT coalesce(max(id), 0) FROM procrastinate.procrastinate_workers") or 0)


def registered_since(engine: Engine, after_id: int) -> int:
    return int(scalar(engine, "SELECT count(*) FROM procrastinate.procrastinate_workers WHERE id > :after", after=after_id) or 0)


@contextmanager
def workers(url: str, engine: Engine, count: int, log_dir: Path) -> Iterator[list[subprocess.Popen]]:
    """``count`` ``partitura worker`` processes (one point at a time each), each in its own
    process group, registered with the queue before this yields; stopped afterwards."""
    before = last_worker_id(engine)
    env = {**os.environ, "DATABASE_URL": url, "PARTITURA_SOLVER_WORKERS": "1"}
    processes = []
    try:
        for index in range(count):
            log = (log_dir / f"worker-{before}-{index}.log").open("w")
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker", "--concurrency", "1", "--heartbeat-s", str(HEARTBEAT_S)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))
        wait_until(lambda: registered_since(engine, before) >= count, f"{count} workers", WORKER_START_TIMEOUT_S, 0.1)
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def point_rows(engine: Engine, job_id: str) -> list[dict]:
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT position, status, attempts, plan_id, completed_at FROM job_points WHERE job_id = :job ORDER BY position"),
            {"job": job_id},
        )
        return [dict(row._mapping) for row in rows]


def assert_every_point_completed_once(engine: Engine, job: dict, sweep: dict) -> None:
    rows = point_rows(engine, job["id"])
    assert [row["position"] for row in rows] == list(range(job["points_total"]))
    assert all(row["status"] == "succeeded" and row["plan_id"] and row["completed_at"] for row in rows), rows
    assert [p["plan_id"] for p in sweep["points"]] == [row["plan_id"] for row in rows]
    # One stored sweep, one result.
    assert scalar(engine, "SELECT count(*) FROM sweeps") == 1


def test_two_workers_share_a_sweep(postgres, engine, client, tmp_path):
    with workers(postgres, engine, 2, tmp_path):
        response = client.post("/v1/sweeps", json=small_sweep(num_gpus=[2, 4, 8, 16, 32, 64]), headers=ASYNC)
        assert response.status_code == 202, response.text
        job = poll(client, response.headers["location"], finished)
    assert job["status"] == "succeeded", job
    assert job["points_done"] == job["points_total"] == 6
    sweep = client.get(job["result"]["href"]).json()
    assert_every_point_completed_once(engine, job, sweep)
    ran = [log.read_text().count("ended with status: Success") for log in sorted(tmp_path.glob("worker-*.log"))]
    assert sum(ran) >= 6 and all(count > 0 for count in ran), ran


def test_a_killed_worker_loses_nothing(postgres, engine, client, tmp_path):
    response = client.post("/v1/sweeps", json=small_sweep(model="gpt3-1.3b", num_gpus=[8, 16, 32]), headers=ASYNC)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    with workers(postgres, engine, 1, tmp_path) as (doomed,):
        wait_until(lambda: any(row["status"] == "running" for row in point_rows(engine, job_id)), "a point to start")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
    # What the dead worker left: a point running on nobody.
    orphans = [row["position"] for row in point_rows(engine, job_id) if row["status"] == "running"]
    assert orphans, point_rows(engine, job_id)
    with workers(postgres, engine, 1, tmp_path):
        job = poll(client, f"/v1/jobs/{job_id}", finished)
    assert job["status"] == "succeeded", job
    sweep = client.get(job["result"]["href"]).json()
    assert_every_point_completed_once(engine, job, sweep)
    rows = point_rows(engine, job_id)
    for position in orphans:
        assert rows[position]["attempts"] >= 2, rows  # started by the dead worker, then again


def test_cancel_stops_the_remaining_points(postgres, engine, client, tmp_path):
    response = client.post("/v1/sweeps", json=small_sweep(), headers=ASYNC)
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "queued"  # no worker yet
    cancelled = client.delete(job["href"])
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["finished_at"]
    assert client.delete(job["href"]).json()["status"] == "cancelled"  # again: the same answer
    with workers(postgres, engine, 1, tmp_path):
        # The worker takes every deferred point and runs none of them.
        wait_until(
            lambda: scalar(engine, "SELECT count(*) FROM procrastinate.procrastinate_jobs WHERE status IN ('todo', 'doing')") == 0,
            "the queue to drain",
        )
    assert scalar(engine, "SELECT count(*) FROM procrastinate.procrastinate_jobs WHERE status = 'succeeded'") == 4
    after = client.get(job["href"]).json()
    assert after["status"] == "cancelled" and after["points_done"] == 0 and after["result"] is None
    assert all(row["status"] == "cancelled" and row["attempts"] == 0 for row in point_rows(engine, job["id"]))
    assert scalar(engine, "SELECT count(*) FROM plans") == 0

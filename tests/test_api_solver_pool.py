"""The solver pool's bounds: refusal when saturated, and a search that overruns is stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.cli import keep_alive_s
from app.core.solver_pool import RETRY_AFTER_MAX_S, SolverPool, SolverSaturated, SolverUnavailable
from solver.spec.errors import SpecError


def test_saturation_refuses_at_once_and_frees_its_slots():
    pool = SolverPool(workers=1, queue_depth=1, retry_after_s=3)
    try:
        with pool.reserved(2):
            assert pool.in_use == 2
            with pytest.raises(SolverSaturated) as refused:
                pool.run(abs, -3, timeout_s=60)
            assert refused.value.retry_after_s == 3
        assert pool.in_use == 0
        assert pool.run(abs, -3, timeout_s=60) == 3
    finally:
        pool.shutdown()


def test_a_call_past_its_deadline_is_stopped_and_the_pool_recovers():
    pool = SolverPool(workers=1, queue_depth=0, retry_after_s=3)
    try:
        assert pool.run(abs, -1, timeout_s=60) == 1  # the worker is up
        with pytest.raises(SolverUnavailable):
            pool.run(time.sleep, 600, timeout_s=0.5)
        # The overrunning worker was terminated: its slot comes back and new work runs.
        for _ in range(600):
            if pool.in_use == 0:
                break
            time.sleep(0.1)
        assert pool.in_use == 0
        assert pool.run(abs, -7, timeout_s=60) == 7
    finally:
        pool.shutdown()


def test_an_overrunning_search_stops_alone_and_searches_beside_it_finish():
    """Issue 17, defect 1: only the overrunning search's process is stopped; a search running
    beside it returns its result (the old pool terminated every worker, failing both)."""
    pool = SolverPool(workers=2, queue_depth=0, retry_after_s=3)
    try:
        with ThreadPoolExecutor(2) as callers:
            slow = callers.submit(pool.run, time.sleep, 600, timeout_s=1.0)
            time.sleep(0.2)
            steady = callers.submit(pool.run, _sleep_then_return, 3.0, "done", timeout_s=60)
            with pytest.raises(SolverUnavailable):
                slow.result(timeout=120)
            assert steady.result(timeout=120) == "done"
        assert pool.in_use == 0
        assert pool.run(abs, -5, timeout_s=60) == 5
    finally:
        pool.shutdown()


def test_time_waiting_for_a_worker_does_not_count_against_a_deadline():
    """A search queued behind another starts its deadline when it starts: with one worker, a
    0.1 s search given 2 s waits about 3 s for the worker and still returns."""
    pool = SolverPool(workers=1, queue_depth=1, retry_after_s=3)
    try:
        assert pool.run(abs, -1, timeout_s=60) == 1  # the worker is up
        with ThreadPoolExecutor(2) as callers:
            first = callers.submit(pool.run, _sleep_then_return, 3.0, "first", timeout_s=60)
            time.sleep(0.2)
            queued = callers.submit(pool.run, _sleep_then_return, 0.1, "queued", timeout_s=2.0)
            assert first.result(timeout=120) == "first"
            assert queued.result(timeout=120) == "queued"
    finally:
        pool.shutdown()


def test_an_exception_in_a_search_reaches_the_caller_as_itself():
    pool = SolverPool(workers=1, queue_depth=0, retry_after_s=3)
    try:
        with pytest.raises(SpecError) as error:
            pool.run(_raise_spec_error, timeout_s=60)
        assert (error.value.field, error.value.reason) == ("model.hidden_size", "must be positive")
        assert pool.run(abs, -2, timeout_s=60) == 2  # the worker survives an exception
    finally:
        pool.shutdown()


def test_a_worker_exits_when_the_pool_shuts_down():
    pool = SolverPool(workers=1, queue_depth=0, retry_after_s=3)
    assert pool.run(abs, -1, timeout_s=60) == 1
    process = pool._all[0].process
    assert process is not None and process.is_alive()
    pool.shutdown()
    process.join(timeout=10)
    assert not process.is_alive()
    with pytest.raises(SolverUnavailable):
        pool.run(abs, -1, timeout_s=60)


def _sleep_then_return(seconds: float, value: str) -> str:
    time.sleep(seconds)
    return value


def _raise_spec_error() -> None:
    raise SpecError("model.hidden_size", "must be positive")


def test_workers_exit_when_their_server_is_killed(tmp_path):
    """Issue 17, defect 7: after kill -9 of the process that owns the pool, its solver processes
    exit (the end of their pipe closes) instead of living on as orphans, and so does the
    resource tracker multiprocessing started beside them."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import time\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from app.core.solver_pool import SolverPool\n"
        "if __name__ == '__main__':  # spawned workers import this file again\n"
        "    pool = SolverPool(workers=2, queue_depth=0, retry_after_s=1)\n"
        "    with ThreadPoolExecutor(2) as t:\n"
        "        list(t.map(lambda _: pool.run(abs, -1, timeout_s=60), range(2)))\n"
        "    print(' '.join(str(w.process.pid) for w in pool._all), flush=True)\n"
        "    time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parent.parent)
    try:
        worker_pids = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(worker_pids) == 2 and all(_alive(pid) for pid in worker_pids)
        # Every process the owner started: the workers and multiprocessing's resource tracker.
        children = _children(owner.pid)
        assert set(worker_pids) < set(children), children
        worker_pids = children
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in worker_pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in worker_pids)
    finally:
        if owner.poll() is None:
            owner.kill()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if parent == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_retry_after_follows_the_backlog_within_bounds():
    """Issue 17, defect 6: a refused caller is told how long the searches ahead of it take to
    drain (slots in use x mean search time / workers, up to 20% jitter), never less than the
    configured floor nor more than RETRY_AFTER_MAX_S."""
    pool = SolverPool(workers=1, queue_depth=1, retry_after_s=1)
    try:
        assert pool.retry_after() == 1  # no search yet: the floor
        assert pool.run(abs, -1, timeout_s=60) == 1
        assert pool._mean_solve_s > 0  # searches are timed
        pool._mean_solve_s = 0.0
        pool._record_solve(1.0)
        pool._record_solve(2.0)  # running mean 1.0 + 0.3 x (2.0 - 1.0) = 1.3 s
        assert pool._mean_solve_s == pytest.approx(1.3)
        with pool.reserved(2):
            told = {pool.retry_after() for _ in range(200)}
            with pytest.raises(SolverSaturated) as refused:
                pool.run(abs, -1, timeout_s=60)
        assert told <= {3, 4} and refused.value.retry_after_s in (3, 4)  # 2 x 1.3 = 2.6 s, +0-20%
        pool._mean_solve_s = 10_000.0
        with pool.reserved(2):
            assert pool.retry_after() == RETRY_AFTER_MAX_S
    finally:
        pool.shutdown()


def test_the_server_keeps_idle_connections_longer_than_any_retry_after(monkeypatch):
    """Issue 17, defect 6: `partitura serve` (the image's command) gives uvicorn a keep-alive
    longer than the longest Retry-After, not uvicorn's default 5 s."""
    import io

    import uvicorn

    from app.cli import main

    assert keep_alive_s() > RETRY_AFTER_MAX_S
    served: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: served.update(kwargs))
    assert main(["serve", "--port", "8123"], env={}, out=io.StringIO(), err=io.StringIO()) == 0
    assert served["port"] == 8123 and served["timeout_keep_alive"] == keep_alive_s()


def test_an_abandoned_search_is_a_503_with_retry_after_through_http(tmp_path):
    """Issue 17, defect 1: a search the pool abandons (it overran its deadline, here a grace of
    1 ms that a newly spawned solver process cannot meet) answers 503 with Retry-After, never
    500, stores nothing, and the next search runs on a fresh process."""
    import httpx

    from app.core.migrate import upgrade
    from conftest import assert_problem, empty_database, server_settings, start_server

    body = {"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
            "training": {"global_batch_size": 64, "seq_length": 2048}, "top_k": 1}
    with empty_database("sqlite", tmp_path) as url:
        upgrade(url)
        server = start_server(server_settings(
            url, solver_workers=1, solver_queue_depth=0, plan_time_budget_s=0.05, solver_grace_s=0.001,
        ))
        try:
            with httpx.Client(base_url=server.base_url, timeout=120) as client:
                response = client.post("/v1/plans", json=body)
                problem = assert_problem(response, 503)
                assert problem["type"] == "urn:partitura:problem:solver-unavailable"
                assert response.headers["retry-after"].isdigit() and int(response.headers["retry-after"]) >= 1
                assert client.get("/v1/plans").json()["items"] == []
                assert 'partitura_solve_duration_seconds_count{outcome="unavailable"} 1.0' in client.get("/metrics").text
                assert server.app.state.solver_pool.in_use == 0
        finally:
            server.stop()

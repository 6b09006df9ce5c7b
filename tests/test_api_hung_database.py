"""Issue 17, defect 2: a database that accepts connections and never answers. A local listener
plays it (it accepts and reads, and never says a word); the service, pointed at it with a short
database timeout, must answer every request without hanging: liveness at once, everything that
needs the database 503 with Retry-After, readiness 503, metrics without made-up plan counts."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.core.migrate import upgrade
from conftest import empty_database, server_settings, start_server

CONCURRENT = 20
# libpq's connect timeout is at least 2 s; a request that needs the database answers within a
# few of those even behind the others, where it used to hang for minutes.
ANSWER_WITHIN_S = 30.0


def _loopback_listener() -> socket.socket:
    """A TCP listener on a free loopback port whose accept() gives up every 0.2 s (so its
    accepting thread sees a stop request)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    return listener


class SilentDatabase:
    """A TCP listener on a loopback port that accepts connections and never answers."""

    def __init__(self) -> None:
        self.listener = _loopback_listener()
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(connection)  # held open, never answered

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        for connection in self.accepted:
            connection.close()
        self.listener.close()


@pytest.fixture
def hung_api() -> Iterator[tuple[httpx.Client, SilentDatabase]]:
    database = SilentDatabase()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{database.port}/partitura"
    server = start_server(server_settings(url, database_timeout_s=1.0))
    try:
        with httpx.Client(base_url=server.base_url, timeout=120.0) as client:
            yield client, database
    finally:
        server.stop()
        database.stop()


def _timed(client: httpx.Client, method: str, path: str, **kwargs: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = client.request(method, path, **kwargs)
    return response, time.monotonic() - started


def test_a_hung_database_gets_503s_and_never_hangs_the_api(hung_api):
    client, database = hung_api
    requests = [("GET", "/v1/plans"), ("GET", "/v1/catalog/models"), ("GET", "/v1/profiles")] * (CONCURRENT // 3)
    with ThreadPoolExecutor(len(requests)) as clients:
        waiting = [clients.submit(_timed, client, method, path) for method, path in requests]
        time.sleep(0.5)  # the requests hold the thread pool, each waiting on the database
        liveness, liveness_s = _timed(client, "GET", "/healthz")
        answers = [future.result(timeout=120) for future in waiting]
    assert liveness.status_code == 200 and liveness_s < 2.0, liveness_s
    for response, elapsed_s in answers:
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"].isdigit()
        assert response.json()["type"].endswith("database-unavailable")
        assert elapsed_s < ANSWER_WITHIN_S
    assert database.accepted  # the service did try the database


def test_liveness_answers_at_once_while_hung_requests_fill_the_thread_pool():
    """Issue 17, defect 2: /healthz touches neither the database nor the thread pool. 45
    requests (more than the 40 threads FastAPI runs sync endpoints in) each wait several
    seconds on a database that never answers, at the default database timeout; liveness still
    answers at once (a sync /healthz waited for a free thread: seconds, 27 s in the issue)."""
    database = SilentDatabase()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{database.port}/partitura"
    server = start_server(server_settings(url))  # the default 5 s database timeout
    try:
        with httpx.Client(base_url=server.base_url, timeout=120.0) as client, ThreadPoolExecutor(45) as clients:
            waiting = [clients.submit(_timed, client, "GET", "/v1/plans") for _ in range(45)]
            time.sleep(1.0)  # every thread of the pool is taken by a request waiting on the database
            assert not any(future.done() for future in waiting)
            liveness, liveness_s = _timed(client, "GET", "/healthz")
            assert liveness.status_code == 200 and liveness_s < 1.0, liveness_s
            for future in waiting:
                response, elapsed_s = future.result(timeout=120)
                assert response.status_code == 503 and elapsed_s < ANSWER_WITHIN_S, (response.text, elapsed_s)
    finally:
        server.stop()
        database.stop()


def test_readiness_and_metrics_answer_while_the_database_hangs(hung_api):
    client, _ = hung_api
    ready, ready_s = _timed(client, "GET", "/readyz")
    assert ready.status_code == 503 and ready_s < ANSWER_WITHIN_S
    scraped, scraped_s = _timed(client, "GET", "/metrics")
    assert scraped.status_code == 200 and scraped_s < ANSWER_WITHIN_S
    assert re.search(r"^partitura_database_up 0\.0$", scraped.text, re.M)
    assert not re.search(r"^partitura_plans\{", scraped.text, re.M)  # unknown, so not exported


def test_requests_the_database_failed_are_counted(hung_api):
    """Issue 17, defect 9: the 503s a database outage causes are counted, by reason."""
    client, _ = hung_api
    for _ in range(3):
        assert client.get("/v1/plans").status_code == 503
    scraped = client.get("/metrics").text
    assert re.search(r'^partitura_database_errors_total\{reason="unavailable"\} 3\.0$', scraped, re.M), scraped


def test_metrics_say_the_database_is_up_when_it_is(api):
    text = api.get("/metrics").text
    assert re.search(r"^partitura_database_up 1\.0$", text, re.M)
    assert re.search(r'^partitura_plans\{status="succeeded"\} \d+', text, re.M)


class FreezingProxy:
    """A TCP proxy on a loopback port in front of a real database that can be frozen: while
    frozen it keeps every connection open and passes nothing on, as a database does whose
    process stopped answering after the service had connected (the pool's connections then
    hang where a fresh connection would time out)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = threading.Event()
        self.stopped = threading.Event()
        self.listener = _loopback_listener()
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                sink.close()
                return
            while self.frozen.is_set() and not self.stopped.is_set():
                time.sleep(0.02)
            try:
                sink.sendall(data)
            except OSError:
                return

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()
        for connection in self.sockets:
            connection.close()


@pytest.fixture
def frozen_database(tmp_path) -> Iterator[tuple[httpx.Client, FreezingProxy]]:
    """The service on a migrated Postgres database behind a FreezingProxy (not yet frozen)."""
    with empty_database("postgres", tmp_path) as url:
        upgrade(url)
        proxy = FreezingProxy(make_url(url).port or 5432)
        proxied = make_url(url).set(port=proxy.port).render_as_string(hide_password=False)
        server = start_server(server_settings(proxied, database_timeout_s=1.0))
        try:
            with httpx.Client(base_url=server.base_url, timeout=120.0) as client:
                yield client, proxy
        finally:
            proxy.frozen.clear()  # let what still waits on the database finish
            server.stop()
            proxy.stop()


def test_readiness_and_metrics_answer_when_the_database_stops_answering_its_connections(frozen_database):
    """Issue 17, defect 2: /readyz and /metrics probe with a short timeout. A database that
    stops answering after the service connected used to hang them for good: each took a pooled
    connection whose next message never came back (the server-side statement timeout cannot
    fire in a server that does not run). They probe on a fresh connection of their own, in a
    thread of their own, and answer within their timeout whatever the probe does."""
    client, proxy = frozen_database
    for _ in range(2):  # the service's pool holds connections to the database
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/plans").status_code == 200
        assert re.search(r"^partitura_database_up 1\.0$", client.get("/metrics").text, re.M)
    proxy.frozen.set()
    for _ in range(3):  # again and again: a probe still stuck does not hold up the next answer
        ready, ready_s = _timed(client, "GET", "/readyz", timeout=30.0)
        assert ready.status_code == 503 and ready_s < 5.0, (ready.text, ready_s)
        assert ready.json()["type"].endswith("not-ready")
        scraped, scraped_s = _timed(client, "GET", "/metrics", timeout=30.0)
        assert scraped.status_code == 200 and scraped_s < 5.0, scraped_s
        assert re.search(r"^partitura_database_up 0\.0$", scraped.text, re.M)
        assert not re.search(r"^partitura_plans\{", scraped.text, re.M)
        assert _timed(client, "GET", "/healthz", timeout=30.0)[1] < 1.0
    proxy.frozen.clear()
    deadline = time.monotonic() + 30
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "readiness did not come back with the database"
        time.sleep(0.2)
    assert re.search(r"^partitura_database_up 1\.0$", client.get("/metrics").text, re.M)


def test_a_statement_the_database_does_not_finish_is_cancelled_and_a_503(tmp_path):
    """Issue 17, defect 2: statements have a timeout. A query stuck behind a lock another
    session holds (here an ACCESS EXCLUSIVE lock on the plans table) is cancelled by Postgres
    after the statement timeout (6 x the 1 s database timeout) and answered 503 with
    Retry-After, instead of waiting as long as the lock is held."""
    from sqlalchemy import create_engine, text

    with empty_database("postgres", tmp_path) as url:
        upgrade(url)
        server = start_server(server_settings(url, database_timeout_s=1.0))
        locker = create_engine(url)
        try:
            with httpx.Client(base_url=server.base_url, timeout=120.0) as client, locker.connect() as holder:
                assert client.get("/v1/plans").status_code == 200
                holder.execute(text("LOCK TABLE plans IN ACCESS EXCLUSIVE MODE"))  # held until rollback
                try:
                    response, elapsed_s = _timed(client, "GET", "/v1/plans", timeout=30.0)
                finally:
                    holder.rollback()
                assert response.status_code == 503, response.text
                assert response.headers["retry-after"].isdigit()
                assert response.json()["type"].endswith("database-unavailable")
                assert 5.0 < elapsed_s < 15.0, elapsed_s
                assert client.get("/v1/plans").status_code == 200
        finally:
            locker.dispose()
            server.stop()


def test_a_request_on_a_connection_the_database_stopped_answering_is_a_503(frozen_database):
    """Issue 17, defect 2: a database that stops answering on connections the service already
    holds must not hang requests either. The statement timeout is the server's, which no longer
    runs; the service's own deadline on each database call (7 x the database timeout: past the
    server's statement timeout, so it never cuts a call a live server would answer) closes
    the connection, and the request is a 503 with Retry-After instead of waiting for good."""
    client, proxy = frozen_database
    for _ in range(2):
        assert client.get("/v1/plans").status_code == 200
    proxy.frozen.set()
    response, elapsed_s = _timed(client, "GET", "/v1/plans", timeout=60.0)
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"].isdigit()
    assert elapsed_s < 20.0, elapsed_s
    proxy.frozen.clear()
    deadline = time.monotonic() + 30
    while client.get("/v1/plans").status_code != 200:
        assert time.monotonic() < deadline, "the service did not recover with the database"
        time.sleep(0.2)


def test_the_client_deadline_never_cuts_a_call_a_live_database_answers(tmp_path):
    """The client's deadline on database calls (app.core.db_deadlines) comes after the server's
    statement timeout: a slow statement the server finishes is answered, one it cancels is its
    error (not a cut connection), and a call that failed leaves no deadline behind to cut the
    connection later while it idles or serves the next call."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from app.core.db import make_engine

    with empty_database("postgres", tmp_path) as url:
        engine = make_engine(url, timeout_s=0.3)  # statement timeout 1.8 s, client deadline 2.1 s
        try:
            with engine.connect() as connection:
                backend = connection.execute(text("SELECT pg_backend_pid()")).scalar()
                assert connection.execute(text("SELECT pg_sleep(1.5), 1")).one()[1] == 1
                with pytest.raises(OperationalError) as cancelled:
                    connection.execute(text("SELECT pg_sleep(10)"))
                assert "statement timeout" in str(cancelled.value)
                connection.rollback()
                time.sleep(2.5)  # idle past any deadline the failed call could have left
                assert connection.execute(text("SELECT pg_backend_pid()")).scalar() == backend
                connection.commit()
        finally:
            engine.dispose()


def _queue_runner(url: str, queue_url: str):
    from app.core.db import make_engine, make_sessionmaker
    from app.jobs.runner import QueueRunner

    engine = make_engine(url, timeout_s=1.0)
    return engine, QueueRunner(queue_url, make_sessionmaker(engine), timeout_s=1.0)


def _timed_submit(runner, job_id: str) -> tuple[object, float]:
    from app.core.problems import Problem

    started = time.monotonic()
    try:
        runner.submit(job_id, [0, 1])
    except Problem as problem:
        return problem, time.monotonic() - started
    return None, time.monotonic() - started


def test_the_job_queue_has_the_same_deadlines_as_the_service(tmp_path):
    """Issue 17, defect 2, for the job queue (jobs on Postgres defer their points to
    procrastinate on connections of its own). A queue database that stops answering on the
    connection the API process already holds used to hold the request that deferred for good;
    one that accepts connections and never answers held it for psycopg_pool's 30 s. Both now
    fail the submission with the service's 503 (Retry-After) within the database deadlines, and
    the queue takes points again once the database answers."""
    with empty_database("postgres", tmp_path) as url:
        upgrade(url)
        proxy = FreezingProxy(make_url(url).port or 5432)
        proxied = make_url(url).set(port=proxy.port).render_as_string(hide_password=False)
        engine, runner = _queue_runner(url, proxied)
        try:
            assert _timed_submit(runner, "job-before")[0] is None  # the queue's connection is open
            proxy.frozen.set()
            problem, elapsed_s = _timed_submit(runner, "job-frozen")
            assert problem is not None and problem.status == 503 and "Retry-After" in problem.headers
            assert elapsed_s < 15.0, elapsed_s  # 7 x the 1 s timeout, then the watcher
            proxy.frozen.clear()
            deadline = time.monotonic() + 30
            while _timed_submit(runner, "job-after")[0] is not None:
                assert time.monotonic() < deadline, "the queue did not recover with the database"
                time.sleep(0.2)
            with engine.connect() as connection:
                from sqlalchemy import text

                deferred = connection.execute(text(
                    "SELECT args->>'job_id', count(*) FROM procrastinate.procrastinate_jobs GROUP BY 1 ORDER BY 1")).all()
            assert dict(deferred)["job-before"] == 2 and dict(deferred)["job-after"] == 2
        finally:
            proxy.frozen.clear()
            runner.shutdown()
            engine.dispose()
            proxy.stop()

        silent = SilentDatabase()
        engine, runner = _queue_runner(url, f"postgresql+psycopg://postgres@127.0.0.1:{silent.port}/partitura")
        try:
            problem, elapsed_s = _timed_submit(runner, "job-silent")
            assert problem is not None and problem.status == 503
            assert elapsed_s < 10.0, elapsed_s
        finally:
            runner.shutdown()
            engine.dispose()
            silent.stop()

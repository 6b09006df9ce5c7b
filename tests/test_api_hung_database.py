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

from conftest import server_settings, start_server

CONCURRENT = 20
# libpq's connect timeout is at least 2 s; a request that needs the database answers within a
# few of those even behind the others, where it used to hang for minutes.
ANSWER_WITHIN_S = 30.0


class SilentDatabase:
    """A TCP listener on a loopback port that accepts connections and never answers."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
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

"""`make run` as the README says it, on a free port, sent the README's curl examples as plain
HTTP calls."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
from pathlib import Path

import httpx

from conftest import free_port, stop_process_group

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 600  # make run installs the pinned dependencies if .venv is not current


def readme_post_examples() -> list[tuple[str, dict]]:
    """The README's ``curl -X POST URL -d '{...}'`` examples as (path, body)."""
    text = (REPO / "README.md").read_text()
    pattern = r"curl -s -X POST http://127\.0\.0\.1:8000(\S+) -H 'content-type: application/json' -d '(\{.*?\})'"
    return [(path, json.loads(body)) for path, body in re.findall(pattern, text, flags=re.DOTALL)]


def test_make_run_serves_the_readme_examples(tmp_path):
    port = free_port()
    env = dict(os.environ, PORT=str(port), DATABASE_URL=f"sqlite:///{tmp_path / 'make-run.db'}")
    server = subprocess.Popen(
        ["make", "run"], cwd=REPO, env=env, start_new_session=True,
        stdout=open(tmp_path / "make-run.log", "w"), stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert server.poll() is None, (tmp_path / "make-run.log").read_text()
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "make-run.log").read_text()
            time.sleep(0.25)

        # Idle connections outlive uvicorn's default 5 s keep-alive (the old Retry-After), so a
        # client that waits as told reuses its connection (issue 17, defect 6).
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/healthz")
        assert connection.getresponse().read() and connection.sock is not None
        first_socket = connection.sock
        time.sleep(6.5)
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200 and connection.sock is first_socket
        connection.close()

        examples = readme_post_examples()
        assert [path for path, _ in examples] == ["/v1/plans", "/v1/evaluations"]
        body = examples[0][1]
        created = httpx.post(f"{base}/v1/plans", json=body, timeout=300)
        assert created.status_code == 201, created.text
        location = created.headers["location"]
        fetched = httpx.get(f"{base}{location}", timeout=30)
        assert fetched.status_code == 200
        assert fetched.json()["id"] == created.json()["id"]
        assert fetched.json()["status"] == "succeeded"
        assert fetched.json()["request"]["top_k"] == body["top_k"]
        assert httpx.post(f"{base}/v1/plans", json=body, timeout=300).status_code == 200
        evaluation = httpx.post(f"{base}/v1/evaluations", json=examples[1][1], timeout=60)
        assert evaluation.status_code == 200 and evaluation.json()["feasible"] is True
        assert (tmp_path / "make-run.db").exists()
    finally:
        stop_process_group(server)

"""`make run` as the README says it, on a free port, planned against through plain HTTP calls."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from conftest import free_port

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 600  # make run installs the pinned dependencies if .venv is not current


def test_make_run_serves_plans(tmp_path):
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

        body = {
            "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1",
            "training": {"global_batch_size": 64, "seq_length": 2048}, "top_k": 2,
        }
        created = httpx.post(f"{base}/v1/plans", json=body, timeout=300)
        assert created.status_code == 201, created.text
        location = created.headers["location"]
        fetched = httpx.get(f"{base}{location}", timeout=30)
        assert fetched.status_code == 200
        assert fetched.json()["id"] == created.json()["id"]
        assert fetched.json()["status"] == "succeeded"
        assert httpx.post(f"{base}/v1/plans", json=body, timeout=300).status_code == 200
        assert (tmp_path / "make-run.db").exists()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

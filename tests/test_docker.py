"""The Docker image without a Docker engine: the Dockerfile's shape, and its install and start
commands run for real in a fresh virtual environment laid out like the image."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import free_port, stop_process_group

REPO = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 900
START_TIMEOUT_S = 60


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_dockerfile_shape():
    args = {rest.split("=", 1)[0]: rest.split("=", 1)[1] for keyword, rest in instructions() if keyword == "ARG"}
    build, runtime = stages()
    for stage in (build, runtime):
        base = stage[0][1].split()[0]
        assert "slim" in args.get(base.strip("${}"), base)
    final = dict(runtime)
    assert final["USER"] not in ("root", "0")
    cmd = json.loads(final["CMD"])
    assert cmd[:2] == ["partitura", "serve"]
    entrypoint = json.loads(final["ENTRYPOINT"])
    assert entrypoint[:2] == ["tini", "--"]  # an init reaps the solver processes (issue 17)
    assert any("install" in rest and "tini" in rest for keyword, rest in runtime if keyword == "RUN")  # from Debian
    assert "partitura db upgrade" in " ".join(entrypoint) and "exec" in " ".join(entrypoint)
    build_runs = " ".join(rest for keyword, rest in build if keyword == "RUN")
    assert "--require-hashes -r requirements.lock" in build_runs and "--no-deps" in build_runs
    healthcheck = final["HEALTHCHECK"]
    probe = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert probe[0] == "python" and "/healthz" in probe[-1]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "*.db"} <= set(ignored)


def _translate(value: str, paths: dict[str, Path]) -> str:
    for image_path, local in paths.items():
        value = re.sub(rf"(?<![\w/]){re.escape(image_path)}(?=/|$|\b)", str(local), value)
        value = value.replace(f"//{image_path}", f"//{local}")
    return value


def _copy_into(stage: list[tuple[str, str]], workdir: Path) -> None:
    """The stage's COPY instructions from the repository (the build context) into workdir."""
    for keyword, rest in stage:
        if keyword != "COPY" or rest.startswith("--from"):
            continue
        *sources, destination = rest.split()
        target = workdir / destination
        for source in sources:
            origin = REPO / source
            if origin.is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(origin, target, ignore=ignore, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)


def test_image_install_and_start_sequence(tmp_path):
    """Run the build stage's RUN commands and the runtime's ENTRYPOINT + CMD + HEALTHCHECK with
    the image's paths mapped into tmp_path (/opt/venv, /src, /app, /data)."""
    paths = {"/opt/venv": tmp_path / "venv", "/src": tmp_path / "src", "/app": tmp_path / "app", "/data": tmp_path / "data"}
    for path in paths.values():
        if path.name != "venv":
            path.mkdir()
    build, runtime = stages()

    _copy_into(build, paths["/src"])
    for keyword, rest in build:
        if keyword != "RUN":
            continue
        command = re.sub(r"--mount=\S+\s*", "", rest)
        command = _translate(command.replace("python -m venv", f"{sys.executable} -m venv"), paths)
        result = subprocess.run(
            command, shell=True, cwd=paths["/src"], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert (paths["/opt/venv"] / "bin" / "partitura").exists()

    _copy_into(runtime, paths["/app"])
    port = free_port()
    env = {key: _translate(value, paths) for key, value in env_of(runtime).items()}
    env["PATH"] = f"{paths['/opt/venv'] / 'bin'}:{os.environ['PATH']}"
    env.update(HOST="127.0.0.1", PORT=str(port), HOME=str(tmp_path))
    final = dict(runtime)
    command = json.loads(final["ENTRYPOINT"]) + json.loads(final["CMD"])
    if shutil.which("tini") is None:  # the image's init; .ci/image-check runs the image itself with it
        command = command[2:]
    server = subprocess.Popen(command, cwd=paths["/app"], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the image's command did not start serving"
            time.sleep(0.2)
        healthcheck = final["HEALTHCHECK"]
        probe = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
        probe[0] = str(paths["/opt/venv"] / "bin" / probe[0])
        assert subprocess.run(probe, env=env, timeout=30).returncode == 0
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text  # the migrations ran at start
        assert (paths["/data"] / "partitura.db").exists()
    finally:
        stop_process_group(server)

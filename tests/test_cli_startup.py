"""`partitura plan` starts fast and prints what the API answers (issue 17): without ``--db`` it
plans without a database (neither SQLAlchemy nor FastAPI is loaded) and prints the document the
service would store; the other commands' scratch database is copied from a migrated one cached
per set of migrations; the document is the API's JSON."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app import cli
from app.core import migrate
from app.core.migration_files import migrations_digest, migrations_dir
from conftest import server_settings, start_server

PLAN = {
    "model": "gpt3-350m",
    "cluster": "dgx-a100-80gb-x1",
    "training": {"global_batch_size": 64, "seq_length": 2048},
    "constraints": {"tp_size": [1, 2]},
    "top_k": 2,
}
EVALUATION = {
    "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 64, "seq_length": 2048},
    "parallel": {"dp_size": 8, "tp_size": 1, "micro_batch_size": 1},
}
# Search statistics that measure this run, not the plan.
TIMINGS = {"wall_time_s", "cpu_time_s"}
# What a plan without a database never needs (each costs start-up time).
HEAVY_MODULES = (
    "alembic", "sqlalchemy", "fastapi", "starlette", "uvicorn", "psycopg", "procrastinate", "prometheus_client",
    "multiprocessing", "profiler.cli", "torch",
)


def run(argv: list[str], env: dict[str, str] | None = None, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, env=env or {}, out=out, err=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_plan_prints_the_document_the_api_answers(tmp_path):
    """Every field, created_at's format included, as GET /v1/plans/{id} answers the stored plan."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {"DATABASE_URL": url}
    assert run(["db", "upgrade"], env=env)[0] == 0
    code, out, err = run(["plan", "-", "--db"], env=env, stdin=json.dumps(PLAN))
    assert code == 0, err
    printed = json.loads(out)
    server = start_server(server_settings(url))
    try:
        answered = httpx.get(f"{server.base_url}/v1/plans/{printed['id']}", timeout=60)
    finally:
        server.stop()
    assert answered.status_code == 200, answered.text
    assert printed["created_at"] == answered.json()["created_at"]
    assert printed["created_at"].endswith("Z") and "T" in printed["created_at"]
    assert printed == answered.json()


def test_the_scratch_database_is_migrated_once_and_copied(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = run(["evaluate", "-"], stdin=json.dumps(EVALUATION))
    assert first[0] == 0, first[2]
    templates = list((tmp_path / "cache" / "partitura").glob("scratch-*.db"))
    assert len(templates) == 1 and not list((tmp_path / "cache" / "partitura").glob("*.tmp"))

    def no_migrations(*args: object) -> None:
        raise AssertionError("the cached scratch database was migrated again")

    monkeypatch.setattr(migrate, "upgrade", no_migrations)
    second = run(["evaluate", "-"], stdin=json.dumps(EVALUATION))
    assert second[0] == 0, second[2]
    assert json.loads(second[1]) == json.loads(first[1])


def _without_timings(plan: dict) -> dict:
    return {**plan, "search": {k: v for k, v in plan["search"].items() if k not in TIMINGS}}


@pytest.mark.parametrize("request_body", [
    PLAN,
    # A choosing request: the batch size from the critical batch (issue 15), its table stored beside the plan.
    {**PLAN, "objective": "min_time_to_train", "critical_batch": {"min_tokens": 2e9, "noise_scale_tokens": 2e5}},
], ids=["plain", "critical-batch"])
def test_plan_without_a_database_is_the_plan_the_service_stores(request_body, tmp_path):
    """Without --db the plan is computed without a database; every field but its new id and
    creation time (and the search's own timings) equals what --db stores and answers."""
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    assert run(["db", "upgrade"], env=env)[0] == 0
    code, stored, err = run(["plan", "-", "--db"], env=env, stdin=json.dumps(request_body))
    assert code == 0, err
    code, unstored, err = run(["plan", "-"], stdin=json.dumps(request_body))
    assert code == 0, err
    stored_plan, unstored_plan = json.loads(stored), json.loads(unstored)
    assert unstored_plan["id"] != stored_plan["id"]
    assert unstored_plan["created_at"].endswith("Z")
    for plan in (stored_plan, unstored_plan):
        del plan["id"], plan["created_at"]
    assert _without_timings(unstored_plan) == _without_timings(stored_plan)
    assert unstored_plan["status"] == "succeeded" and unstored_plan["candidates"]


def test_plan_without_a_database_has_no_measured_profiles():
    code, _, err = run(["plan", "-"], stdin=json.dumps({**PLAN, "profile_id": "0123456789abcdef"}))
    assert code == 2
    problem = json.loads(err)
    assert problem["errors"][0]["field"] == "body.profile_id"
    assert "--db" in problem["errors"][0]["reason"]


def test_without_a_writable_cache_the_scratch_database_is_migrated_in_place(tmp_path, monkeypatch):
    (tmp_path / "not-a-directory").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-directory"))
    code, out, err = run(["plan", "-"], stdin=json.dumps(PLAN))
    assert code == 0, err
    assert json.loads(out)["status"] == "succeeded"


def test_a_changed_migration_is_a_new_scratch_database(tmp_path):
    copy = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = migrations_digest(copy)
    assert migrations_digest(copy) == before
    version = sorted((copy / "versions").glob("*.py"))[-1]
    version.write_text(version.read_text() + "\n# edited\n")
    assert migrations_digest(copy) != before
    (copy / "versions" / "zz_new.py").write_text("")
    assert len({before, migrations_digest(copy)}) == 2


@pytest.mark.parametrize("command", [["plan", "-"], ["evaluate", "-"]])
def test_start_up_loads_no_alembic_once_cached(command, tmp_path):
    """In a fresh interpreter, a second plan or evaluation imports neither Alembic nor a
    migration; a plan without --db imports none of the service's modules (SQLAlchemy, FastAPI,
    the server, the database drivers, the job queue, metrics, the solver pool's processes) nor the
    profiler."""
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    body = PLAN if command[0] == "plan" else EVALUATION
    probe = (
        "import sys; from app import cli; code = cli.main(sys.argv[1:]);"
        f"print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules),"
        " file=sys.stderr); sys.exit(code)"
    )
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe, *command], input=json.dumps(body), env=env,
                              capture_output=True, text=True, timeout=120, cwd=Path(cli.__file__).parents[1])
        assert done.returncode == 0, done.stderr
    loaded = done.stderr.strip().splitlines()[-1]
    assert loaded == ("[]" if command[0] == "plan" else "['sqlalchemy']")


def test_the_program_ends_after_a_plan_without_its_teardown(tmp_path):
    """`partitura plan` (main() on the process's own arguments) ends the process once its output
    is written, skipping the interpreter's teardown and so its exit handlers; what it printed
    arrives whole and the exit code is the command's, the plan's and an invalid request's. With
    --db (a database to close) and in-process calls it returns as any command does."""
    probe = (
        "import atexit, sys; atexit.register(print, 'teardown', file=sys.stderr);"
        "from app import cli; sys.exit(cli.main())"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def program(body: dict, *options: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", probe, "plan", "-", *options], input=json.dumps(body), env=env,
                              capture_output=True, text=True, timeout=120, cwd=Path(cli.__file__).parents[1])

    planned = program(PLAN)
    assert planned.returncode == 0, planned.stderr
    assert "teardown" not in planned.stderr
    code, in_process, err = run(["plan", "-"], stdin=json.dumps(PLAN))
    assert code == 0, err
    printed, expected = json.loads(planned.stdout), json.loads(in_process)
    for plan in (printed, expected):
        del plan["id"], plan["created_at"]
    assert _without_timings(printed) == _without_timings(expected)

    refused = program({**PLAN, "top_k": 0})
    assert refused.returncode == 2
    assert "teardown" not in refused.stderr
    assert json.loads(refused.stderr)["errors"][0]["field"] == "body.top_k"

    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    assert run(["db", "upgrade"], env=env)[0] == 0
    stored = program(PLAN, "--db")
    assert stored.returncode == 0, stored.stderr
    assert stored.stderr.strip().splitlines()[-1] == "teardown"

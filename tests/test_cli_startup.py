"""`partitura plan` starts fast and prints what the API answers (issue 17): the scratch database
is copied from a migrated one cached per set of migrations, and the document is the API's JSON."""

from __future__ import annotations

import io
import json
import shutil
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
    first = run(["plan", "-"], stdin=json.dumps(PLAN))
    assert first[0] == 0, first[2]
    templates = list((tmp_path / "cache" / "partitura").glob("scratch-*.db"))
    assert len(templates) == 1 and not list((tmp_path / "cache" / "partitura").glob("*.tmp"))

    def no_migrations(*args: object) -> None:
        raise AssertionError("the cached scratch database was migrated again")

    monkeypatch.setattr(migrate, "upgrade", no_migrations)
    second = run(["plan", "-"], stdin=json.dumps(PLAN))
    assert second[0] == 0, second[2]
    # A scratch database each time: the same request is planned afresh, not found stored.
    assert json.loads(second[1])["id"] != json.loads(first[1])["id"]
    assert json.loads(second[1])["candidates"] == json.loads(first[1])["candidates"]


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
    """In a fresh interpreter, a second plan or evaluation imports neither Alembic nor a migration."""
    import subprocess
    import sys

    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    body = PLAN if command[0] == "plan" else {
        "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 64, "seq_length": 2048},
        "parallel": {"dp_size": 8, "tp_size": 1, "micro_batch_size": 1},
    }
    probe = (
        "import sys; from app import cli; code = cli.main(sys.argv[1:]);"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'), file=sys.stderr); sys.exit(code)"
    )
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe, *command], input=json.dumps(body), env=env,
                              capture_output=True, text=True, timeout=120, cwd=Path(cli.__file__).parents[1])
        assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"

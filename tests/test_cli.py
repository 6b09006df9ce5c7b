"""The ``partitura`` command: the same JSON in and out as the API, without a server."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli
from app.core.migrate import head_revision
from profiler import cli as profiler_cli

EVALUATION = {
    "model": "gpt3-1.3b",
    "cluster": "dgx-a100-80gb-x1",
    "training": {"global_batch_size": 512, "seq_length": 2048},
    "parallel": {"dp_size": 2, "tp_size": 4, "micro_batch_size": 2, "zero_stage": 1, "recompute": "selective"},
}


def run(argv: list[str], env: dict[str, str] | None = None, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, env=env or {}, out=out, err=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_catalog_list_and_show():
    code, out, _ = run(["catalog", "gpus"])
    assert code == 0
    names = [entry["name"] for entry in json.loads(out)["items"]]
    assert "h100-sxm5-80gb" in names
    code, out, _ = run(["catalog", "models", "llama2-70b"])
    assert code == 0
    assert json.loads(out)["num_kv_heads"] == 8


def test_unknown_catalog_entry_is_a_problem_on_stderr():
    code, out, err = run(["catalog", "models", "llama2-7"])
    assert (code, out) == (2, "")
    problem = json.loads(err)
    assert problem["status"] == 404 and "llama2-7b" in problem["suggestions"]


def test_evaluate_from_a_file_and_from_stdin(tmp_path):
    path = tmp_path / "evaluation.json"
    path.write_text(json.dumps(EVALUATION))
    code, from_file, _ = run(["evaluate", str(path)])
    assert code == 0
    code, from_stdin, _ = run(["evaluate", "-"], stdin=json.dumps(EVALUATION))
    assert code == 0
    assert json.loads(from_file) == json.loads(from_stdin)
    result = json.loads(from_file)
    assert result["feasible"] is True
    assert result["prediction"]["tokens_per_s"] == pytest.approx(512 * 2048 / result["prediction"]["step_time_s"])


def test_evaluate_invalid_input_names_the_field():
    bad = EVALUATION | {"parallel": {"dp_size": "two"}}
    code, out, err = run(["evaluate", "-"], stdin=json.dumps(bad))
    assert (code, out) == (2, "")
    assert json.loads(err)["errors"][0]["field"] == "body.parallel.dp_size"
    code, _, err = run(["evaluate", "-"], stdin="{not json")
    assert code == 2 and json.loads(err)["errors"][0]["field"] == "body"


def test_missing_input_file_is_an_error_not_a_traceback(tmp_path):
    code, _, err = run(["evaluate", str(tmp_path / "missing.json")])
    assert code == 1 and "missing.json" in err


def test_db_upgrade_and_downgrade(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    code, out, _ = run(["db", "upgrade"], env=env)
    assert code == 0 and json.loads(out)["database_revision"] == head_revision()
    code, out, _ = run(["db", "downgrade", "base"], env=env)
    assert code == 0 and json.loads(out)["database_revision"] is None
    code, out, _ = run(["db", "current"], env=env)
    assert json.loads(out) == {"database_revision": None, "head": head_revision()}


def test_an_unmigrated_database_is_reported_not_a_traceback(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}"}
    code, out, err = run(["catalog", "models", "--db"], env=env)
    assert (code, out) == (1, "") and "partitura db upgrade" in err


def test_bad_settings_are_reported(tmp_path):
    code, _, err = run(["catalog", "gpus"], env={"PARTITURA_SOLVER_WORKERS": "many"})
    assert code == 1 and "PARTITURA_SOLVER_WORKERS" in err


def test_the_profiler_commands_are_registered_and_answer_with_their_handler(monkeypatch):
    for command in ("profile", "compare-profile", "calibrate", "gemm-shapes", "import-pipedream"):
        assert command in cli.build_parser().format_help()
    monkeypatch.setattr(profiler_cli, "run_compare", lambda args: 40 + len(args.cluster))
    assert run(["compare-profile", "measured.json", "--cluster", "ab"])[0] == 42


def test_installed_console_script():
    script = Path(sys.executable).parent / "partitura"
    assert script.exists(), "make install puts the partitura console script in the venv"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("serve", "db", "plan", "evaluate", "catalog"):
        assert command in result.stdout


PLAN = {
    "model": "gpt3-350m",
    "cluster": "dgx-a100-80gb-x1",
    "training": {"global_batch_size": 64, "seq_length": 2048},
    "constraints": {"tp_size": [1, 2]},
    "top_k": 2,
}


def test_plan_from_stdin_gives_the_api_document():
    code, out, err = run(["plan", "-"], stdin=json.dumps(PLAN))
    assert code == 0, err
    plan = json.loads(out)
    assert plan["status"] == "succeeded"
    assert plan["best"] == plan["candidates"][0]
    assert plan["best"]["parallel"]["tp_size"] in (1, 2)
    assert plan["request"]["top_k"] == 2 and plan["versions"]["ortools"]


def test_plan_with_db_stores_the_plan_once(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    assert run(["db", "upgrade"], env=env)[0] == 0
    first = json.loads(run(["plan", "-", "--db"], env=env, stdin=json.dumps(PLAN))[1])
    second = json.loads(run(["plan", "-", "--db"], env=env, stdin=json.dumps(PLAN))[1])
    assert first["id"] == second["id"]


def test_plan_input_errors_name_the_field():
    code, _, err = run(["plan", "-"], stdin=json.dumps(PLAN | {"constraints": {"tp_size": 0}}))
    assert code == 2
    assert json.loads(err)["errors"][0]["field"] == "body.constraints.tp_size"

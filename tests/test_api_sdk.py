"""A Python SDK generated from the live /openapi.json with openapi-python-client, installed in a
temporary venv, creates and fetches a plan against a running server, and reads its results as
typed model classes (``plan.best.parallel.tp_size``), not dicts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

GENERATOR = "openapi-python-client==0.29.1"
STEP_TIMEOUT_S = 600


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=STEP_TIMEOUT_S)
    return path / "bin"


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_generated_client_creates_and_fetches_a_plan(live_server, tmp_path):
    spec_path = tmp_path / "openapi.json"
    spec_path.write_text(httpx.get(f"{live_server.base_url}/openapi.json", timeout=30).text)

    generator = _venv(tmp_path / "generator-venv")
    _run([str(generator / "pip"), "install", "--quiet", GENERATOR])
    _run(
        [str(generator / "openapi-python-client"), "generate", "--path", str(spec_path),
         "--output-path", str(tmp_path / "sdk"), "--meta", "setup"],
    )
    client_venv = _venv(tmp_path / "client-venv")
    _run([str(client_venv / "pip"), "install", "--quiet", str(tmp_path / "sdk")])

    script = textwrap.dedent(
        """
        import json, sys
        from partitura_client import Client
        from partitura_client.api.plans import create_plan, get_plan, list_plans
        from partitura_client.api.catalog import get_model
        from partitura_client.models import PlanRequest

        client = Client(base_url=sys.argv[1], timeout=300)
        body = PlanRequest.from_dict({
            "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
            "training": {"global_batch_size": 64, "seq_length": 2048},
            "constraints": {"tp_size": [1, 2]}, "top_k": 2,
        })
        created = create_plan.sync_detailed(client=client, body=body)
        plan = created.parsed
        fetched = get_plan.sync(plan.id, client=client)
        page = list_plans.sync(client=client, model="gpt3-350m", limit=5)
        model = get_model.sync("gpt3-350m", client=client)
        refused = create_plan.sync_detailed(client=client, body=PlanRequest.from_dict({
            "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 64, "seq_length": 2048},
            "top_k": 0,
        }))
        infeasible = create_plan.sync(client=client, body=PlanRequest.from_dict({
            "model": "gpt3-175b", "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 64, "seq_length": 2048},
            "top_k": 1,
        }))
        best, explanation = fetched.best, infeasible.explanation
        stage, miss = best.stages[0], explanation.closest_miss
        value = lambda enum: str(enum.value if hasattr(enum, "value") else enum)
        print(json.dumps({
            "status_code": int(created.status_code), "id": plan.id, "status": value(plan.status),
            "fetched_id": fetched.id, "best_tp": best.parallel.tp_size,
            "listed": [item.id for item in page.items], "num_layers": model.num_layers, "builtin": model.builtin,
            "refused": [int(refused.status_code), refused.parsed.errors[0].field, refused.parsed.status],
            "classes": {
                "candidate": type(best).__name__, "parallel": type(best.parallel).__name__,
                "prediction": type(best.prediction).__name__, "breakdown_s": type(best.prediction.breakdown_s).__name__,
                "memory": type(best.memory).__name__, "breakdown_gib": type(best.memory.breakdown_gib).__name__,
                "per_stage": type(best.memory.per_stage[0]).__name__, "stage": type(stage).__name__,
                "search": type(fetched.search).__name__, "explanation": type(explanation).__name__,
                "closest_miss": type(miss).__name__, "suggestion": [type(s).__name__ for s in explanation.suggestions][:1],
                "snapshot": type(fetched.catalog_snapshot.model.entry).__name__,
            },
            "best": [best.parallel.dp_size * best.parallel.tp_size * best.parallel.pp_size, best.prediction.tokens_per_s > 0],
            "stage": [stage.stage, stage.num_layers, len(stage.layers), stage.breakdown_gib.weights > 0],
            "search": [fetched.search.configurations_evaluated > 0, fetched.search.timed_out],
            "infeasible": [value(infeasible.status), infeasible.best, explanation.binding_constraint, miss.fits,
                           miss.peak_gib > miss.usable_gib, miss.parallel.tp_size],
        }))
        """
    )
    (tmp_path / "use_sdk.py").write_text(script)
    result = _run([str(client_venv / "python"), str(tmp_path / "use_sdk.py"), live_server.base_url], cwd=tmp_path)
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["status_code"] in (200, 201)
    assert outcome["status"] == "succeeded"
    assert outcome["fetched_id"] == outcome["id"]
    assert outcome["best_tp"] in (1, 2)
    assert outcome["id"] in outcome["listed"]
    assert outcome["num_layers"] == 24 and outcome["builtin"] is True
    assert outcome["refused"] == [422, "body.top_k", 422]
    assert outcome["classes"] == {
        "candidate": "Candidate", "parallel": "Parallel", "prediction": "Prediction", "breakdown_s": "StepBreakdown",
        "memory": "Memory", "breakdown_gib": "MemoryBreakdown", "per_stage": "StagePeak", "stage": "PipelineStage",
        "search": "SearchStatistics", "explanation": "Explanation", "closest_miss": "MemoryMiss",
        "suggestion": ["Suggestion"], "snapshot": "StoredModelSpec",
    }
    assert outcome["best"] == [8, True]
    stage, num_layers, layers_listed, holds_weights = outcome["stage"]
    assert stage == 0 and num_layers == layers_listed > 0 and holds_weights is True
    assert outcome["search"] == [True, False]
    assert outcome["infeasible"][:5] == ["infeasible", None, "memory", False, True]
    assert outcome["infeasible"][5] >= 1

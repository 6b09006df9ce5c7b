"""Liveness, readiness, metrics, the OpenAPI document and unknown routes."""

from __future__ import annotations

import httpx
import pytest

from app.core.config import Settings
from conftest import BACKENDS, assert_problem, empty_database, server_settings, start_server


def test_healthz(api):
    assert api.get("/healthz").json() == {"status": "ok"}


def test_readyz_reports_the_migrated_database(api):
    response = api.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "ready"


def test_readyz_is_503_on_a_database_without_migrations(tmp_path):
    server = start_server(server_settings(f"sqlite:///{tmp_path / 'empty.db'}"))
    try:
        with httpx.Client(base_url=server.base_url) as client:
            assert client.get("/healthz").status_code == 200
            problem = assert_problem(client.get("/readyz"), 503)
            assert "partitura db upgrade" in problem["detail"]
    finally:
        server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_request_on_a_database_without_migrations_is_a_503_not_a_500(backend, tmp_path):
    """Issue 17, defect 10: a service started on a database nobody migrated answers 503 with
    Retry-After, saying to run the migrations, on every operation that needs the database (on
    Postgres a missing table is a ProgrammingError, which used to be a 500)."""
    plan = {"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 64, "seq_length": 2048}}
    with empty_database(backend, tmp_path) as url:
        server = start_server(server_settings(url))
        try:
            with httpx.Client(base_url=server.base_url, timeout=60) as client:
                for method, path, body in (
                    ("GET", "/v1/plans", None), ("POST", "/v1/plans", plan), ("GET", "/v1/catalog/models", None),
                    ("GET", "/v1/profiles", None), ("GET", "/plans", None),
                ):
                    response = client.request(method, path, json=body)
                    problem = assert_problem(response, 503)
                    assert problem["type"] == "urn:partitura:problem:database-not-migrated", (method, path, problem)
                    assert "partitura db upgrade" in problem["detail"]
                    assert response.headers["retry-after"].isdigit()
                assert client.get("/healthz").status_code == 200
                scraped = client.get("/metrics").text
                assert 'partitura_database_errors_total{reason="not-migrated"} 5.0' in scraped, scraped
        finally:
            server.stop()


def test_an_unreachable_database_is_a_503_not_a_500(tmp_path):
    server = start_server(server_settings(f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"))
    try:
        with httpx.Client(base_url=server.base_url) as client:
            assert client.get("/healthz").status_code == 200
            problem = assert_problem(client.get("/v1/catalog/models"), 503)
            assert problem["type"].endswith("database-unavailable")
            assert assert_problem(client.get("/readyz"), 503)["detail"].startswith("database unreachable")
    finally:
        server.stop()


def test_metrics_in_prometheus_text(api):
    api.get("/v1/catalog/gpus")
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'partitura_http_request_duration_seconds_count{method="GET",route="/v1/catalog/gpus",status="200"}' in text
    assert "# TYPE partitura_solve_duration_seconds histogram" in text
    assert 'partitura_plans{status="succeeded"}' in text
    assert 'partitura_plans{status="infeasible"}' in text


def test_unknown_route_is_a_problem_document(api):
    problem = assert_problem(api.get("/v1/nothing-here"), 404)
    assert "/v1/nothing-here" in problem["detail"]
    assert_problem(api.put("/v1/plans"), 405)


def test_openapi_has_clean_operation_ids_tags_and_examples(api):
    spec = api.get("/openapi.json").json()
    operations = {
        op["operationId"]: (path, method, op) for path, ops in spec["paths"].items() for method, op in ops.items()
    }
    assert {
        "create_plan", "get_plan", "list_plans", "delete_plan", "evaluate_configuration",
        "list_gpus", "get_gpu", "list_models", "get_model", "create_model", "delete_model",
        "list_clusters", "get_cluster", "create_cluster", "delete_cluster",
        "check_liveness", "check_readiness", "get_metrics",
    } <= set(operations)
    assert operations["create_plan"][:2] == ("/v1/plans", "post")
    assert operations["evaluate_configuration"][2]["tags"] == ["evaluations"]
    schemas = spec["components"]["schemas"]
    for operation_id, (_, _, op) in operations.items():
        if "requestBody" in op:
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            assert schemas[ref].get("examples"), f"{operation_id}: request schema {ref} has no example"
    for name in ("Training", "Parallel", "ConstraintsIn", "ModelSpecIn", "ClusterSpecIn", "GpuSpecIn"):
        assert schemas[name].get("examples"), name
    # Schemas renamed apart from the solver's classes keep their public names as titles, which
    # name the generated SDK's classes.
    for name, title in (
        ("ConstraintsIn", "Constraints"), ("ModelSpecIn", "ModelSpec"), ("ClusterSpecIn", "ClusterSpec"), ("GpuSpecIn", "GpuSpec"),
        ("EvaluationOut", "Evaluation"), ("PredictionOut", "Prediction"), ("StepBreakdownOut", "StepBreakdown"),
        ("CandidateOut", "Candidate"), ("ExplanationOut", "Explanation"), ("MemoryMissOut", "MemoryMiss"),
        ("DeadlineMissOut", "DeadlineMiss"), ("SuggestionOut", "Suggestion"),
    ):
        assert schemas[name]["title"] == title
    assert {"200", "201", "422", "503"} <= set(operations["create_plan"][2]["responses"])


def test_docs_page_is_served(api):
    response = api.get("/docs")
    assert response.status_code == 200
    assert "swagger" in response.text.lower()


def test_settings_from_environment():
    settings = Settings.from_env(
        {"DATABASE_URL": "postgresql+psycopg://db/x", "PARTITURA_SOLVER_WORKERS": "3", "PARTITURA_PLAN_TIME_BUDGET_S": "12.5"}
    )
    assert (settings.database_url, settings.solver_workers, settings.plan_time_budget_s) == (
        "postgresql+psycopg://db/x", 3, 12.5,
    )
    assert Settings.from_env({}).database_url == "sqlite:///./partitura.db"
    assert Settings.from_env({"DATABASE_URL": "postgres://u@h/db"}).database_url == "postgresql+psycopg://u@h/db"

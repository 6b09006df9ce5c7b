"""Schemathesis against the live app (issue 17, "How we know it works").

The app's own OpenAPI document (the ``/openapi.json`` the live server serves; a test checks
they are the same) drives a live server (uvicorn on a loopback port, on a fresh SQLite database
built by the migrations, authentication off as by default): every operation in it, 34, is
called with what schemathesis generates from the document: its examples,
its coverage cases (boundaries, missing and wrong-typed fields, malformed bodies) and a bounded
number of fuzzed cases. Each response must pass:

- ``not_a_server_error``: no 5xx at all (not even a declared 503: the database answers and one
  request at a time never fills the solver pool);
- ``status_code_conformance``: every status is one the document declares for the operation;
- ``content_type_conformance``: the content type is one declared for that status;
- ``response_schema_conformance``: the body validates against the declared schema;
- ``response_headers_conformance``: declared headers (``Retry-After``, ``Location``) are present
  and of their declared type.

Deterministic: schemathesis's seed is fixed and Hypothesis is derandomized, so the same cases are
sent on every run (``SEED``, ``MAX_EXAMPLES``). Bounded: the server's search budget is short
(``PLAN_TIME_BUDGET_S``) so a generated plan, sweep or sizing request cannot run for minutes, and
each example has a deadline. No operation is excluded.

Below the fuzzing test, one regression test per defect it found.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
import schemathesis
from hypothesis import settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.core.config import Settings
from app.core.migrate import upgrade
from app.main import create_app
from conftest import LiveServer, assert_problem, empty_database, server_settings, start_server

SEED = 17
# Fuzzed cases per operation (examples and coverage cases come on top of these).
MAX_EXAMPLES = 10
# The server's cap on one search: a fuzzed plan request may ask for any budget, and gets at most this.
PLAN_TIME_BUDGET_S = 1.0
# How long one example (one request and its checks) may take: a search of PLAN_TIME_BUDGET_S, or
# a sweep or sizing request running a few of them, with room for a loaded 2-core machine.
EXAMPLE_DEADLINE = timedelta(seconds=30)
REQUEST_TIMEOUT_S = 60.0
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The app on its own migrated SQLite database (what the fuzzer creates stays there)."""
    with empty_database("sqlite", tmp_path_factory.mktemp("schemathesis")) as url:
        upgrade(url)
        server = start_server(server_settings(url, plan_time_budget_s=PLAN_TIME_BUDGET_S))
        try:
            yield server
        finally:
            server.stop()


def openapi_document() -> dict:
    """The document the app serves at ``/openapi.json`` with the default settings (authentication
    off). It is built here without a server so that pytest knows the operations when it collects
    the tests (schemathesis's fixture-loaded schema fails under pytest 9: it sets a node's
    ``_nodeid``); test_the_live_app_serves_the_document_that_is_fuzzed checks it is the live one."""
    app = create_app(Settings(database_url="sqlite://"))
    document = app.openapi()
    app.state.engine.dispose()
    return document


CONFIG = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "generation": {"mode": "all", "max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
    }
)
schema = schemathesis.openapi.from_dict(openapi_document(), config=CONFIG)


def test_the_live_app_serves_the_document_that_is_fuzzed(fuzzed_server: LiveServer):
    served = httpx.get(f"{fuzzed_server.base_url}/openapi.json", timeout=30).json()
    assert served == openapi_document()
    assert len(list(schema.get_all_operations())) == sum(len(operations) for operations in served["paths"].values()) == 39


@schema.parametrize()
@settings(deadline=EXAMPLE_DEADLINE)
def test_every_operation_answers_as_its_openapi_says(case: schemathesis.Case, fuzzed_server: LiveServer) -> None:
    case.call_and_validate(base_url=fuzzed_server.base_url, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)


# Every operation that takes a JSON body (the fuzzer found each of them answering these with 400).
BODY_OPERATIONS = [
    "/v1/plans", "/v1/evaluations", "/v1/catalog/models", "/v1/catalog/clusters", "/v1/profiles", "/v1/sweeps",
    "/v1/sizing", "/v1/tokens",
]


@pytest.mark.parametrize("path", BODY_OPERATIONS)
def test_a_body_that_is_not_utf8_is_a_422_naming_the_body(api: httpx.Client, path: str):
    """Found by schemathesis: bytes that are not UTF-8 were a bare 400 ("There was an error
    parsing the body", type about:blank), a status no operation declares, naming no field; a
    body with a JSON syntax error is a 422 naming ``body``, and so is this one now."""
    response = api.post(path, content=b'{"model": "\xff"}', headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert problem["errors"] == [{"field": "body", "reason": "is not valid JSON (not UTF-8 text: invalid start byte at byte 11)"}]


def test_a_body_nested_deeper_than_the_parser_reads_is_a_422_naming_the_body(api: httpx.Client):
    response = api.post("/v1/evaluations", content=b"[" * 100_000, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert problem["errors"] == [{"field": "body", "reason": "nests arrays or objects deeper than the service reads"}]


def test_a_json_syntax_error_is_still_the_422_it_was(api: httpx.Client):
    response = api.post("/v1/evaluations", content=b'{"model": ', headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert [e["field"] for e in problem["errors"]] == ["body"]
    assert problem["errors"][0]["reason"].startswith("is not valid JSON (error at character 10")


@pytest.mark.parametrize("chart", ["scaling.svg", "pareto.svg"])
def test_a_chart_of_an_unknown_sweep_is_a_problem_document_as_documented(api: httpx.Client, chart: str):
    """Found by schemathesis: the chart operations documented their 404 and 422 as
    ``image/svg+xml`` (FastAPI files every response under the route's response class) while
    they are sent as ``application/problem+json``."""
    response = api.get(f"/v1/sweeps/no-such-sweep/charts/{chart}")
    assert_problem(response, 404)
    operation = api.get("/openapi.json").json()["paths"][f"/v1/sweeps/{{sweep_id}}/charts/{chart}"]["get"]
    assert list(operation["responses"]["200"]["content"]) == ["image/svg+xml"]
    for status in ("404", "422", "503"):
        assert operation["responses"][status]["content"] == {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}
        }


def test_every_error_response_is_documented_as_a_problem_document(api: httpx.Client):
    spec = api.get("/openapi.json").json()
    wrong = [
        (method, path, status, sorted(response.get("content", {})))
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        for status, response in operation["responses"].items()
        if status[:1] in "45" and list(response.get("content", {})) != ["application/problem+json"]
    ]
    assert wrong == []


def test_metrics_documents_the_content_type_it_sends(api: httpx.Client):
    """/metrics documented a 200 with no content, so no content type could be checked against it."""
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == "text/plain"
    assert "partitura_database_up 1.0" in response.text
    documented = api.get("/openapi.json").json()["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert documented == {"text/plain": {"schema": {"type": "string"}}}


@pytest.mark.parametrize(("kind", "name"), [("models", "gpt3-1.3b"), ("clusters", "dgx-a100-80gb-x1")])
def test_deleting_a_built_in_catalog_entry_is_a_documented_403(api: httpx.Client, kind: str, name: str):
    """With authentication off a built-in entry's DELETE is a 403 (the fuzzer deletes every name
    it finds); the document described 403 only as a token without the scope."""
    problem = assert_problem(api.delete(f"/v1/catalog/{kind}/{name}"), 403)
    assert problem["detail"].endswith("built-ins cannot be deleted")
    assert api.get(f"/v1/catalog/{kind}/{name}").status_code == 200
    operation = api.get("/openapi.json").json()["paths"][f"/v1/catalog/{kind}/{{name}}"]["delete"]
    assert operation["responses"]["403"]["description"].startswith("A built-in entry (built-ins cannot be deleted)")

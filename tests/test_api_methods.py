"""Issue 17, defect 10 (in part), through HTTP on SQLite and Postgres: a 405 names in ``Allow``
every method the path answers, not only those of the first route that matched it."""

from __future__ import annotations

import pytest

from conftest import assert_problem


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/v1/plans", {"GET", "POST"}),
    ("PUT", "/v1/plans/some-plan-id", {"GET", "DELETE"}),
    ("PATCH", "/v1/catalog/models/gpt3-350m", {"GET", "DELETE"}),
    ("DELETE", "/v1/evaluations", {"POST"}),
    ("POST", "/healthz", {"GET"}),
])
def test_a_405_lists_every_method_the_path_answers(api, method, path, allowed):
    response = api.request(method, path)
    assert_problem(response, 405)
    assert {m.strip() for m in response.headers["allow"].split(",")} == allowed
    for other in allowed - {"DELETE", "POST"}:  # each listed read method really answers (not 405)
        assert api.request(other, path).status_code != 405


def test_the_openapi_document_lists_the_statuses_the_service_answers(api):
    """Every operation that touches the database documents its 503 (with Retry-After), and the
    catalog's create operations their 409, which the service really answers."""
    spec = api.get("/openapi.json").json()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if path in ("/healthz", "/metrics"):
                assert "503" not in operation["responses"], path
                continue
            unavailable = operation["responses"]["503"]
            if path != "/readyz":  # a probe's 503 says "not ready", not "retry after"
                assert "Retry-After" in unavailable.get("headers", {}), (method, path)
    for path in ("/v1/catalog/models", "/v1/catalog/clusters"):
        assert "409" in spec["paths"][path]["post"]["responses"]
    taken = {"name": "gpt3-350m", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
             "seq_length": 32}
    assert_problem(api.post("/v1/catalog/models", json=taken), 409)

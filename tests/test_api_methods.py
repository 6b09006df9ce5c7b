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

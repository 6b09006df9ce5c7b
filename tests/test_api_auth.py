"""API tokens, ownership and quotas (issue 17, defect 8) through HTTP on SQLite and Postgres, with
a server that requires tokens (PARTITURA_AUTH=required) on the same database as the other tests.

A token is created in the database as `partitura token create` does; requests send it as
``Authorization: Bearer <token>``. Every token here is new, so what it owns is this test's alone. ``auth_server`` is in conftest.
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import httpx
import pytest
from sqlalchemy import select

from app.core.db import make_engine, make_sessionmaker
from app.plans.models import Plan
from app.profiles.schemas import PROFILE_EXAMPLE
from app.sweeps.models import Sweep
from app.tokens import service
from app.tokens.models import ApiToken
from app.tokens.scopes import Scope
from conftest import AUTH_CONCURRENT_SOLVES, LiveServer, assert_problem, unique_name

RETRY_AFTER_S = 7  # server_settings' retry_after_s
CONCURRENT_SOLVES = AUTH_CONCURRENT_SOLVES


@pytest.fixture
def anonymous(auth_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=auth_server.base_url, timeout=120.0) as client:
        yield client


class Caller:
    """A token and an HTTP client that sends it."""

    def __init__(self, base_url: str, token_id: str, token: str) -> None:
        self.id, self.token = token_id, token
        self.http = httpx.Client(base_url=base_url, timeout=120.0, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def make_caller(auth_server: LiveServer, database_url: str) -> Iterator:
    engine = make_engine(database_url)
    sessions = make_sessionmaker(engine)
    callers: list[Caller] = []

    def make(*scopes: Scope, plans_per_minute: int | None = None) -> Caller:
        with sessions() as session:
            created = service.create_token(session, unique_name("test"), scopes, plans_per_minute)
            session.commit()
        caller = Caller(auth_server.base_url, created.id, created.token)
        callers.append(caller)
        return caller

    try:
        yield make
    finally:
        for caller in callers:
            caller.http.close()
        engine.dispose()


def row(database_url: str, table: type, row_id: str):
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return session.scalars(select(table).where(table.id == row_id)).one()
    finally:
        engine.dispose()


def plan_body(**overrides) -> dict:
    body = {
        "model": "gpt3-350m",
        "cluster": "dgx-a100-80gb-x1",
        "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 2048},
        "constraints": {"tp_size": [1, 2]},
        "top_k": 1,
    }
    body.update(overrides)
    return body


def test_no_token_is_a_401_with_a_bearer_challenge(anonymous):
    for response in (
        anonymous.get("/v1/plans"),
        anonymous.post("/v1/plans", json=plan_body()),
        anonymous.get("/v1/catalog/models"),
        anonymous.get("/v1/tokens"),
        anonymous.get("/v1/plans", headers={"Authorization": "Basic dXNlcjpwYXNz"}),
    ):
        problem = assert_problem(response, 401)
        assert problem["type"] == "urn:partitura:problem:unauthorized"
        assert response.headers["www-authenticate"] == 'Bearer realm="partitura"'


def test_an_unknown_token_is_a_401_invalid_token(anonymous):
    response = anonymous.get("/v1/plans", headers={"Authorization": "Bearer ptk_not-a-token"})
    problem = assert_problem(response, 401)
    assert problem["detail"] == "the token is unknown or revoked"
    assert response.headers["www-authenticate"] == 'Bearer realm="partitura", error="invalid_token"'


def test_health_docs_openapi_and_metrics_stay_open(anonymous):
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/readyz").json()["status"] == "ready"
    assert anonymous.get("/openapi.json").json()["info"]["title"] == "Partitura"
    assert anonymous.get("/docs").status_code == 200
    metrics = anonymous.get("/metrics")
    assert metrics.status_code == 200 and "partitura_http_request_duration_seconds" in metrics.text


def test_a_read_only_token_reads_but_cannot_plan_delete_or_manage_tokens(make_caller):
    reader = make_caller(Scope.READ)
    assert reader.http.get("/v1/plans").json() == {"items": [], "next_cursor": None}
    assert reader.http.get("/v1/catalog/models/gpt3-350m").json()["name"] == "gpt3-350m"
    refused = reader.http.post("/v1/plans", json=plan_body())
    problem = assert_problem(refused, 403)
    assert problem["type"] == "urn:partitura:problem:insufficient-scope"
    assert "'plan' scope" in problem["detail"]
    assert refused.headers["www-authenticate"] == 'Bearer realm="partitura", error="insufficient_scope", scope="plan"'
    assert_problem(reader.http.post("/v1/evaluations", json={}), 403)
    assert_problem(reader.http.delete("/v1/plans/00000000-0000-0000-0000-000000000000"), 403)
    assert_problem(reader.http.get("/v1/tokens"), 403)
    planner = make_caller(Scope.PLAN)
    assert_problem(planner.http.get("/v1/tokens"), 403)


def test_an_owner_neither_sees_nor_lists_nor_deletes_another_owners_plan(make_caller, database_url):
    alice, bob, admin = make_caller(Scope.PLAN), make_caller(Scope.PLAN), make_caller(Scope.ADMIN)
    created = alice.http.post("/v1/plans", json=plan_body())
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    assert row(database_url, Plan, plan_id).owner_token_id == alice.id

    for response in (
        bob.http.get(f"/v1/plans/{plan_id}"),
        bob.http.delete(f"/v1/plans/{plan_id}"),
        bob.http.get(f"/v1/plans/{plan_id}/export", params={"format": "megatron"}),
    ):
        problem = assert_problem(response, 404)
        assert problem["title"] == "Unknown plan" and problem["suggestions"] == []
    # Plan ids are opaque: a 404 suggests no id, not even to the plan's owner.
    assert assert_problem(bob.http.get(f"/v1/plans/{plan_id[:8]}"), 404)["suggestions"] == []
    assert assert_problem(alice.http.get(f"/v1/plans/{plan_id[:8]}"), 404)["suggestions"] == []
    assert bob.http.get("/v1/plans", params={"model": "gpt3-350m"}).json()["items"] == []
    assert [item["id"] for item in alice.http.get("/v1/plans").json()["items"]] == [plan_id]
    # An admin reads and lists every owner's plans.
    assert admin.http.get(f"/v1/plans/{plan_id}").json()["id"] == plan_id
    assert plan_id in [item["id"] for item in admin.http.get("/v1/plans", params={"limit": 100}).json()["items"]]
    assert alice.http.delete(f"/v1/plans/{plan_id}").status_code == 204
    assert_problem(admin.http.get(f"/v1/plans/{plan_id}"), 404)


def test_an_identical_request_from_another_owner_is_its_own_plan(make_caller, database_url):
    alice, bob = make_caller(Scope.PLAN), make_caller(Scope.PLAN)
    body = plan_body(training={"global_batch_size": 128, "seq_length": 2048})
    first = alice.http.post("/v1/plans", json=body)
    assert first.status_code == 201, first.text
    again = alice.http.post("/v1/plans", json=body)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    theirs = bob.http.post("/v1/plans", json=body)
    assert theirs.status_code == 201, theirs.text
    assert theirs.json()["id"] != first.json()["id"]
    assert theirs.json()["best"] == first.json()["best"]  # the same question, the same answer
    assert bob.http.post("/v1/plans", json=body).json()["id"] == theirs.json()["id"]
    alice_row, bob_row = row(database_url, Plan, first.json()["id"]), row(database_url, Plan, theirs.json()["id"])
    assert (alice_row.owner_token_id, bob_row.owner_token_id) == (alice.id, bob.id)
    assert alice_row.request_hash != bob_row.request_hash


def test_a_revoked_token_is_a_401(make_caller):
    admin, user = make_caller(Scope.ADMIN), make_caller(Scope.READ)
    assert user.http.get("/v1/plans").status_code == 200
    assert admin.http.delete(f"/v1/tokens/{user.id}").status_code == 204
    response = user.http.get("/v1/plans")
    assert_problem(response, 401)
    assert response.headers["www-authenticate"] == 'Bearer realm="partitura", error="invalid_token"'
    listed = {item["id"]: item for item in admin.http.get("/v1/tokens").json()["items"]}
    assert listed[user.id]["revoked_at"] is not None and listed[user.id]["last_used_at"] is not None
    assert listed[admin.id]["revoked_at"] is None


def _wait_for_room_in_the_minute(seconds: float) -> None:
    """The quota's window is the clock minute: start where ``seconds`` fit before it ends."""
    left_s = 60 - time.time() % 60
    if left_s < seconds:
        time.sleep(left_s + 0.5)


def test_plan_requests_over_the_tokens_quota_are_429_with_retry_after(make_caller, database_url):
    limited = make_caller(Scope.PLAN, plans_per_minute=2)
    _wait_for_room_in_the_minute(30)
    body = plan_body(top_k=2)
    assert limited.http.post("/v1/plans", json=body).status_code == 201
    assert limited.http.post("/v1/plans", json=body).status_code == 200  # a stored answer counts too
    refused = limited.http.post("/v1/plans", json=body)
    problem = assert_problem(refused, 429)
    assert problem["type"] == "urn:partitura:problem:rate-limited"
    assert "2 plan requests this minute" in problem["detail"]
    retry_after_s = int(refused.headers["retry-after"])
    assert 1 <= retry_after_s <= 60
    assert_problem(limited.http.post("/v1/sweeps", json={}), 429)
    assert_problem(limited.http.post("/v1/sizing", json={}), 429)
    # Reads are not counted.
    assert limited.http.get("/v1/plans").status_code == 200
    stored = row(database_url, ApiToken, limited.id)
    assert stored.rate_window_requests == 5
    assert stored.rate_window_start_s % 60 == 0 and stored.rate_window_start_s <= time.time() < stored.rate_window_start_s + 60


def test_the_request_window_starts_again_each_minute(make_caller, database_url):
    caller = make_caller(Scope.PLAN)
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            # 1_800_000_020 is 20 s into a minute (1_800_000_000 is a multiple of 60).
            at = lambda second: datetime.fromtimestamp(1_800_000_020 + second, tz=timezone.utc)  # noqa: E731
            counts = [service.count_plan_request(session, caller.id, at(s)) for s in (0, 1, 39, 40, 41)]
            session.commit()
    finally:
        engine.dispose()
    assert [c.requests for c in counts] == [1, 2, 3, 1, 2]
    assert [c.retry_after_s for c in counts] == [40, 39, 1, 60, 59]


def test_searches_running_at_once_over_the_quota_are_429(auth_server, make_caller):
    caller = make_caller(Scope.PLAN, plans_per_minute=0)
    slots = auth_server.app.state.solve_slots
    for _ in range(CONCURRENT_SOLVES):
        assert slots.try_acquire(caller.id)
    try:
        refused = caller.http.post("/v1/plans", json=plan_body())
        problem = assert_problem(refused, 429)
        assert problem["type"] == "urn:partitura:problem:too-many-searches"
        assert refused.headers["retry-after"] == str(RETRY_AFTER_S)
        other = make_caller(Scope.PLAN)
        assert other.http.post("/v1/plans", json=plan_body(top_k=3)).status_code in (200, 201)
    finally:
        for _ in range(CONCURRENT_SOLVES):
            slots.release(caller.id)
    assert caller.http.post("/v1/plans", json=plan_body()).status_code == 201
    assert slots.held(caller.id) == 0


def test_a_token_is_stored_only_as_its_hash(make_caller, database_url):
    admin = make_caller(Scope.ADMIN)
    created = admin.http.post("/v1/tokens", json={"name": "ci-planner", "scopes": ["plan", "read"], "plans_per_minute": 10})
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    document = created.json()
    token = document["token"]
    assert token.startswith("ptk_") and len(token) == 4 + 43
    assert document["scopes"] == ["read", "plan"] and document["plans_per_minute"] == 10
    assert created.headers["location"] == f"/v1/tokens/{document['id']}"
    stored = row(database_url, ApiToken, document["id"])
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert stored.token_prefix == token[:12]
    values = [getattr(stored, column.key) for column in ApiToken.__table__.columns]
    assert not any(token in str(value) for value in values)
    shown = admin.http.get(f"/v1/tokens/{document['id']}").json()
    assert "token" not in shown and shown["token_prefix"] == token[:12]
    # The token works, and is the owner of what it makes.
    with httpx.Client(base_url=str(admin.http.base_url), headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.get("/v1/plans").json()["items"] == []


def test_token_requests_are_validated_and_unknown_ids_are_404_without_suggestions(make_caller):
    admin = make_caller(Scope.ADMIN)
    invalid = assert_problem(admin.http.post("/v1/tokens", json={"name": "x", "scopes": ["root"]}), 422)
    assert [e["field"] for e in invalid["errors"]] == ["body.scopes[0]"]
    assert_problem(admin.http.post("/v1/tokens", json={"name": "x", "scopes": []}), 422)
    problem = assert_problem(admin.http.get(f"/v1/tokens/{admin.id[:8]}"), 404)
    assert "suggestions" not in problem
    assert_problem(admin.http.delete("/v1/tokens/nope"), 404)


def test_profiles_and_sweeps_are_their_owners(make_caller, database_url):
    alice, bob = make_caller(Scope.PLAN), make_caller(Scope.PLAN)
    document = copy.deepcopy(PROFILE_EXAMPLE)
    document["model"]["name"] = unique_name("auth-profile")
    profile = alice.http.post("/v1/profiles", json=document)
    assert profile.status_code == 201, profile.text
    profile_id = profile.json()["id"]
    assert_problem(bob.http.get(f"/v1/profiles/{profile_id}"), 404)
    assert_problem(bob.http.delete(f"/v1/profiles/{profile_id}"), 404)
    assert bob.http.get("/v1/profiles").json()["items"] == []
    assert [p["id"] for p in alice.http.get("/v1/profiles").json()["items"]] == [profile_id]
    # Another owner's profile cannot be planned with: as if it did not exist.
    evaluation = {
        "model": document["model"], "cluster": "dgx-a100-80gb-x1", "num_gpus": 1, "profile_id": profile_id,
        "training": {"global_batch_size": 8, "seq_length": 64},
        "parallel": {"dp_size": 1, "tp_size": 1, "pp_size": 1, "micro_batch_size": 4},
    }
    refused = assert_problem(bob.http.post("/v1/evaluations", json=evaluation), 422)
    assert refused["errors"] == [{"field": "body.profile_id", "reason": f"no profile with id {profile_id!r}"}]
    accepted = alice.http.post("/v1/evaluations", json=evaluation)
    assert accepted.status_code == 200, accepted.text

    sweep = alice.http.post("/v1/sweeps", json={
        "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "num_gpus": [8],
        "training": {"global_batch_size": 64, "seq_length": 2048}, "constraints": {"tp_size": [1]}, "top_k": 1,
    })
    assert sweep.status_code == 201, sweep.text
    sweep_id, point_plan = sweep.json()["id"], sweep.json()["points"][0]["plan_id"]
    assert row(database_url, Sweep, sweep_id).owner_token_id == alice.id
    assert row(database_url, Plan, point_plan).owner_token_id == alice.id
    assert_problem(bob.http.get(f"/v1/sweeps/{sweep_id}"), 404)
    assert assert_problem(bob.http.get(f"/v1/sweeps/{sweep_id[:8]}"), 404)["suggestions"] == []
    assert_problem(bob.http.get(f"/v1/sweeps/{sweep_id}/charts/scaling.svg"), 404)
    assert_problem(bob.http.get(f"/v1/plans/{point_plan}"), 404)
    assert alice.http.get(f"/v1/sweeps/{sweep_id}").json()["id"] == sweep_id


def test_custom_catalog_entries_are_shared_but_deleted_only_by_their_owner(make_caller):
    alice, bob, admin = make_caller(Scope.PLAN), make_caller(Scope.PLAN), make_caller(Scope.ADMIN)
    name = unique_name("auth-model")
    spec = {"name": name, "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 32000, "seq_length": 512}
    assert alice.http.post("/v1/catalog/models", json=spec).status_code == 201
    assert bob.http.get(f"/v1/catalog/models/{name}").json()["name"] == name
    problem = assert_problem(bob.http.delete(f"/v1/catalog/models/{name}"), 403)
    assert problem["type"] == "urn:partitura:problem:not-owner"
    assert alice.http.delete(f"/v1/catalog/models/{name}").status_code == 204
    assert bob.http.post("/v1/catalog/models", json=spec).status_code == 201
    assert admin.http.delete(f"/v1/catalog/models/{name}").status_code == 204


def test_openapi_declares_the_bearer_scheme_and_401_403_429(anonymous):
    spec = anonymous.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["type"] == "http"
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    open_paths = {"/healthz", "/readyz", "/metrics"}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            if path in open_paths:
                assert "security" not in operation, where
                continue
            assert operation["security"] == [{"bearer": []}], where
            for status in ("401", "403"):
                content = operation["responses"][status]["content"]
                assert content == {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}}, where
    assert "WWW-Authenticate" in spec["paths"]["/v1/plans"]["get"]["responses"]["401"]["headers"]
    for path in ("/v1/plans", "/v1/sweeps", "/v1/sizing"):
        limited = spec["paths"][path]["post"]["responses"]["429"]
        assert "Retry-After" in limited["headers"]
        assert "application/problem+json" in limited["content"]
    assert "429" not in spec["paths"]["/v1/plans"]["get"]["responses"]
    assert {"/v1/tokens", "/v1/tokens/{token_id}"} <= set(spec["paths"])


def test_with_authentication_off_tokens_are_optional_and_ignored(api):
    spec = api.get("/openapi.json").json()
    assert spec["paths"]["/v1/plans"]["post"]["security"] == [{"bearer": []}, {}]
    response = api.get("/v1/catalog/models/gpt3-350m", headers={"Authorization": "Bearer ptk_anything"})
    assert response.status_code == 200


def test_the_plan_viewer_pages_take_a_token_and_show_only_the_owners_plans(anonymous, make_caller):
    alice, bob = make_caller(Scope.PLAN), make_caller(Scope.READ)
    plan_id = alice.http.post("/v1/plans", json=plan_body(top_k=4)).json()["id"]
    assert_problem(anonymous.get("/plans"), 401)
    assert_problem(anonymous.get(f"/plans/{plan_id}"), 401)
    page = alice.http.get(f"/plans/{plan_id}")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert plan_id in alice.http.get("/plans").text
    assert_problem(bob.http.get(f"/plans/{plan_id}"), 404)
    listing = bob.http.get("/plans")
    assert listing.status_code == 200 and plan_id not in listing.text

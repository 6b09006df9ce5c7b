"""`partitura token create|list|revoke` on DATABASE_URL, and the authentication settings."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from sqlalchemy import select

from app.cli import main
from app.core.config import Settings, SettingsError
from app.core.db import make_engine, make_sessionmaker
from app.core.migrate import upgrade
from app.tokens import service
from app.tokens.models import ApiToken


def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, env=env, out=out, err=err, stdin=io.StringIO())
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    url = f"sqlite:///{tmp_path / 'tokens.db'}"
    upgrade(url)
    return {"DATABASE_URL": url}


def stored_rows(url: str) -> list[ApiToken]:
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session:
            return list(session.scalars(select(ApiToken)))
    finally:
        engine.dispose()


def test_create_prints_the_token_once_and_stores_its_hash(env):
    code, out, err = run(["token", "create", "ci-planner", "--scope", "plan", "--scope", "read", "--plans-per-minute", "12"], env)
    assert code == 0, err
    created = json.loads(out)
    token = created["token"]
    assert token.startswith("ptk_") and created["scopes"] == ["read", "plan"] and created["plans_per_minute"] == 12
    [row] = stored_rows(env["DATABASE_URL"])
    assert row.id == created["id"] and row.name == "ci-planner" and row.scopes == "read plan"
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest() == service.token_hash(token)

    code, out, _ = run(["token", "list"], env)
    assert code == 0 and token not in out
    [listed] = json.loads(out)["items"]
    assert listed["id"] == created["id"] and "token" not in listed and listed["revoked_at"] is None


def test_revoke_marks_the_token_and_an_unknown_id_is_a_404(env):
    _, out, _ = run(["token", "create", "admin", "--scope", "admin"], env)
    token = json.loads(out)
    code, out, _ = run(["token", "revoke", token["id"]], env)
    assert code == 0 and json.loads(out)["revoked_at"] is not None
    assert stored_rows(env["DATABASE_URL"])[0].revoked_at is not None
    engine = make_engine(env["DATABASE_URL"])
    try:
        with make_sessionmaker(engine)() as session:
            assert service.authenticate(session, token["token"], stored_rows(env["DATABASE_URL"])[0].created_at) is None
    finally:
        engine.dispose()
    code, _, err = run(["token", "revoke", "no-such-id"], env)
    assert code == 2 and json.loads(err)["status"] == 404


@pytest.mark.parametrize(
    "argv",
    [
        ["token", "create", "x"],  # no scope
        ["token", "create", "x", "--scope", "root"],
        ["token", "create", "bad name", "--scope", "read"],
        ["token", "create", "x", "--scope", "read", "--plans-per-minute", "-1"],
    ],
)
def test_invalid_arguments_are_refused(env, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(argv, env)
    assert exit_info.value.code == 2
    assert stored_rows(env["DATABASE_URL"]) == []


def test_authentication_settings():
    assert Settings.from_env({}).auth_mode == "off"
    settings = Settings.from_env(
        {"PARTITURA_AUTH": "required", "PARTITURA_QUOTA_PLANS_PER_MINUTE": "5", "PARTITURA_QUOTA_CONCURRENT_SOLVES": "0"}
    )
    assert (settings.auth_mode, settings.quota_plans_per_minute, settings.quota_concurrent_solves) == ("required", 5, 0)
    assert Settings.from_env({}).quota_plans_per_minute == 30 and Settings.from_env({}).quota_concurrent_solves == 2
    with pytest.raises(SettingsError, match="PARTITURA_AUTH must be one of off, required"):
        Settings.from_env({"PARTITURA_AUTH": "yes"})
    with pytest.raises(SettingsError, match="PARTITURA_QUOTA_PLANS_PER_MINUTE must be at least 0"):
        Settings.from_env({"PARTITURA_QUOTA_PLANS_PER_MINUTE": "-1"})

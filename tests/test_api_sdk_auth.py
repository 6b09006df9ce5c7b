"""A Python SDK generated from the /openapi.json of a server that requires API tokens sends the
token: ``AuthenticatedClient(token=...)`` creates and reads a plan, a client without a token is
answered 401, and another token's client gets 404 for that plan (the bearer scheme and the
per-operation ``security`` are what make the generator add the header)."""

from __future__ import annotations

import json
import textwrap

import httpx
import pytest
from test_api_sdk import GENERATOR, _run, _venv

from app.core.db import make_engine, make_sessionmaker
from app.tokens import service
from app.tokens.scopes import Scope
from conftest import unique_name


def _token(database_url: str) -> str:
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            created = service.create_token(session, unique_name("sdk"), [Scope.PLAN])
            session.commit()
            return created.token
    finally:
        engine.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_generated_client_sends_the_token(auth_server, database_url, tmp_path):
    spec_path = tmp_path / "openapi.json"
    spec_path.write_text(httpx.get(f"{auth_server.base_url}/openapi.json", timeout=30).text)
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
        from partitura_client import AuthenticatedClient, Client
        from partitura_client.api.plans import create_plan, get_plan, list_plans
        from partitura_client.models import PlanRequest

        base_url, token, other_token = sys.argv[1:4]
        body = PlanRequest.from_dict({
            "model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
            "training": {"global_batch_size": 32, "seq_length": 2048}, "constraints": {"tp_size": [1, 2]}, "top_k": 1,
        })
        owner = AuthenticatedClient(base_url=base_url, token=token, timeout=300)
        created = create_plan.sync_detailed(client=owner, body=body)
        plan = created.parsed
        fetched = get_plan.sync(plan.id, client=owner)
        page = list_plans.sync(client=owner, limit=5)
        anonymous = get_plan.sync_detailed(plan.id, client=Client(base_url=base_url, timeout=60))
        other = get_plan.sync_detailed(plan.id, client=AuthenticatedClient(base_url=base_url, token=other_token, timeout=60))
        print(json.dumps({
            "created": int(created.status_code), "fetched": fetched.id == plan.id,
            "listed": [item.id for item in page.items] == [plan.id],
            "anonymous": [int(anonymous.status_code), anonymous.parsed.status],
            "other": [int(other.status_code), other.parsed.status],
        }))
        """
    )
    result = _run(
        [str(client_venv / "python"), "-c", script, auth_server.base_url, _token(database_url), _token(database_url)],
        cwd=tmp_path,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "created": 201, "fetched": True, "listed": True, "anonymous": [401, 401], "other": [404, 404],
    }


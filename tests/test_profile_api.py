"""/v1/profiles through HTTP on databases built by the migrations (SQLite and Postgres)."""

from __future__ import annotations

import copy

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

import app.profiles.models  # noqa: F401  (registers the profiles table on Base.metadata)
from app.core.db import make_engine
from app.core.migrate import downgrade, upgrade
from app.models import Base
from app.profiles.schemas import PROFILE_EXAMPLE
from conftest import BACKENDS, assert_problem, empty_database, error_fields, unique_name


def _document(model_name: str | None = None) -> dict:
    document = copy.deepcopy(PROFILE_EXAMPLE)
    document["model"]["name"] = model_name or unique_name("tiny")
    return document


def test_create_read_list_delete(api):
    document = _document()
    created = api.post("/v1/profiles", json=document)
    assert created.status_code == 201, created.text
    body = created.json()
    assert created.headers["location"] == f"/v1/profiles/{body['id']}"
    assert (body["model_name"], body["device"], body["precision"]) == (document["model"]["name"], "NVIDIA H100 80GB HBM3", "bf16")
    assert (body["micro_batch_size"], body["seq_length"], body["tp_size"], body["num_layers"]) == (4, 64, 1, 2)
    # The stored document is normalised: the defaults the planner uses are spelled out.
    head = body["document"]["layers"][3]
    assert head["selective_activation_bytes"] == head["activation_bytes"] == 658436
    assert head["checkpoint_bytes"] == 65536  # the head's input: layer.1's output
    assert head["parameter_bytes"] == 2 * 65792 and head["origin"] == "measured"

    fetched = api.get(f"/v1/profiles/{body['id']}")
    assert fetched.status_code == 200 and fetched.json() == body

    listed = api.get("/v1/profiles", params={"model": document["model"]["name"]}).json()
    assert [item["id"] for item in listed["items"]] == [body["id"]]
    assert "document" not in listed["items"][0] and listed["next_cursor"] is None

    assert api.delete(f"/v1/profiles/{body['id']}").status_code == 204
    assert_problem(api.get(f"/v1/profiles/{body['id']}"), 404)
    assert_problem(api.delete(f"/v1/profiles/{body['id']}"), 404)


def test_list_pages_newest_first(api):
    model_name = unique_name("paged")
    ids = [api.post("/v1/profiles", json=_document(model_name)).json()["id"] for _ in range(3)]
    seen, cursor = [], None
    while True:
        params = {"model": model_name, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/profiles", params=params).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 3
    assert error_fields(assert_problem(api.get("/v1/profiles", params={"cursor": "nonsense"}), 422)) == ["query.cursor"]


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["layers"][2].update(forward_s=-0.001), "body.layers[2].forward_s"),
        (lambda d: d["layers"][1].pop("activation_bytes"), "body.layers[1].activation_bytes"),
        (lambda d: d["layers"][3].update(kind="logits"), "body.layers[3].kind"),
        (lambda d: d.update(format="partitura-profile/0"), "body.format"),
        (lambda d: d["model"].update(num_layers=3), "body.layers"),
        (lambda d: d.update(tp_size=0), "body.tp_size"),
    ],
)
def test_invalid_documents_are_422_naming_layer_and_field(api, mutate, field):
    document = _document()
    mutate(document)
    problem = assert_problem(api.post("/v1/profiles", json=document), 422)
    assert error_fields(problem) == [field]


def test_uploaded_by_the_profile_command(api, live_server, tmp_path):
    pytest.importorskip("torch")
    from profiler.cli import main

    spec = tmp_path / "model.json"
    spec.write_text('{"name": "%s", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 2, '
                    '"vocab_size": 128, "seq_length": 32}' % unique_name("cli"))
    status = main([
        "profile", "--model", str(spec), "--device", "cpu", "--threads", "1", "--warmup", "1", "--repeats", "2",
        "--output", str(tmp_path / "profile.json"), "--upload", live_server.base_url,
    ])
    assert status == 0
    model_name = spec.read_text().split('"')[3]
    items = api.get("/v1/profiles", params={"model": model_name}).json()["items"]
    assert len(items) == 1 and items[0]["device"].startswith("cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_profiles_migration_up_down_up_matches_the_model(backend, tmp_path):
    with empty_database(backend, tmp_path) as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            assert "profiles" in inspect(engine).get_table_names()
            indexes = {index["name"] for index in inspect(engine).get_indexes("profiles")}
            assert indexes == {"ix_profiles_created_at_id", "ix_profiles_model_name"}
            with engine.connect() as connection:
                context = MigrationContext.configure(connection, opts={"compare_type": True})
                assert compare_metadata(context, Base.metadata) == []
        finally:
            engine.dispose()
        downgrade(url, "20261122_0001")
        engine = make_engine(url)
        try:
            assert "profiles" not in inspect(engine).get_table_names()
        finally:
            engine.dispose()
        upgrade(url)


def test_measured_profile_for_a_plan_checks_the_model_shape(api, database_url):
    from app.core.db import make_sessionmaker
    from app.core.problems import Problem
    from app.profiles.service import measured_profile
    from solver.io.profile_format import model_from_dict

    document = _document()
    stored = api.post("/v1/profiles", json=document).json()
    same_shape = model_from_dict({**document["model"], "name": "renamed"})
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            found = measured_profile(session, stored["id"], same_shape)
            assert found.profile.layers[1].forward_s == 9.0e-04 and found.profile.micro_batch_size == 4
            wider = model_from_dict({**document["model"], "hidden_size": 256})
            with pytest.raises(Problem) as problem:
                measured_profile(session, stored["id"], wider)
            assert problem.value.errors[0]["field"] == "body.profile_id"
            assert "hidden_size=128" in problem.value.errors[0]["reason"]
            with pytest.raises(Problem) as problem:
                measured_profile(session, "no-such-id", same_shape)
            assert problem.value.status == 422
    finally:
        engine.dispose()


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# Values that stress storage as well as validation: NUL and surrogate characters, long strings,
# integers beyond 64 bits, non-finite floats (sent as the JSON extensions NaN/Infinity).
STORAGE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6), st.sampled_from(["\x00", "a\x00b", "x" * 300, "NVIDIA H100 80GB HBM3", "bf16", "layer.0"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    where=st.sampled_from(["top", "layer", "model"]),
    key=st.sampled_from(["format", "device", "precision", "micro_batch_size", "seq_length", "tp_size", "name",
                         "source", "forward_s", "activation_bytes", "parameter_count", "num_layers", "hidden_size"]),
    index=st.integers(0, 3),
    value=STORAGE_VALUES,
)
def test_any_value_is_stored_or_a_422_never_a_500(api, where, key, index, value):
    document = _document()
    target = {"top": document, "layer": document["layers"][index], "model": document["model"]}[where]
    target[key] = value
    response = api.post("/v1/profiles", json=document)
    assert response.status_code in (201, 422), response.text
    if response.status_code == 201:
        assert api.delete(response.headers["location"]).status_code == 204

"""Never a 500 for anything a client sends: random evaluation bodies get 200 or a 422 problem."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

small_ints = st.one_of(st.integers(min_value=-2, max_value=70), st.just(2**40), st.booleans(), st.just("8"), st.none())
names = st.sampled_from(["gpt3-1.3b", "llama2-7b", "bert-large", "gpt3-175b", "nope", ""])
clusters = st.sampled_from(["dgx-a100-80gb-x1", "dgx-h100-x8", "dgx1-v100-x1", "mi300x-x8", "nope"])

parallel = st.fixed_dictionaries(
    {},
    optional={
        "dp_size": small_ints, "tp_size": small_ints, "pp_size": small_ints, "micro_batch_size": small_ints,
        "zero_stage": small_ints, "virtual_stages": small_ints,
        "recompute": st.sampled_from(["none", "selective", "full", "most"]),
        "sequence_parallel": st.one_of(st.booleans(), st.just("yes")),
        "stage_layers": st.one_of(st.none(), st.lists(st.integers(min_value=-1, max_value=40), max_size=4)),
    },
)
training = st.fixed_dictionaries(
    {"global_batch_size": small_ints, "seq_length": st.sampled_from([1, 512, 2048, 4096, 0])},
    optional={
        "precision": st.sampled_from(["fp16", "bf16", "fp8", "fp4"]),
        "optimizer": st.sampled_from(["adam", "sgd", "muon", "lion"]),
        "train_tokens": st.one_of(st.none(), st.floats(min_value=-1, max_value=1e13, allow_nan=False)),
    },
)
bodies = st.fixed_dictionaries(
    {"model": names, "cluster": clusters, "training": training, "parallel": parallel},
    optional={"num_gpus": small_ints},
)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_random_evaluation_bodies_never_fail_the_server(api, body):
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code in (200, 422), (body, response.text)
    if response.status_code == 422:
        problem = response.json()
        assert response.headers["content-type"].startswith("application/problem+json")
        assert problem["errors"] and all(e["field"].startswith("body") and e["reason"] for e in problem["errors"])
    else:
        assert isinstance(response.json()["feasible"], bool)


typed_ints = st.integers(min_value=1, max_value=64)
typed_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt3-1.3b", "llama2-7b", "bert-large", "gpt3-175b", "llama3-8b"]),
        "cluster": st.sampled_from(["dgx-a100-80gb-x1", "dgx-h100-x8", "dgx1-v100-x1", "mi300x-x8"]),
        "training": st.fixed_dictionaries(
            {"global_batch_size": st.sampled_from([1, 8, 64, 96, 512]), "seq_length": st.sampled_from([512, 2048, 4096])},
            optional={"precision": st.sampled_from(["fp16", "bf16", "fp8"]), "optimizer": st.sampled_from(["adam", "sgd", "muon"])},
        ),
        "parallel": st.fixed_dictionaries(
            {"dp_size": typed_ints, "tp_size": st.sampled_from([1, 2, 4, 8]), "pp_size": st.sampled_from([1, 2, 4, 8])},
            optional={
                "micro_batch_size": st.sampled_from([1, 2, 4]), "zero_stage": st.integers(0, 3),
                "virtual_stages": st.sampled_from([1, 2, 3]), "recompute": st.sampled_from(["none", "selective", "full"]),
                "sequence_parallel": st.booleans(),
            },
        ),
    },
    optional={"num_gpus": st.sampled_from([1, 8, 16, 64])},
)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=typed_bodies)
def test_well_typed_bodies_reach_the_solver_and_get_200_or_422(api, body):
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code in (200, 422), (body, response.text)
    if response.status_code == 422:
        assert all(e["field"].startswith("body") for e in response.json()["errors"])


rule = st.one_of(
    st.integers(min_value=-1, max_value=16), st.lists(st.integers(min_value=0, max_value=16), max_size=3),
    st.fixed_dictionaries({}, optional={"min": st.integers(-1, 16), "max": st.integers(-1, 16)}),
    st.sampled_from(["8", True, None, 2.5]),
)
plan_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt3-350m", "gpt3-1.3b", "bert-large", "gpt3-175b"]),
        "cluster": st.sampled_from(["dgx-a100-80gb-x1", "dgx1-v100-x1"]),
        "training": st.fixed_dictionaries(
            {"global_batch_size": st.sampled_from([1, 8, 96, 512]), "seq_length": st.sampled_from([512, 2048])},
            optional={"train_tokens": st.sampled_from([1e9, 3e11])},
        ),
        "time_budget_s": st.just(2.0),
    },
    optional={
        "objective": st.sampled_from(["max_throughput", "min_time_to_train", "min_cost", "min_gpus", "best"]),
        "constraints": st.fixed_dictionaries(
            {},
            optional={
                "tp_size": rule, "pp_size": rule, "dp_size": rule, "zero_stage": rule, "micro_batch_size": rule,
                "virtual_stages": rule, "num_gpus": rule,
                "recompute": st.sampled_from(["none", ["selective", "full"], "all", []]),
                "sequence_parallel": st.sampled_from([True, [False], "no"]),
                "max_memory_fraction": st.sampled_from([0.5, 1.0, 0, 2]),
                "framework": st.sampled_from(["megatron", "deepspeed", "fsdp", "any", "jax"]),
            },
        ),
        "top_k": st.integers(min_value=0, max_value=4),
        "deadline_s": st.sampled_from([86400.0, -1.0]),
        "num_gpus": st.sampled_from([1, 4, 8, 9]),
    },
)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=plan_bodies)
def test_random_plan_bodies_get_201_200_or_422(api, body):
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201, 422), (body, response.text)
    if response.status_code == 422:
        assert all(e["field"].startswith("body") and e["reason"] for e in response.json()["errors"])
    else:
        assert response.json()["status"] in ("succeeded", "infeasible")

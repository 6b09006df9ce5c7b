"""Issue 17, defect 3: figures so small or so large that a prediction would be infinite (a
denormal efficiency, a 1e-300 memory fraction) are refused with a 422 naming the field, through
HTTP on SQLite and Postgres, and through the solver library itself; no response or stored plan
carries NaN, Infinity or a null step time."""

from __future__ import annotations

import json
import math

import pytest

import catalog
from conftest import assert_problem, error_fields
from solver.cost.evaluate import evaluate
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec, GpuSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import TrainingSpec

DENORMAL = 5e-324
GPU = {"name": "inline-gpu", "peak_tflops": {"bf16": 312.0}, "memory_gib": 80.0, "hbm_gbytes_per_s": 2039.0,
       "gemm_efficiency": {"bf16": 0.8}}
CLUSTER = {"name": "inline-cluster", "gpu": GPU, "gpus_per_node": 8, "num_nodes": 1,
           "intra_node_gbytes_per_s": 300.0, "inter_node_gbytes_per_s": 25.0}
TRAINING = {"global_batch_size": 64, "seq_length": 2048}


def _cluster(**changes: object) -> dict:
    gpu_changes = {k[4:]: v for k, v in changes.items() if k.startswith("gpu.")}
    cluster_changes = {k: v for k, v in changes.items() if not k.startswith("gpu.")}
    return {**CLUSTER, **cluster_changes, "gpu": {**GPU, **gpu_changes}}


OUT_OF_RANGE = [
    ({"gpu.gemm_efficiency": {"bf16": DENORMAL}}, "body.cluster.gpu.gemm_efficiency.bf16"),
    ({"gpu.hbm_efficiency": DENORMAL}, "body.cluster.gpu.hbm_efficiency"),
    ({"gpu.peak_tflops": {"bf16": DENORMAL}}, "body.cluster.gpu.peak_tflops.bf16"),
    ({"gpu.memory_gib": DENORMAL}, "body.cluster.gpu.memory_gib"),
    ({"gpu.hbm_gbytes_per_s": 1e300}, "body.cluster.gpu.hbm_gbytes_per_s"),
    ({"intra_node_bus_efficiency": DENORMAL}, "body.cluster.intra_node_bus_efficiency"),
    ({"inter_node_gbytes_per_s": DENORMAL}, "body.cluster.inter_node_gbytes_per_s"),
    ({"inter_node_latency_us": 1e300}, "body.cluster.inter_node_latency_us"),
]


@pytest.mark.parametrize(("changes", "field"), OUT_OF_RANGE)
def test_an_evaluation_with_an_out_of_range_hardware_figure_is_a_422_naming_it(api, changes, field):
    body = {"model": "gpt3-350m", "cluster": _cluster(**changes), "training": TRAINING, "parallel": {"dp_size": 8}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert field in error_fields(problem)


@pytest.mark.parametrize(("changes", "field"), OUT_OF_RANGE[:3])
def test_a_plan_with_an_out_of_range_hardware_figure_is_a_422_and_nothing_is_stored(api, changes, field):
    body = {"model": "gpt3-350m", "cluster": _cluster(**changes), "training": TRAINING, "top_k": 1}
    problem = assert_problem(api.post("/v1/plans", json=body), 422)
    assert field in error_fields(problem)
    listed = api.get("/v1/plans", params={"model": "gpt3-350m", "limit": 100}).json()["items"]
    assert all(item["cluster"] != CLUSTER["name"] for item in listed)  # nothing stored under it


@pytest.mark.parametrize(("path", "value", "field"), [
    (("constraints", "max_memory_fraction"), 1e-300, "body.constraints.max_memory_fraction"),
    (("training", "train_tokens"), 1e300, "body.training.train_tokens"),
    (("gpu_hour_price_usd",), 1e300, "body.gpu_hour_price_usd"),
    (("deadline_s",), 1e300, "body.deadline_s"),
])
def test_a_plan_with_an_out_of_range_request_figure_is_a_422_naming_it(api, path, value, field):
    body: dict = {"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": dict(TRAINING), "top_k": 1}
    target = body
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    problem = assert_problem(api.post("/v1/plans", json=body), 422)
    assert field in error_fields(problem)


def test_the_smallest_and_largest_admitted_figures_give_finite_json(api):
    """At the edges of every range the prediction is a finite number, not null or Infinity."""
    slow = _cluster(**{"gpu.gemm_efficiency": {"bf16": 1e-3}, "gpu.hbm_efficiency": 1e-3,
                       "gpu.peak_tflops": {"bf16": 1e-3}, "gpu.hbm_gbytes_per_s": 0.1,
                       "intra_node_bus_efficiency": 1e-3, "inter_node_gbytes_per_s": 1e-3,
                       "inter_node_latency_us": 1e6, "intra_node_latency_us": 1e6})
    body = {"model": "gpt3-350m", "cluster": slow, "training": {**TRAINING, "train_tokens": 1e18},
            "parallel": {"dp_size": 2, "tp_size": 2, "pp_size": 2}}
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    assert "Infinity" not in response.text and "NaN" not in response.text
    prediction = response.json()["prediction"]
    for key in ("step_time_s", "tokens_per_s", "mfu", "time_to_train_s"):
        assert isinstance(prediction[key], float) and math.isfinite(prediction[key]) and prediction[key] > 0, key


def test_the_library_refuses_the_same_figures_naming_the_field():
    a100 = catalog.get_gpu("a100-sxm4-80gb")
    with pytest.raises(SpecError) as error:
        GpuSpec("g", {"bf16": 312e12}, 80 * 2**30, 2.0e12, {"bf16": DENORMAL})
    assert error.value.field == "gpu.gemm_efficiency.bf16"
    with pytest.raises(SpecError) as error:
        ClusterSpec("c", a100, 8, 1, 300e9, 25e9, inter_node_bus_efficiency=DENORMAL)
    assert error.value.field == "cluster.inter_node_bus_efficiency"
    with pytest.raises(SpecError) as error:
        TrainingSpec(64, 2048, train_tokens=math.inf)
    assert error.value.field == "training.train_tokens"
    with pytest.raises(SpecError) as error:
        Constraints.parse({"max_memory_fraction": 1e-300})
    assert error.value.field == "constraints.max_memory_fraction"
    model, cluster = catalog.get_model("gpt3-350m"), catalog.get_cluster("dgx-a100-80gb-x1")
    with pytest.raises(SpecError) as error:
        evaluate(model, cluster, TrainingSpec(64, 2048), ParallelConfig(8), max_memory_fraction=1e-300)
    assert error.value.field == "constraints.max_memory_fraction"


def test_a_search_result_serialises_without_nan_or_infinity():
    model, cluster = catalog.get_model("gpt3-350m"), catalog.get_cluster("dgx-a100-80gb-x1")
    result = search(SearchRequest(model, cluster, TrainingSpec(64, 2048, train_tokens=1e18), top_k=2))
    assert result.candidates
    json.dumps(result.to_dict(), allow_nan=False)  # raises on NaN or Infinity


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_the_database_never_stores_nan_or_infinity(database_url, value):
    """Whatever reaches a JSON column, NaN and Infinity are refused before they are written, on
    SQLite (which stored them as the non-JSON words Infinity and NaN) as on Postgres (whose JSONB
    rejects them only after the round trip, a DataError): the serializer's ValueError on both,
    and nothing stored."""
    from sqlalchemy import select
    from sqlalchemy.exc import StatementError

    from app.catalog.models import CustomModel
    from app.core.db import make_engine, make_sessionmaker, utc_now
    from conftest import unique_name

    engine = make_engine(database_url)
    name = unique_name("nonfinite")
    try:
        with make_sessionmaker(engine)() as session:
            session.add(CustomModel(name=name, spec={"hidden_size": value}, created_at=utc_now()))
            with pytest.raises((StatementError, ValueError)) as refused:
                session.commit()
            # SQLAlchemy wraps the serializer's ValueError on SQLite; psycopg raises it as it is.
            error = refused.value.orig if isinstance(refused.value, StatementError) else refused.value
            assert isinstance(error, ValueError) and "JSON compliant" in str(error), refused.value
            session.rollback()
            assert session.scalars(select(CustomModel).where(CustomModel.name == name)).first() is None
    finally:
        engine.dispose()

"""CUDA_LAUNCH_BLOCKING=1 (``training.launch_blocking``): every kernel launch waits for its kernel,
so a layer's host work adds to its GPU work instead of running ahead of it. BLOOM-176B's runs on
Jean Zay set it (bigscience train/tr11-176B-ml/tr11-176B-ml.slurm), and BigScience measured what
it cost them (train/tr11-176B-ml/chronicles-prequel.md, 'dealing with JZ hanging on the large
model': a 200B model at its second iteration, 91.04 TFLOPs blocking vs 97.20 asynchronous on 80
GPUs, 84.59 vs 84.44 and 90.29 vs 90.25 on 160)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

import catalog
from bench import accuracy
from conftest import assert_problem, error_fields
from solver.cost.analytic import analytic_profile, layer_with_host_s
from solver.cost.profile import ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Precision, Recompute, TrainingSpec, ZeroStage

# The largest cost BigScience measured: 97.20 / 91.04 TFLOPs on 80 GPUs.
MEASURED_COST_MAX = 97.20 / 91.04 - 1
BLOOM_SOURCES = ("bloom-prequel", "bloom176b")


def test_a_blocking_layer_takes_its_gpu_and_host_work_in_turn():
    cluster = catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-a100-80gb", 8))
    small = ModelSpec("small", 4, 1024, 16, 50257, 1024)
    large = ModelSpec("large", 4, 8192, 64, 50257, 2048)
    host = 0.001
    for model, micro_batch in ((small, 8), (large, 1)):
        plain = TrainingSpec(8, model.seq_length, Precision.FP16, flash_attention=False)
        shape = ProfileShape(micro_batch, 1, False)
        gpu = analytic_profile(model, cluster, plain, shape).transformer_layers[0]
        blocking = analytic_profile(model, cluster, dataclasses.replace(plain, host_s_per_layer=host, launch_blocking=True), shape)
        layer = blocking.transformer_layers[0]
        assert layer.forward_s == pytest.approx(gpu.forward_s + host)
        assert layer.backward_s == pytest.approx(gpu.backward_s + 2 * host)
        # A stack without a measured host time adds nothing, blocking or not.
        unmeasured = analytic_profile(model, cluster, dataclasses.replace(plain, launch_blocking=True), shape)
        assert unmeasured.transformer_layers[0].forward_s == pytest.approx(gpu.forward_s)
    assert layer_with_host_s(3.0, 1.0, False) == 3.0
    assert layer_with_host_s(3.0, 1.0, True) == 4.0
    with pytest.raises(SpecError) as error:
        TrainingSpec(8, 1024, launch_blocking="yes")
    assert error.value.field == "training.launch_blocking"


def _bloom_results(launch_blocking: bool) -> dict[str, accuracy.RunResult]:
    inputs = copy.deepcopy(accuracy.load_inputs())
    for source in BLOOM_SOURCES:
        inputs["sources"][source]["launch_blocking"] = launch_blocking
    records = [r for r in accuracy.load_records() if accuracy.family_of(r["id"], inputs) == "bloom"]
    return {r["id"]: accuracy.evaluate_record(r, inputs) for r in records}


def test_bloom_runs_state_it_and_its_cost_stays_within_bigscience_measurement():
    inputs = accuracy.load_inputs()
    assert all(inputs["sources"][source]["launch_blocking"] is True for source in BLOOM_SOURCES)
    blocking, asynchronous = _bloom_results(True), _bloom_results(False)
    assert len(blocking) == 17
    for run_id, result in blocking.items():
        before = asynchronous[run_id]
        # Iteration times: blocking launches cost BLOOM's layers between nothing and the 6.8%
        # BigScience measured at most.
        cost = result.predicted / before.predicted - 1
        assert 0.0 < cost <= MEASURED_COST_MAX, (run_id, cost)
        # Every BLOOM run is slower than the model says; the mechanism narrows each gap without
        # crossing it.
        assert 0.0 < result.error < before.error, (run_id, result.error, before.error)


def _body(**training) -> dict:
    return {
        "model": "gpt3-13b", "cluster": "dgx-a100-80gb-x8", "num_gpus": 64,
        "training": {"global_batch_size": 512, "seq_length": 2048, "precision": "fp16", **training},
        "parallel": {"dp_size": 8, "tp_size": 4, "pp_size": 2, "zero_stage": 1, "micro_batch_size": 1, "recompute": "full"},
    }


def test_the_api_takes_the_flag_and_evaluates_as_the_solver(api):
    stack = {"stack": "megatron-deepspeed-2022"}
    default = api.post("/v1/evaluations", json=_body(**stack))
    asynchronous = api.post("/v1/evaluations", json=_body(**stack, launch_blocking=False))
    blocking = api.post("/v1/evaluations", json=_body(**stack, launch_blocking=True))
    assert default.status_code == asynchronous.status_code == blocking.status_code == 200, blocking.text
    step_s = {name: r.json()["prediction"]["step_time_s"] for name, r in (("default", default), ("async", asynchronous), ("blocking", blocking))}
    assert step_s["default"] == step_s["async"]
    assert step_s["blocking"] > step_s["async"]
    # A stack that states no host time: the flag changes nothing.
    core = [api.post("/v1/evaluations", json=_body(stack="megatron-core-2024", launch_blocking=flag)) for flag in (False, True)]
    assert core[0].json()["prediction"]["step_time_s"] == core[1].json()["prediction"]["step_time_s"]


@pytest.mark.parametrize("value", ["yes", 1])
def test_a_bad_value_is_a_422_naming_the_field(api, value):
    response = api.post("/v1/evaluations", json=_body(launch_blocking=value))
    assert "body.training.launch_blocking" in error_fields(assert_problem(response, 422))


def _export(framework: ExportFormat, launch_blocking: bool):
    training = TrainingSpec(512, 2048, Precision.BF16, launch_blocking=launch_blocking)
    parallel = ParallelConfig(dp_size=4, tp_size=2, pp_size=1, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL)
    return export_plan(PlanToExport(catalog.get_model("llama2-7b"), training, parallel, 8), framework)


@pytest.mark.parametrize("framework", [ExportFormat.MEGATRON, ExportFormat.DEEPSPEED])
def test_launch_scripts_start_the_job_as_planned(framework):
    blocking, asynchronous = _export(framework, True), _export(framework, False)
    assert blocking.exact and not blocking.differences and blocking.training.launch_blocking
    (script,) = [f.text for f in blocking.files if f.name.endswith(".sh")]
    (plain,) = [f.text for f in asynchronous.files if f.name.endswith(".sh")]
    lines = script.splitlines()
    # Set before the launcher starts the ranks, which inherit it.
    assert "export CUDA_LAUNCH_BLOCKING=1" in lines
    assert lines.index("export CUDA_LAUNCH_BLOCKING=1") < next(i for i, line in enumerate(lines) if not line.startswith(("#", "set ", "export ", "unset ")))
    assert "CUDA_LAUNCH_BLOCKING" not in plain


@pytest.mark.parametrize("framework", [ExportFormat.TORCHTITAN, ExportFormat.NEMO])
def test_configuration_files_name_what_they_cannot_set(framework):
    export = _export(framework, True)
    (difference,) = [d for d in export.differences if d.field == "training.launch_blocking"]
    assert (difference.planned, difference.exported) == ("true", "false") and "CUDA_LAUNCH_BLOCKING=1" in difference.reason
    assert not export.exact and not export.training.launch_blocking
    assert "training.launch_blocking" not in [d.field for d in _export(framework, False).differences]

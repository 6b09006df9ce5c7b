"""The catalog package: calibration overrides from the environment, sourced calibration knobs."""

from __future__ import annotations

import json
import os

import catalog
from catalog.conversion import DEFAULT_GEMM_EFFICIENCY
from catalog.loader import OVERRIDES_ENV
from solver.spec import hardware
from solver.spec.training import Precision


def _override(path, saturation_dim: float) -> str:
    document = {"gpus": [{"name": "h100-sxm5-80gb", "gemm_saturation_dim": saturation_dim,
                          "sources": {"gemm_saturation_dim": f"test override {saturation_dim}"}}]}
    path.write_text(json.dumps(document))
    return str(path)


def test_changing_the_overrides_variable_in_a_process_takes_effect(tmp_path, monkeypatch):
    monkeypatch.delenv(OVERRIDES_ENV, raising=False)
    builtin = catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim
    first = _override(tmp_path / "first.json", 96.0)
    second = _override(tmp_path / "second.json", 48.0)

    monkeypatch.setenv(OVERRIDES_ENV, first)
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == 96.0
    assert catalog.get_entry("gpus", "h100-sxm5-80gb")["sources"]["gemm_saturation_dim"] == "test override 96.0"

    monkeypatch.setenv(OVERRIDES_ENV, second)
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == 48.0

    monkeypatch.setenv(OVERRIDES_ENV, os.pathsep.join([second, first]))  # later files win
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == 96.0

    monkeypatch.delenv(OVERRIDES_ENV)
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == builtin
    h100 = {e["name"]: e for e in catalog.list_entries("gpus")}["h100-sxm5-80gb"]
    assert "test override" not in h100["sources"].get("gemm_saturation_dim", "")


def test_every_builtin_gpu_states_its_calibration_knobs_with_a_source():
    """No built-in GPU leans on a solver default: each knob is in its entry with its source."""
    for entry in catalog.list_entries("gpus"):
        for key in ("gemm_efficiency", "hbm_efficiency", "num_sms", "gemm_saturation_dim"):
            assert entry.get(key) is not None, (entry["name"], key)
            assert entry["sources"].get(key), (entry["name"], key)


def test_a_spec_without_knobs_gets_the_solver_defaults_stated_once():
    gpu = catalog.gpu_spec_from_dict({"name": "my-gpu", "peak_tflops": {"bf16": 312.0}, "memory_gib": 80.0,
                                      "hbm_gbytes_per_s": 2039.0})
    assert (gpu.num_sms, gpu.gemm_saturation_dim, gpu.hbm_efficiency, gpu.kernel_launch_s) == (
        hardware.DEFAULT_NUM_SMS, hardware.DEFAULT_GEMM_SATURATION_DIM, hardware.DEFAULT_HBM_EFFICIENCY,
        hardware.KERNEL_LAUNCH_S,
    )
    assert gpu.efficiency(Precision.BF16) == DEFAULT_GEMM_EFFICIENCY
    cluster = catalog.cluster_spec_from_dict({"name": "c", "gpu": "a100-sxm4-80gb", "gpus_per_node": 8, "num_nodes": 2,
                                              "intra_node_gbytes_per_s": 300.0, "inter_node_gbytes_per_s": 25.0})
    assert (cluster.intra_node_latency_s, cluster.inter_node_latency_s) == (
        hardware.DEFAULT_INTRA_NODE_LATENCY_S, hardware.DEFAULT_INTER_NODE_LATENCY_S,
    )
    assert cluster.intra_node_bus_efficiency == cluster.inter_node_bus_efficiency == hardware.DEFAULT_BUS_EFFICIENCY

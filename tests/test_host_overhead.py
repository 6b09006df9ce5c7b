"""The framework's host time per layer (a stack fact): a layer takes the longer of its GPU work
and its host work. Derived from, and checked against, vTrain's 1,440 single-node Megatron-DeepSpeed
runs on A100 (bench/vtrain_single.py), which are not in the accuracy bench."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

import catalog
from bench import vtrain_single
from solver.cost.analytic import analytic_profile
from solver.cost.profile import ProfileShape
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.training import Precision, TrainingSpec


def test_stack_fact_is_the_measured_floor():
    floor_s = vtrain_single.host_floor_s(vtrain_single.load_rows())
    assert catalog.get_stack_facts("megatron-deepspeed-2022")["host_s_per_layer"] == pytest.approx(round(floor_s, 5))


def test_a_layer_takes_the_longer_of_gpu_and_host_work():
    cluster = catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-a100-80gb", 8))
    small = ModelSpec("small", 4, 1024, 16, 50257, 1024)
    large = ModelSpec("large", 4, 8192, 64, 50257, 2048)
    host = 0.001
    for model, host_bound in ((small, True), (large, False)):
        plain = TrainingSpec(8, model.seq_length, Precision.FP16, flash_attention=False)
        busy = dataclasses.replace(plain, host_s_per_layer=host)
        shape = ProfileShape(8 if host_bound else 1, 1, False)
        gpu = analytic_profile(model, cluster, plain, shape).transformer_layers[0]
        both = analytic_profile(model, cluster, busy, shape).transformer_layers[0]
        assert both.forward_s == pytest.approx(max(gpu.forward_s, host))
        assert both.backward_s == pytest.approx(max(gpu.backward_s, 2 * host))
        assert (both.forward_s > gpu.forward_s) is host_bound
    with pytest.raises(SpecError) as error:
        TrainingSpec(8, 1024, host_s_per_layer=2.0)
    assert error.value.field == "training.host_s_per_layer"


def test_held_out_single_node_runs():
    """Without the host floor the model is 45% off these runs (small layers are all host time);
    with it, about 11%."""
    found = vtrain_single.errors(vtrain_single.load_rows())
    assert len(found) == 1440
    assert statistics.mean(abs(e) for _, e in found) < 0.12

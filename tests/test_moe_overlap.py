"""The EP all-to-all overlap stack fact (``TrainingSpec.ep_comm_overlap``, issue 16): an MoE
layer's dispatch and combine all-to-alls, run beside another micro-batch's compute (Megatron-core's
combined 1F1B schedule, DeepSeek-V3's DualPipe), cost what that compute loses beside them, the
physics of the overlapped TP collectives; dense layers and dense models are costed exactly as
before."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from solver.cost.analytic import analytic_profile
from solver.cost.comm import overlapped_exposed_s
from solver.cost.evaluate import evaluate
from solver.cost.moe import ep_comm_exposed_s, moe_mlp_cost
from solver.cost.profile import ProfileShape
from solver.spec.parallel import ParallelConfig
from solver.spec.training import TrainingSpec, ZeroStage

MIXTRAL = catalog.get_model("mixtral-8x7b")
DEEPSEEK = catalog.get_model("deepseek-v3")
H800 = catalog.get_cluster("hgx-h800-x256")
EXPOSED = TrainingSpec(global_batch_size=256, seq_length=4096)
OVERLAPPED = dataclasses.replace(EXPOSED, ep_comm_overlap=True)


def test_the_fact_is_off_by_default_and_every_stack_states_it_with_a_source():
    assert EXPOSED.ep_comm_overlap is False
    for entry in catalog.list_entries("stacks"):
        assert isinstance(entry["facts"]["ep_comm_overlap"], bool), entry["name"]
        assert entry["sources"]["ep_comm_overlap"], entry["name"]
    # NVIDIA's own DeepSeek-V3 presets leave Megatron-core's combined 1F1B EP overlap off.
    assert catalog.get_stack_facts("megatron-core-2024")["ep_comm_overlap"] is False


def test_without_overlap_the_four_all_to_alls_are_exposed_whole():
    assert ep_comm_exposed_s(0.004, 0.010, False, 0.189) == 0.004


@pytest.mark.parametrize(("comm_s", "compute_s"), [(0.004, 0.010), (0.004, 0.001), (0.0, 0.01)])
def test_with_overlap_they_cost_what_compute_loses_beside_them(comm_s, compute_s):
    slowdown = 0.189
    exposed = ep_comm_exposed_s(comm_s, compute_s, True, slowdown)
    assert exposed == overlapped_exposed_s(comm_s, compute_s, slowdown)
    assert exposed <= comm_s
    assert exposed >= comm_s * slowdown / (1 + slowdown) - 1e-15  # never free (Lee et al. 2025)
    assert exposed >= comm_s - compute_s - 1e-15  # longer than the compute: the rest shows


@pytest.mark.parametrize("ep_size", [8, 64])
def test_an_moe_layer_hides_its_all_to_alls_behind_its_own_forward_and_backward(ep_size):
    shape = ProfileShape(1, 1, False, 1, ep_size)
    exposed = analytic_profile(DEEPSEEK, H800, EXPOSED, shape).transformer_layers[3]
    overlapped = analytic_profile(DEEPSEEK, H800, OVERLAPPED, shape).transformer_layers[3]
    tokens = 4096
    wire_s = moe_mlp_cost(DEEPSEEK, H800, EXPOSED.precision, tokens, 1, ep_size).ep_comm_s
    assert exposed.ep_comm_s == pytest.approx(wire_s)
    compute_s = overlapped.forward_s + overlapped.backward_s
    assert overlapped.ep_comm_s == pytest.approx(overlapped_exposed_s(wire_s, compute_s, H800.gpu.overlap_slowdown))
    assert overlapped.ep_comm_s < exposed.ep_comm_s
    # Only the all-to-alls move: the layer's compute, memory and parameters are the same.
    assert dataclasses.replace(overlapped, ep_comm_s=exposed.ep_comm_s) == exposed


def test_dense_layers_and_dense_models_do_not_move():
    shape = ProfileShape(1, 1, False, 1, 8)
    exposed = analytic_profile(DEEPSEEK, H800, EXPOSED, shape)
    overlapped = analytic_profile(DEEPSEEK, H800, OVERLAPPED, shape)
    for index in range(DEEPSEEK.first_dense_layers):  # DeepSeek-V3's three dense layers
        assert overlapped.transformer_layers[index] == exposed.transformer_layers[index]
    llama = catalog.get_model("llama2-7b")
    assert analytic_profile(llama, H800, OVERLAPPED, ProfileShape()).layers == analytic_profile(llama, H800, EXPOSED, ProfileShape()).layers


def test_overlap_shortens_the_step_of_an_expert_parallel_plan_and_only_its_all_to_all_share():
    cluster = dataclasses.replace(H800, num_nodes=8)
    parallel = ParallelConfig(dp_size=64, zero_stage=ZeroStage.OS, ep_size=8)
    exposed = evaluate(MIXTRAL, cluster, EXPOSED, parallel)
    overlapped = evaluate(MIXTRAL, cluster, OVERLAPPED, parallel)
    assert overlapped.prediction.step_time_s < exposed.prediction.step_time_s
    # The same useful work in less time: model TFLOP/s rise with tokens/s, memory does not move.
    speedup = exposed.prediction.step_time_s / overlapped.prediction.step_time_s
    assert overlapped.prediction.model_tflops_per_gpu == pytest.approx(exposed.prediction.model_tflops_per_gpu * speedup)
    assert overlapped.peak_bytes == exposed.peak_bytes

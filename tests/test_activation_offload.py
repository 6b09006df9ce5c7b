"""Partial activation offload (Megatron-core ``cpu_offloading_num_layers`` through Transformer
Engine's CPU offload, ``solver.cost.offload``): the memory it frees, the host memory it takes, the
copy rate over the node's host link, the copy time its schedule exposes, and its legality."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.accuracy import _cluster_for, _model_for, load_blackwell_records, load_inputs, record_settings, training_for
from solver.cost.evaluate import evaluate
from solver.cost.offload import activation_offload_exposed_s, host_copy_bytes_per_s
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule
from solver.spec.training import Recompute, ZeroStage

GIB = 2**30


def test_copies_shorter_than_the_layers_between_hide_entirely():
    # 10 layers of 1 s forward and 2 s backward, 4 offloaded at 1 s each: every copy has the
    # forward of 5 layers before its deadline and the backward of 5 layers of lead.
    layers = tuple((1.0, 2.0, 1.0 if i < 4 else 0.0) for i in range(10))
    assert activation_offload_exposed_s(layers, 1.0) == 0.0


def test_copies_longer_than_the_layers_between_are_exposed_on_tes_schedule():
    # L = 4, N = 2, f = 1, b = 2, c = 3 (bytes 3 at 1 byte/s). Forward: layer 0's copy runs 1-4,
    # layer 1's 4-7; layer 2 starts at 4 (waits 2 for copy 0), layer 3 at 7 (waits 2): 8 s for 4.
    # Backward: layer 1's reload starts with layer 2's backward (t 2, ready 5), layer 0's with
    # layer 1's (t 4, stream busy till 5, ready 8); layer 1 waits 1, layer 0 waits 1: 10 s for 8.
    layers = ((1.0, 2.0, 3.0), (1.0, 2.0, 3.0), (1.0, 2.0, 0.0), (1.0, 2.0, 0.0))
    assert activation_offload_exposed_s(layers, 1.0) == pytest.approx(4.0 + 2.0)
    assert activation_offload_exposed_s(layers[:2] + ((1.0, 2.0, 0.0),) * 2, 3.0) == 0.0


def test_grace_nodes_copy_over_nvlink_c2c_and_x86_nodes_over_pcie():
    gb200 = _node("gb200-nvl72", 64)
    # NVLink-C2C 900 GB/s bidirectional per superchip = 225 GB/s one way per GPU, x 0.8;
    # the Grace LPDDR5X share (1,024 GB/s per tray x 0.8 / 4 GPUs = 204.8 GB/s) is above it.
    assert host_copy_bytes_per_s(gb200, 64) == pytest.approx(180e9)
    # DGX H100: PCIe Gen5 64 GB/s x 0.8 = 51.2 GB/s, under its DDR5 share (614.4 x 0.8 / 8).
    assert host_copy_bytes_per_s(_node("dgx-h100", 8), 8) == pytest.approx(51.2e9)


def _node(name: str, gpus: int):
    return _cluster_for({"cluster": {"gpus": gpus}}, {"node": name})


def _bench_inputs(run_id: str):
    """The bench's model, cluster and training of a Megatron-Bridge 26.02 Llama 3 70B FSDP run."""
    record = next(r for r in load_blackwell_records() if r["id"] == run_id)
    settings = record_settings(record, load_inputs())
    model = _model_for(record, settings)
    assert model is not None
    return model, _cluster_for(record, settings), training_for(record, settings, model)


def _llama3_70b(cluster: str, layers: int, **change):
    model, nodes, training = _bench_inputs(f"mbridge2602-dgx-{cluster}-llama3-70b-64gpu-fp8-cs")
    parallel = replace(ParallelConfig(64, 1, 1, ZeroStage.OS_G_P, 2, Recompute.NONE, activation_offload_layers=layers), **change)
    return evaluate(model, nodes, training, parallel, num_gpus=64)


def test_offloading_20_of_80_layers_frees_20_layers_activations_and_moves_them_to_the_host():
    # Megatron-Bridge 26.02's Llama 3 70B FP8 preset on GB300 (cpu_offloading_num_layers 20).
    without, offloaded = _llama3_70b("gb300", 0), _llama3_70b("gb300", 20)
    before = without.stages[0].memory_bytes.activations
    after = offloaded.stages[0].memory_bytes.activations
    # TE's peak: (L - N) layers' kept activations. The one layer's backward working set beside
    # them (solver.cost.stage.working_bytes) stays: every offloaded layer frees the same bytes.
    further = _llama3_70b("gb300", 40).stages[0].memory_bytes.activations
    assert before - after == pytest.approx(after - further)
    per_layer = (before - after) / 20
    assert before * 60 / 80 < after < before * 61 / 80  # the working set is well under one layer's activations
    # One micro-batch of 2 x 8192 tokens, h 8192, no recomputation: about 3.9 GB a layer.
    assert 3.5e9 < per_layer < 4.3e9
    # The node's 4 GPUs each keep 20 layers of one micro-batch in pinned host memory.
    assert offloaded.host_bytes_per_node == pytest.approx(4 * 20 * per_layer)
    assert without.host_bytes_per_node == 0
    assert not [v for v in offloaded.violations if v.rule in (Rule.MEMORY, Rule.HOST_MEMORY)]
    # 3.9 GB at 180 GB/s is 22 ms a layer, hidden behind forward (13 ms a layer, 78 layers of
    # room for 20 copies) and backward: the step time is unchanged.
    assert offloaded.prediction.step_time_s == pytest.approx(without.prediction.step_time_s)


@pytest.mark.parametrize(
    "change, rule",
    [
        (dict(pp_size=2, dp_size=32, zero_stage=ZeroStage.OS), Rule.ACTIVATION_OFFLOAD_LAYERS),
        (dict(recompute=Recompute.SELECTIVE), Rule.ACTIVATION_OFFLOAD_LAYERS),
        (dict(activation_offload_layers=80), Rule.ACTIVATION_OFFLOAD_LAYERS),
    ],
)
def test_activation_offload_is_legal_only_as_megatron_core_runs_it(change, rule):
    with pytest.raises(SpecError) as error:
        _llama3_70b("gb300", 20, **change)
    assert error.value.rule is rule


def test_a_negative_layer_count_is_refused():
    with pytest.raises(SpecError):
        ParallelConfig(activation_offload_layers=-1)

"""ZeRO-3 collectives as stacks issue them, and the slowdown of compute that runs beside a
collective (issue 13, mechanisms 3 and 4)."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from conftest import node_cluster
from solver.cost.comm import inter_node_link, intra_node_link, overlapped_exposed_s
from solver.cost.evaluate import evaluate
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Precision, Recompute, TrainingSpec, Zero3Collectives, ZeroStage


def test_overlapped_compute_pays_its_slowdown():
    """Compute C beside a collective K runs 1 + s times slower while both run (Lee et al. 2025:
    s = 0.189 on average): K s / (1 + s) extra while compute outlasts the collective, K - C once
    the collective sets the pace; continuous where they meet."""
    s = 0.189
    assert overlapped_exposed_s(1.0, 10.0, s) == pytest.approx(s / (1 + s))
    assert overlapped_exposed_s(10.0, 1.0, s) == pytest.approx(9.0)
    meet = 2.0 * (1 + s)
    assert overlapped_exposed_s(meet, 2.0, s) == pytest.approx(meet - 2.0)
    assert overlapped_exposed_s(0.0, 5.0, s) == 0.0
    assert overlapped_exposed_s(1.0, 10.0, 0.0) == 0.0


def test_zero3_per_tensor_collectives_pay_ring_latency_per_tensor():
    """DeepSpeed v0.3.x gathers and reduce-scatters each parameter tensor on its own (12 per GPT
    layer) and waits for each on the compute stream; the step then carries every gather and
    reduce-scatter in full, and each call pays the ring's n - 1 step latencies: the 31 steps
    between the 32 nodes at the network's latency, the other 224 at NVLink's (NCCL's tuning
    model, src/graph/tuning.cc)."""
    cluster = node_cluster("dgx-a100-80gb", 256)
    model = catalog.get_model("gpt3-1.3b")
    par = ParallelConfig(256, 1, 1, ZeroStage.OS_G_P, 1, Recompute.NONE)
    layer_wise = TrainingSpec(256, 2048, Precision.BF16)
    per_tensor = dataclasses.replace(layer_wise, zero3_collectives=Zero3Collectives.PER_TENSOR, zero3_overlap=False)
    serial_layers = dataclasses.replace(layer_wise, zero3_overlap=False)
    ev = {name: evaluate(model, cluster, spec, par, num_gpus=256).prediction
          for name, spec in (("layer", layer_wise), ("tensor", per_tensor), ("serial", serial_layers))}
    # Serial per-layer collectives: two gathers and one reduce-scatter, each per layer.
    exposed_serial = ev["serial"].breakdown_s["dp_comm_exposed_s"]
    exposed_tensor = ev["tensor"].breakdown_s["dp_comm_exposed_s"]
    per_call_s = 31 * inter_node_link(cluster).latency_s + 224 * intra_node_link(cluster).latency_s
    calls_per_layer = 12
    layers = model.num_layers
    # The per-tensor extra latency: 3 passes x (calls - layer-wise calls) x per-call latency.
    extra_calls = (layers * calls_per_layer + 2 + 2) - (layers + 2)
    assert exposed_tensor - exposed_serial == pytest.approx(3 * extra_calls * per_call_s, rel=1e-9)
    # Overlapped per-layer collectives hide most of it.
    assert ev["layer"].breakdown_s["dp_comm_exposed_s"] < exposed_serial


def test_tensor_parallel_collectives_overlapped_inside_the_gemms():
    """Transformer Engine userbuffers (``tp_comm_overlap``) run the TP all-gathers and
    reduce-scatters inside the layer's GEMMs: a layer whose GEMMs outlast its collectives pays
    only the slowdown of those GEMMs, s / (1 + s) of the collective time."""
    from solver.cost.analytic import analytic_profile
    from solver.cost.profile import ProfileShape

    cluster = node_cluster("dgx-h100", 8)
    model = catalog.get_model("gpt3-175b")
    serial = TrainingSpec(1024, 2048, Precision.BF16)
    overlapped = dataclasses.replace(serial, tp_comm_overlap=True)
    shape = ProfileShape(8, 2, True)
    raw = analytic_profile(model, cluster, serial, shape).transformer_layers[0]
    hidden = analytic_profile(model, cluster, overlapped, shape).transformer_layers[0]
    s = cluster.gpu.overlap_slowdown
    assert raw.tp_comm_s > 0
    assert hidden.tp_comm_s == pytest.approx(raw.tp_comm_s * s / (1 + s))
    assert (hidden.forward_s, hidden.backward_s) == (raw.forward_s, raw.backward_s)


def test_interleaved_pipeline_overlaps_its_steady_state_p2p():
    """Megatron-core's ``overlap_p2p_comm`` (interleaved schedule only): the m v steady-state
    exchanges run beside compute and cost their slowdown; the p - 1 fill and drain exchanges stay
    exposed; a non-interleaved schedule is unchanged."""
    from solver.cost.comm import p2p_s, pp_link

    cluster = node_cluster("dgx-a100-80gb", 64)
    model = catalog.get_model("gpt3-13b")
    serial = TrainingSpec(128, 2048, Precision.BF16)
    overlapped = dataclasses.replace(serial, overlap_p2p_comm=True)
    s = cluster.gpu.overlap_slowdown
    for virtual in (1, 2):
        par = ParallelConfig(8, 2, 4, ZeroStage.NONE, 1, Recompute.NONE, virtual_stages=virtual)
        before = evaluate(model, cluster, serial, par, num_gpus=64).prediction.breakdown_s["pp_comm_s"]
        after = evaluate(model, cluster, overlapped, par, num_gpus=64).prediction.breakdown_s["pp_comm_s"]
        if virtual == 1:
            assert after == before
            continue
        link = pp_link(cluster, 2, 8, 4)
        message = 2 * 1 * 2048 * model.hidden_size / 2  # 16-bit b*s*h over tp 2
        exchange = 2 * p2p_s(message, link)
        m = 128 // 8
        steady, fill = m * virtual * exchange, 3 * exchange
        assert before == pytest.approx(steady + fill)
        assert after == pytest.approx(steady * s / (1 + s) + fill)

"""The flex token dispatcher (``training.moe_dispatcher: flex``: DeepEP, HybridEP) and group-limited
routing (``model.router_groups``, ``model.router_group_topk``): a token crosses the network once per
other NVLink domain it is routed to and is forwarded over NVLink there (DeepSeek-V3, arXiv
2412.19437 Sec 3.2.2), checked against the dispatch latencies NVIDIA measured (arXiv 2603.07685
Table 7) and against a simulation of the router; the option in the API and the exports."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_export_frameworks import _file, script_arguments

import catalog
from catalog.loader import node_cluster_entry
from solver.cost.comm import all_to_all_s, ep_ranks_per_domain, forwarded_all_to_all_s, inter_node_link, intra_node_link
from solver.cost.evaluate import evaluate
from solver.cost.moe import dispatch_bytes, ep_comm_s, remote_domain_copies
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import MoeDispatcher, TrainingSpec, ZeroStage

DEEPSEEK = catalog.get_model("deepseek-v3")
QWEN = catalog.get_model("qwen3-235b-a22b")
H100 = catalog.cluster_spec_from_dict(node_cluster_entry("dgx-h100", 1024))
GB200 = catalog.cluster_spec_from_dict(node_cluster_entry("gb200-nvl72", 72))
FLEX = MoeDispatcher.FLEX

# arXiv 2603.07685v2 Sec. 4.2.2 Table 7 ("EP Scaling Performance for HybridEP and all-to-all (in
# us)"; hidden 7168, sequence 4096, 256 experts: DeepSeek-V3's shape), the HybridEP column on H100
# nodes of 8: dispatch, combine.
H100_FLEX_US = {16: (1485, 1688), 32: (3064, 3088), 64: (4626, 4398)}


# --------------------------------------------------------------------------- the routing


def _simulated_remote_domains(model, ep_size: int, ranks_per_domain: int, tokens: int = 20000) -> float:
    """Other domains a token reaches under Megatron-core's router with independent random scores
    (the force-balanced case): with groups, each group scored by the sum of its top k / t expert
    scores and the top t groups kept (TransformerConfig moe_router_group_topk), then the top k
    experts of the kept groups."""
    rng = np.random.default_rng(0)
    experts, k = model.num_experts, model.experts_per_token
    scores = rng.random((tokens, experts))
    if model.router_groups:
        g, t = model.router_groups, model.router_group_topk
        grouped = scores.reshape(tokens, g, experts // g)
        group_scores = np.sort(grouped, axis=2)[:, :, -(k // t):].sum(axis=2)
        kept = np.argsort(group_scores, axis=1)[:, -t:]
        mask = np.zeros((tokens, g), dtype=bool)
        np.put_along_axis(mask, kept, True, axis=1)
        scores = np.where(np.repeat(mask, experts // g, axis=1), scores, -1.0)
    chosen = np.argsort(scores, axis=1)[:, -k:]
    domains = ep_size // ranks_per_domain
    reached = chosen // (experts // domains)  # the domain of each chosen expert (experts spread evenly)
    own = 0  # by symmetry, every token taken to start on domain 0
    return float(np.mean([len(set(row) - {own}) for row in reached]))


@pytest.mark.parametrize(
    ("model", "ep_size"),
    [(DEEPSEEK, 64), (DEEPSEEK, 32), (DEEPSEEK, 16), (QWEN, 32), (QWEN, 16)],
)
def test_remote_domains_match_a_simulation_of_the_router(model, ep_size):
    """DeepSeek-V3's 8 groups, top 4, on 8 nodes at ep 64: 3.5 other nodes a token, not the 7 an
    ungrouped top 8 of 256 would reach 4.6 of; Qwen3's ungrouped top 8 of 128 by C(E - E/D, k) /
    C(E, k). Within 2% of the router simulated."""
    closed = remote_domain_copies(model, ep_size, 8)
    assert closed == pytest.approx(_simulated_remote_domains(model, ep_size, 8), rel=0.02)
    if model is DEEPSEEK and ep_size == 64:
        assert closed == pytest.approx(3.5)
        ungrouped = dataclasses.replace(model, router_groups=0, router_group_topk=0)
        assert remote_domain_copies(ungrouped, 64, 8) == pytest.approx(7 * (1 - (7 / 8) ** 8), rel=0.01)


def test_an_expert_group_filling_its_nodes_unevenly_costs_as_the_alltoall():
    """ep 12 on nodes of 8 (96 experts): no even split of the experts over domains to count
    copies from, so the flex dispatcher is costed as the alltoall rather than as one node."""
    model = dataclasses.replace(QWEN, num_experts=96)
    assert ep_comm_s(H100, model, 4096, 1, 12, 1, FLEX) == ep_comm_s(H100, model, 4096, 1, 12, 1) > 0


def test_one_domain_sends_nothing_over_the_network():
    assert remote_domain_copies(DEEPSEEK, 8, 8) == 0.0
    assert ep_ranks_per_domain(GB200, 64, 1) == 64  # an NVL72 rack is one domain
    assert remote_domain_copies(DEEPSEEK, 64, ep_ranks_per_domain(GB200, 64, 1)) == 0.0


# --------------------------------------------------------------------------- the dispatch's time


@pytest.mark.parametrize("ep_size", sorted(H100_FLEX_US))
def test_flex_dispatch_matches_nvidias_measured_hybridep_on_h100(ep_size):
    """One dispatch of DeepSeek-V3's 4096 tokens x top 8 x 7168 across 2, 4 and 8 H100 nodes, as
    the model costs it, against the measured dispatch and combine: 1457 / 3470 / 5148 us against
    1485-1688 / 3064-3088 / 4398-4626 (0.86-1.17). The NCCL all-to-all of the same bytes measures
    and costs 2-4x more (tests/test_moe_parallel.py): 5882 / 8818 / 10286 us."""
    predicted_us = 1e6 * ep_comm_s(H100, DEEPSEEK, 4096, 1, ep_size, 1, FLEX) / 4
    for measured_us in H100_FLEX_US[ep_size]:
        assert predicted_us == pytest.approx(measured_us, rel=0.2)
    assert predicted_us <= 0.51 * 1e6 * ep_comm_s(H100, DEEPSEEK, 4096, 1, ep_size, 1) / 4


def test_flex_dispatch_sends_one_copy_a_node_over_the_network_and_forwards_over_nvlink():
    message = dispatch_bytes(DEEPSEEK, 4096, 1)
    network = 4096 * 3.5 * DEEPSEEK.hidden_size * 2  # 3.5 other nodes a token at ep 64
    inter, intra = inter_node_link(H100), intra_node_link(H100)
    expected = max(network / inter.bytes_per_s, message * 7 / 8 / intra.bytes_per_s) + inter.latency_s
    assert forwarded_all_to_all_s(H100, message, network, 64, 1) == pytest.approx(expected)
    assert ep_comm_s(H100, DEEPSEEK, 4096, 1, 64, 1, FLEX) == pytest.approx(4 * expected)
    # Inside one NVLink domain there is nothing to forward: the flex dispatcher costs as NCCL's.
    for cluster, ep in ((H100, 8), (GB200, 64)):
        assert ep_comm_s(cluster, DEEPSEEK, 4096, 1, ep, 1, FLEX) == ep_comm_s(cluster, DEEPSEEK, 4096, 1, ep, 1)
        assert ep_comm_s(cluster, DEEPSEEK, 4096, 1, ep, 1) == 4 * all_to_all_s(cluster, message, ep, 1)


def test_a_plan_with_the_flex_dispatcher_exposes_less_all_to_all():
    """DeepSeek-V3 on 1024 H100 at tp 2, pp 8, ep 64 (the layout of NVIDIA's H100 runs), no overlap:
    the MoE layers' exposed all-to-alls shrink and the step with them; nothing else moves."""
    parallel = ParallelConfig(dp_size=64, tp_size=2, pp_size=8, ep_size=64, expert_tp_size=1, zero_stage=ZeroStage.OS,
                              micro_batch_size=1, sequence_parallel=True)
    training = TrainingSpec(global_batch_size=8192, seq_length=4096)
    alltoall = evaluate(DEEPSEEK, H100, training, parallel)
    flex = evaluate(DEEPSEEK, H100, dataclasses.replace(training, moe_dispatcher=FLEX), parallel)
    assert flex.prediction.step_time_s < 0.9 * alltoall.prediction.step_time_s
    assert flex.prediction.breakdown_s["compute_s"] == pytest.approx(alltoall.prediction.breakdown_s["compute_s"])
    assert flex.stages[0].peak_bytes == pytest.approx(alltoall.stages[0].peak_bytes)


# --------------------------------------------------------------------------- the model's fields


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"router_groups": 7}, "model.router_groups"),  # 256 experts in 7 groups
        ({"router_group_topk": 9}, "model.router_group_topk"),  # more than the 8 groups
        ({"router_group_topk": 0}, "model.router_group_topk"),
        ({"router_groups": 64, "router_group_topk": 1}, "model.router_group_topk"),  # 4 experts cannot hold the top 8
        ({"router_groups": 1, "router_group_topk": 4}, "model.router_group_topk"),
        ({"router_groups": -1}, "model.router_groups"),
    ],
)
def test_bad_group_routing_is_refused_naming_the_field(change, field):
    with pytest.raises(SpecError) as error:
        dataclasses.replace(DEEPSEEK, **change)
    assert error.value.field == field


def test_a_dense_model_takes_no_routing_groups_and_one_group_is_no_limit():
    with pytest.raises(SpecError) as error:
        dataclasses.replace(catalog.get_model("llama3-8b"), router_groups=8, router_group_topk=4)
    assert error.value.field == "model.router_groups"
    single = dataclasses.replace(DEEPSEEK, router_groups=1, router_group_topk=1)
    assert (single.router_groups, single.router_group_topk) == (0, 0)


# --------------------------------------------------------------------------- the API and the exports


def test_the_api_takes_the_dispatcher_and_names_it_when_wrong(api):
    body = {
        "model": "deepseek-v3", "cluster": "dgx-h100", "num_gpus": 1024,
        "training": {"global_batch_size": 8192, "seq_length": 4096},
        "parallel": {"dp_size": 64, "tp_size": 2, "pp_size": 8, "ep_size": 64, "expert_tp_size": 1, "zero_stage": 1,
                     "micro_batch_size": 1, "sequence_parallel": True},
    }
    alltoall = api.post("/v1/evaluations", json=body)
    flex = api.post("/v1/evaluations", json={**body, "training": {**body["training"], "moe_dispatcher": "flex"}})
    assert alltoall.status_code == flex.status_code == 200, flex.text
    assert flex.json()["prediction"]["step_time_s"] < alltoall.json()["prediction"]["step_time_s"]
    wrong = api.post("/v1/evaluations", json={**body, "training": {**body["training"], "moe_dispatcher": "deepep"}})
    assert wrong.status_code == 422 and "moe_dispatcher" in wrong.text
    entry = api.get("/v1/catalog/models/deepseek-v3")
    assert entry.status_code == 200
    assert (entry.json()["router_groups"], entry.json()["router_group_topk"]) == (8, 4)


def _plan(dispatcher: MoeDispatcher) -> PlanToExport:
    parallel = ParallelConfig(dp_size=64, tp_size=2, pp_size=8, ep_size=64, expert_tp_size=1, zero_stage=ZeroStage.OS,
                              micro_batch_size=1, sequence_parallel=True)
    return PlanToExport(DEEPSEEK, TrainingSpec(global_batch_size=8192, seq_length=4096, moe_dispatcher=dispatcher), parallel, 8)


def test_megatron_and_nemo_exports_write_the_planned_dispatcher_and_the_routing_groups():
    export = export_plan(_plan(FLEX), ExportFormat.MEGATRON)
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--moe-token-dispatcher-type"] == "flex" and flags["--moe-flex-dispatcher-backend"] == "deepep"
    assert (flags["--moe-router-num-groups"], flags["--moe-router-group-topk"]) == ("8", "4")
    (note,) = [n for n in export.notes if "dispatch" in n]
    assert "flex dispatcher on DeepEP, as the plan costs it" in note
    _, flags = script_arguments(_file(export_plan(_plan(MoeDispatcher.ALLTOALL), ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--moe-token-dispatcher-type"] == "alltoall" and "--moe-flex-dispatcher-backend" not in flags
    # torchtitan and DeepSpeed-MoE dispatch with all-to-alls: the difference is named.
    for export_format in (ExportFormat.TORCHTITAN, ExportFormat.DEEPSPEED):
        differences = {d.field: d for d in export_plan(_plan(FLEX), export_format).differences}
        assert differences["training.moe_dispatcher"].exported == "alltoall", export_format
        assert "training.moe_dispatcher" not in {d.field for d in export_plan(_plan(MoeDispatcher.ALLTOALL), export_format).differences}
    nemo = "\n".join(f.text for f in export_plan(_plan(FLEX), ExportFormat.NEMO).files)
    for line in ("moe_token_dispatcher_type: flex", "moe_flex_dispatcher_backend: deepep", "moe_router_num_groups: 8",
                 "moe_router_group_topk: 4"):
        assert line in nemo

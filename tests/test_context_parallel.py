"""Context parallelism (``cp_size``): legality, the per-rank cost of a sequence split over cp
ranks (ring attention with the two-chunk load balance, as Megatron-core and torchtitan run it),
where its ranks sit, the search, the framework rules and the API."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from conftest import assert_problem, error_fields, node_cluster
from solver.cost.analytic import _attention_core_s, analytic_profile, cp_comm_exposed_s, ring_exchange_bytes
from solver.cost.comm import (
    cp_link,
    data_parallel_collective_s,
    dp_group_layout,
    inter_node_link,
    intra_node_link,
    overlapped_exposed_s,
    pp_link,
    ring_exchange_s,
)
from solver.cost.evaluate import evaluate
from solver.cost.profile import Origin, ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan, framework_violations
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig, parallel_from_dict, parallel_to_dict
from solver.spec.rules import Rule
from solver.spec.training import Framework, Recompute, TrainingSpec, ZeroStage

LLAMA3_8B = catalog.get_model("llama3-8b")  # 32 heads, 8 KV heads of 128: kv_hidden 1024



H100_16 = node_cluster("dgx-h100", 16)
LONG = TrainingSpec(global_batch_size=16, seq_length=32768)


# --------------------------------------------------------------------------- the dimension


def test_cp_size_is_a_dimension_of_the_api_form_and_old_forms_still_load():
    parallel = ParallelConfig(dp_size=2, tp_size=2, pp_size=2, cp_size=4)
    assert parallel.num_gpus == 32 and parallel.dp_cp_size == 8
    as_dict = parallel_to_dict(parallel)
    assert as_dict["cp_size"] == 4
    assert parallel_from_dict(as_dict) == parallel
    # A plan stored before cp_size existed has no such key: one rank per sequence.
    stored = {k: v for k, v in as_dict.items() if k != "cp_size"}
    assert parallel_from_dict(stored).cp_size == 1
    with pytest.raises(SpecError) as error:
        ParallelConfig(cp_size=0)
    assert error.value.field == "parallel.cp_size"


# --------------------------------------------------------------------------- legality


@pytest.mark.parametrize(("seq_length", "cp_size", "legal"), [(8192, 4, True), (8200, 4, True), (8196, 4, False), (8192, 3, False)])
def test_the_sequence_must_split_into_two_chunks_per_rank(seq_length, cp_size, legal):
    """Megatron-core's get_batch_on_this_cp_rank and torchtitan's load balancer cut a sequence
    into 2 x cp chunks (rank r keeps r and 2cp - 1 - r)."""
    parallel = ParallelConfig(tp_size=2, cp_size=cp_size)
    training = TrainingSpec(global_batch_size=8, seq_length=seq_length)
    if legal:
        assert evaluate(LLAMA3_8B, H100_16, training, parallel).prediction.step_time_s > 0
        return
    with pytest.raises(SpecError) as error:
        evaluate(LLAMA3_8B, H100_16, training, parallel)
    assert (error.value.field, error.value.rule) == ("parallel.cp_size", Rule.CP_DIVIDES_SEQUENCE)
    assert f"2 * cp_size = {2 * cp_size}" in error.value.reason


def test_context_parallelism_needs_fused_attention():
    training = TrainingSpec(global_batch_size=8, seq_length=8192, flash_attention=False)
    with pytest.raises(SpecError) as error:
        evaluate(LLAMA3_8B, H100_16, training, ParallelConfig(tp_size=2, cp_size=2))
    assert (error.value.field, error.value.rule) == ("parallel.cp_size", Rule.CP_NEEDS_FUSED_ATTENTION)
    # cp_size 1 with materialised attention is as before.
    assert evaluate(LLAMA3_8B, H100_16, training, ParallelConfig(tp_size=2)).prediction.step_time_s > 0


def test_the_gpu_count_includes_cp():
    with pytest.raises(SpecError) as error:
        evaluate(LLAMA3_8B, H100_16, LONG, ParallelConfig(tp_size=2, cp_size=4), num_gpus=16)
    assert error.value.rule is Rule.GPU_COUNT
    assert "dp_size * tp_size * pp_size * cp_size = 1*2*1*4 = 8" in error.value.reason


# --------------------------------------------------------------------------- cost


def test_cp_1_predicts_what_the_planner_predicted_before_cp_existed():
    """GPT-3 175B on 1024 A100-80GB (bench/search.py's best plan), computed before cp_size was
    added: 16.93679703309617 s per step (16.96093147086667 since fused attention charges the
    softmax's exponentials on the SFUs, solver.cost.analytic.flash_exponential_s), 60822471491.2
    bytes at the peak stage (61080106614.4 since each layer's backward working set is charged,
    solver.cost.stage.working_bytes: the gradients autograd writes beside a layer's activations)."""
    cluster = node_cluster("dgx-a100-80gb", 1024)
    training = TrainingSpec(1536, 2048)
    parallel = ParallelConfig(
        dp_size=32, tp_size=8, pp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=3, virtual_stages=12, sequence_parallel=True
    )
    ev = evaluate(catalog.get_model("gpt3-175b"), cluster, training, parallel)
    assert ev.prediction.step_time_s == pytest.approx(16.96093147086667, rel=1e-12)
    assert ev.peak_bytes == pytest.approx(61080106614.4, rel=1e-12)
    assert evaluate(catalog.get_model("gpt3-175b"), cluster, training, ParallelConfig(**{**parallel.__dict__, "cp_size": 1})) == ev


def test_activations_are_divided_by_cp_exactly():
    base = analytic_profile(LLAMA3_8B, H100_16, LONG, ProfileShape(2, 1, True, 1))
    split = analytic_profile(LLAMA3_8B, H100_16, LONG, ProfileShape(2, 1, True, 4))
    for whole, part in zip(base.layers, split.layers, strict=True):
        for field in ("activation_bytes", "selective_activation_bytes", "checkpoint_bytes", "output_bytes"):
            assert getattr(whole, field) == 4 * getattr(part, field), (whole.name, field)
        assert whole.parameter_count == part.parameter_count  # parameters are replicated over cp
    # Korthikanti et al. 2022 Table 2 with SP and flash attention, b * s/cp = 8192 tokens, t = 2:
    # (8 + (4h + 4kv + 6f)/(h t)) * tokens * h bytes, h 4096, kv 1024, f 14336 (Llama 3 trains
    # without dropout: the table's two 1-byte masks are not kept, 8 where it has 10).
    tokens, h, kv, f = 8192, 4096, 1024, 14336
    assert split.transformer_layers[0].activation_bytes == 8 * tokens * h // 2 + (4 * tokens * h + 4 * tokens * kv + 6 * tokens * f) // 2
    # Through the evaluator: one stage, no ZeRO, the same model states; activations / 4.
    one = evaluate(LLAMA3_8B, H100_16, LONG, ParallelConfig(tp_size=2, sequence_parallel=True))
    four = evaluate(LLAMA3_8B, H100_16, LONG, ParallelConfig(tp_size=2, cp_size=4, sequence_parallel=True))
    whole_memory, part_memory = one.stages[0].memory_bytes, four.stages[0].memory_bytes
    assert whole_memory.activations == 4 * part_memory.activations
    assert whole_memory.embedding_and_logits == 4 * part_memory.embedding_and_logits
    assert whole_memory.weights == part_memory.weights and whole_memory.optimizer_states == part_memory.optimizer_states


def test_zero_shards_over_data_and_context_parallel_ranks():
    """Megatron-core's distributed optimizer (and torchtitan's FSDP mesh dp_shard x cp) shards
    over dp x cp: dp 2 x cp 4 holds what dp 8 holds."""
    training = TrainingSpec(global_batch_size=64, seq_length=16384)
    for zero in (ZeroStage.OS, ZeroStage.OS_G, ZeroStage.OS_G_P):
        mixed = evaluate(LLAMA3_8B, H100_16, training, ParallelConfig(dp_size=2, tp_size=2, cp_size=4, zero_stage=zero))
        plain = evaluate(LLAMA3_8B, H100_16, training, ParallelConfig(dp_size=8, tp_size=2, zero_stage=zero))
        for field in ("weights", "gradients", "optimizer_states"):
            assert getattr(mixed.stages[0].memory_bytes, field) == pytest.approx(getattr(plain.stages[0].memory_bytes, field), rel=1e-12)


def test_ring_exchange_bytes_and_what_attention_hides():
    """Each of cp - 1 ring steps sends this rank's K and V chunks, 16 bit: 2 x 2 x b x s/cp x
    kv_hidden/tp bytes; backward sends K, V and their gradients (twice that). Step i's transfer
    runs beside the attention of the block already received: cp - 1 of cp blocks hide it, at
    the overlap slowdown."""
    shape = ProfileShape(tp_size=2, micro_batch_size=1, sequence_parallel=True, cp_size=4)
    message = ring_exchange_bytes(LLAMA3_8B, shape, 32768)
    assert message == 2 * 2 * 1 * 8192 * 1024 / 2 == 16 * 2**20
    link = intra_node_link(H100_16)  # tp 2 x cp 4 = 8 ranks: one node
    assert cp_link(H100_16, 2, 4) == link and cp_link(H100_16, 8, 2) == inter_node_link(H100_16)
    step_s = message / link.bytes_per_s + link.latency_s
    assert ring_exchange_s(message, 4, link) == pytest.approx(3 * step_s, rel=1e-12)
    slowdown = H100_16.gpu.overlap_slowdown
    attention_forward_s, attention_backward_s = 0.004, 0.010
    expected = overlapped_exposed_s(3 * step_s, 0.75 * attention_forward_s, slowdown) + overlapped_exposed_s(
        3 * (2 * message / link.bytes_per_s + link.latency_s), 0.75 * attention_backward_s, slowdown
    )
    assert cp_comm_exposed_s(H100_16, message, 4, 2, attention_forward_s, attention_backward_s) == pytest.approx(expected, rel=1e-12)
    # Nothing to hide it: the whole exchange is on the step; one rank: no exchange.
    assert cp_comm_exposed_s(H100_16, message, 4, 2, 0.0, 0.0) == pytest.approx(3 * step_s + 3 * (2 * message / link.bytes_per_s + link.latency_s))
    assert cp_comm_exposed_s(H100_16, message, 1, 2, 0.0, 0.0) == 0.0
    # The layer carries exactly that for its own attention times.
    gpu = H100_16.gpu
    forward_s, backward_s, _ = _attention_core_s(LLAMA3_8B, gpu, LONG, 32 / 2, 32768, None, 4)  # type: ignore[arg-type]
    layer = analytic_profile(LLAMA3_8B, H100_16, LONG, shape).transformer_layers[0]
    assert layer.cp_comm_s == pytest.approx(cp_comm_exposed_s(H100_16, message, 4, 2, forward_s, backward_s), rel=1e-12)
    assert layer.cp_comm_s > 0 and layer.recompute_s(Recompute.FULL) == pytest.approx(layer.forward_s + layer.tp_comm_s / 2 + layer.cp_comm_s / 3)


def test_causal_attention_work_per_rank_is_balanced():
    """With the two-chunk split each of the cp ring steps computes half of an (s/cp)^2 block:
    one rank's causal attention FLOPs are 1/cp of the whole; the model FLOPs of cp ranks add up
    to those of one."""
    whole = analytic_profile(LLAMA3_8B, H100_16, LONG, ProfileShape(2, 1, True, 1)).transformer_layers[0]
    part = analytic_profile(LLAMA3_8B, H100_16, LONG, ProfileShape(2, 1, True, 4)).transformer_layers[0]
    assert 4 * part.model_flops == pytest.approx(whole.model_flops, rel=1e-12)
    gpu = H100_16.gpu
    for cp in (2, 4, 8):
        forward_s, _, _ = _attention_core_s(LLAMA3_8B, gpu, LONG, 16, 32768, None, cp)  # type: ignore[arg-type]
        single_s, _, _ = _attention_core_s(LLAMA3_8B, gpu, LONG, 16, 32768, None, 1)  # type: ignore[arg-type]
        # Smaller blocks never run faster per FLOP (wave quantisation): at least 1/cp of the time.
        assert single_s / cp <= forward_s <= 1.1 * single_s / cp


def test_cp_groups_and_gradient_groups_sit_where_tp_cp_dp_pp_puts_them():
    cluster = node_cluster("dgx-h100", 64)
    # dp 2 x cp 4 ranks, tp 2 apart: 4 on a node, 2 nodes: the ring of an 8-member DP group.
    assert dp_group_layout(cluster, 2, 2, 4) == (4, 2) == dp_group_layout(cluster, 2, 8)
    message = 2 * 8e9
    assert data_parallel_collective_s(cluster, 2, 2, message, "all_reduce", cp_size=4) == data_parallel_collective_s(
        cluster, 2, 8, message, "all_reduce")
    assert data_parallel_collective_s(cluster, 2, 2, message, "all_reduce", cp_size=4) > data_parallel_collective_s(
        cluster, 2, 2, message, "all_reduce")
    # Consecutive pipeline stages are tp x cp x dp ranks apart.
    assert pp_link(cluster, 2, 1, 2) == intra_node_link(cluster)
    assert pp_link(cluster, 2, 1, 2, cp_size=4) == inter_node_link(cluster)


def test_long_sequences_fit_only_with_context_parallelism():
    """128K tokens of Llama 3 8B: the split sequence fits where the whole one does not."""
    training = TrainingSpec(global_batch_size=8, seq_length=131072)
    cluster = node_cluster("dgx-h100", 64)
    whole = evaluate(LLAMA3_8B, cluster, training, ParallelConfig(dp_size=8, tp_size=8, zero_stage=ZeroStage.OS_G_P))
    split = evaluate(LLAMA3_8B, cluster, training, ParallelConfig(dp_size=1, tp_size=8, cp_size=8, zero_stage=ZeroStage.OS_G_P))
    assert not whole.feasible and split.feasible
    assert split.peak_bytes < whole.peak_bytes / 4


def test_a_measured_profile_is_carried_to_cp_by_the_analytic_ratios():
    """A measurement (one GPU, no CP) equal to the analytic profile predicts, at cp 4, what the
    analytic model predicts there: its times and bytes scale by the analytic cp-4 / cp-1 ratios,
    and the ring exchange, which one GPU cannot measure, comes from the analytic model."""
    base = analytic_profile(LLAMA3_8B, H100_16, LONG, ProfileShape(2, 1, True, 1))
    measured = dataclasses.replace(  # measured with sequence parallelism, as the shape says
        base, sequence_parallel=True, layers=tuple(dataclasses.replace(layer, origin=Origin.MEASURED) for layer in base.layers)
    )
    parallel = ParallelConfig(dp_size=2, tp_size=2, cp_size=4, zero_stage=ZeroStage.OS, sequence_parallel=True)
    analytic = evaluate(LLAMA3_8B, H100_16, LONG, parallel)
    carried = evaluate(LLAMA3_8B, H100_16, LONG, parallel, profile=measured)
    assert carried.prediction.step_time_s == pytest.approx(analytic.prediction.step_time_s, rel=1e-9)
    assert carried.peak_bytes == pytest.approx(analytic.peak_bytes, rel=1e-9)
    assert set(carried.profile_origins.values()) == {"derived"}


# --------------------------------------------------------------------------- frameworks


def test_megatron_and_torchtitan_run_cp_deepspeed_and_fsdp_do_not():
    parallel = ParallelConfig(dp_size=2, tp_size=2, cp_size=4, zero_stage=ZeroStage.OS_G)
    assert framework_violations(parallel, Framework.ANY) == []
    assert framework_violations(ParallelConfig(tp_size=2, cp_size=4, zero_stage=ZeroStage.OS), Framework.MEGATRON) == []
    for framework in (Framework.DEEPSPEED, Framework.FSDP):
        assert [v.rule for v in framework_violations(parallel, framework)] == [Rule.FRAMEWORK_CP]
    ev = evaluate(LLAMA3_8B, H100_16, LONG, ParallelConfig(dp_size=2, tp_size=2, cp_size=4, zero_stage=ZeroStage.OS_G), framework=Framework.FSDP)
    assert not ev.feasible and Rule.FRAMEWORK_CP in [v.rule for v in ev.violations]


def test_exports_carry_cp_where_the_framework_runs_it():
    plan = PlanToExport(LLAMA3_8B, LONG, ParallelConfig(dp_size=2, tp_size=2, cp_size=4, micro_batch_size=1, sequence_parallel=True), 8)
    megatron = export_plan(plan, ExportFormat.MEGATRON)
    assert megatron.exact and "--context-parallel-size 4" in megatron.files[0].text
    # torchtitan shards with FSDP2 over dp x cp whenever cp > 1 (ParallelDims.fsdp_enabled).
    torchtitan = export_plan(plan, ExportFormat.TORCHTITAN)
    assert [(d.field, d.planned, d.exported) for d in torchtitan.differences] == [("parallel.zero_stage", "0", "2")]
    assert torchtitan.parallel.cp_size == 4 and "context_parallel_degree = 4" in torchtitan.files[0].text
    # DeepSpeed: the same 16 GPUs as 8 data-parallel replicas of whole sequences.
    deepspeed = export_plan(plan, ExportFormat.DEEPSPEED)
    assert (deepspeed.parallel.cp_size, deepspeed.parallel.dp_size, deepspeed.parallel.num_gpus) == (1, 8, 16)
    assert [d.field for d in deepspeed.differences][:2] == ["parallel.cp_size", "parallel.dp_size"]
    # 12 sequences do not divide over 8 replicas: the batch rounds down to 8, named.
    odd = dataclasses.replace(plan, training=dataclasses.replace(LONG, global_batch_size=12), parallel=dataclasses.replace(plan.parallel, dp_size=2))
    folded = export_plan(odd, ExportFormat.DEEPSPEED)
    assert ("training.global_batch_size", "12", "8") in [(d.field, d.planned, d.exported) for d in folded.differences]


# --------------------------------------------------------------------------- search


def test_a_128k_llama3_405b_plan_on_16384_h100_uses_context_parallelism():
    """Llama 3's long-context stage: 131,072-token sequences, 16M tokens (128 sequences) per step
    on 16,384 H100 (Llama Team 2024, Table 4: tp 8, cp 16, pp 16, dp 8)."""
    cluster = node_cluster("dgx-h100", 16384)
    training = TrainingSpec(global_batch_size=128, seq_length=131072)
    model = catalog.get_model("llama3-405b")
    result = search(SearchRequest(model, cluster, training, top_k=1))
    best = result.candidates[0]
    assert best.parallel.cp_size > 1 and best.parallel.num_gpus == 16384
    assert best.evaluation.feasible
    without = search(SearchRequest(model, cluster, training, constraints=Constraints.parse({"cp_size": 1}), top_k=1))
    assert not without.candidates or without.candidates[0].evaluation.prediction.step_time_s > best.evaluation.prediction.step_time_s


def test_a_2k_sequence_search_keeps_cp_1_even_where_cp_is_allowed():
    cluster = node_cluster("dgx-h100", 64)
    training = TrainingSpec(global_batch_size=512, seq_length=2048)
    default = search(SearchRequest(LLAMA3_8B, cluster, training, top_k=3))
    assert {c.parallel.cp_size for c in default.candidates} == {1}  # not enumerated below 8K tokens
    allowed = search(SearchRequest(LLAMA3_8B, cluster, training, constraints=Constraints.parse({"cp_size": [1, 2, 4, 8]}), top_k=1))
    assert allowed.candidates[0].parallel.cp_size == 1
    assert allowed.candidates[0].evaluation.prediction.step_time_s == default.candidates[0].evaluation.prediction.step_time_s


def test_a_32k_search_picks_cp_over_the_best_plan_without_it():
    allowed = search(SearchRequest(LLAMA3_8B, H100_16, LONG, constraints=Constraints.parse({"cp_size": [1, 2, 4]}), top_k=1))
    alone = search(SearchRequest(LLAMA3_8B, H100_16, LONG, constraints=Constraints.parse({"cp_size": [1]}), top_k=1))
    best, without = allowed.candidates[0], alone.candidates[0]
    assert best.parallel.cp_size > 1 and without.parallel.cp_size == 1
    assert best.evaluation.prediction.step_time_s < without.evaluation.prediction.step_time_s


def test_a_cp_pin_that_cannot_split_the_sequence_finds_nothing_and_says_why():
    training = TrainingSpec(global_batch_size=16, seq_length=32760)  # 8 x 4095: no 16 equal chunks
    result = search(SearchRequest(LLAMA3_8B, H100_16, training, constraints=Constraints.parse({"cp_size": [8]}), top_k=1))
    assert result.candidates == ()
    assert result.explanation is not None
    assert result.explanation.binding_constraint is Rule.CP_DIVIDES_SEQUENCE
    assert "lift the cp_size constraint" in [s.change for s in result.explanation.suggestions]


# --------------------------------------------------------------------------- API


def _evaluation_body(**parallel) -> dict:
    return {
        "model": "llama3-8b", "cluster": "dgx-h100",
        "training": {"global_batch_size": 16, "seq_length": 32768},
        "parallel": {"dp_size": 2, "tp_size": 2, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1,
                     "recompute": "none", "sequence_parallel": True} | parallel,
    }


def test_an_evaluation_with_cp_size_over_http(api):
    # A node type as the cluster: the GPUs are dp x tp x pp x cp = 16.
    response = api.post("/v1/evaluations", json=_evaluation_body(cp_size=4))
    assert response.status_code == 200, response.text
    result = response.json()
    # The request names no stack: the default stack's facts (torchtitan keeps its SP-gathered GEMM inputs).
    stack = dataclasses.replace(LONG, **catalog.get_stack_facts(catalog.default_stack_name()))
    expected = evaluate(LLAMA3_8B, H100_16, stack, ParallelConfig(dp_size=2, tp_size=2, cp_size=4, zero_stage=ZeroStage.OS, sequence_parallel=True))
    assert result["prediction"]["step_time_s"] == pytest.approx(expected.prediction.step_time_s, rel=1e-9)
    assert result["memory"]["peak_gib"] == pytest.approx(expected.peak_bytes / 2**30, rel=1e-9)
    assert result["num_micro_batches"] == 8  # 16 sequences over dp 2: cp ranks share each sequence


def test_an_evaluation_whose_sequence_does_not_split_names_cp_size(api):
    body = _evaluation_body(cp_size=3)
    body["num_gpus"], body["cluster"] = 12, "dgx-h100-x8"
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "body.parallel.cp_size" in error_fields(problem)


def test_a_plan_request_with_cp_allowed_over_http(api):
    body = {
        "model": "llama3-8b", "cluster": "dgx-h100", "num_gpus": 16,
        "training": {"global_batch_size": 16, "seq_length": 32768},
        "objective": "max_throughput", "constraints": {"cp_size": [1, 2, 4]}, "top_k": 3,
    }
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    assert plan["status"] == "succeeded"
    assert plan["request"]["constraints"] == {"cp_size": [1, 2, 4]}
    best = plan["best"]["parallel"]
    assert best["cp_size"] > 1
    for candidate in plan["candidates"]:
        p = candidate["parallel"]
        assert p["cp_size"] in (1, 2, 4)
        assert p["dp_size"] * p["tp_size"] * p["pp_size"] * p["cp_size"] == 16


def test_openapi_describes_cp_size_in_parallel_and_constraints(api):
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["Parallel"]["properties"]["cp_size"]["type"] == "integer"
    constraints = [name for name, schema in schemas.items() if "cp_size" in schema.get("properties", {}) and name != "Parallel"]
    assert constraints

"""DeepSpeed ZeRO-3's optimizer step copies each sub-group's gradients to fp32 (issue 13,
mechanism 5): deepspeed/runtime/zero/stage3.py ``_prepare_fp32_grad_for_sub_group`` flattens the
sub-group's 16-bit gradient partitions into a new tensor and casts it to fp32 (2 + 4 bytes per
parameter) after backward has freed the activations, so the stage's peak is the larger of the
backward's and the step's. The sub-group is DeepSpeed's ``sub_group_size`` (1e9 by default from
v0.5.0, 1e12 before and under PyTorch Lightning)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import sqlalchemy

import catalog
from app.plans.models import PlanCandidate
from bench import memory as memory_bench
from conftest import assert_problem, error_fields
from solver.cost.analytic import analytic_profile
from solver.cost.evaluate import evaluate
from solver.cost.memory import GIB_BYTES, optimizer_step_copy_bytes
from solver.cost.profile import ProfileShape
from solver.cost.stage import StagePolicy, new_segment_bytes, step_copy_bytes, step_phases, zero_bucket_at_peak_bytes
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.partition.fixed import fixed_partition
from solver.partition.problem import partition_problem
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.spec.dimensions import Offload
from solver.spec.errors import SpecError
from solver.spec.legality import stage_layer_counts
from solver.spec.parallel import ParallelConfig
from solver.spec.training import GradReduce, Precision, Recompute, TrainingSpec, ZeroStage

TRANSIENT_KEYS = ("activations", "embedding_and_logits", "zero3_gather_buffers")
STATE_KEYS = ("weights", "gradients", "optimizer_states")
RECORD_12B = "colossalai-lightning-gpt2-12b-deepspeed-zero3-8gpu"


def _record(record_id: str) -> dict:
    return next(r for r in memory_bench.load_records() if r["id"] == record_id)


def _evaluate_run(run: dict, **training_changes):
    training = dataclasses.replace(memory_bench.training_for(run), **training_changes)
    model, cluster, parallel = memory_bench.model_for(run), memory_bench.cluster_for(run), memory_bench.parallel_for(run)
    return model, cluster, training, parallel, evaluate(model, cluster, training, parallel, num_gpus=run["num_gpus"])


def test_the_copy_is_six_bytes_per_parameter_of_one_sub_group():
    assert optimizer_step_copy_bytes(1.5e9, 6, 10**12) == 6 * 1.5e9  # Lightning: the whole shard
    assert optimizer_step_copy_bytes(1.5e9, 6, 10**9) == 6 * 1e9  # DeepSpeed's default sub-group
    assert optimizer_step_copy_bytes(1.5e9, 6, 0) == 6 * 1.5e9  # no sub-groups: the whole shard
    assert optimizer_step_copy_bytes(1.5e9, 0, 10**9) == 0.0  # a stack whose step copies nothing


def test_deepspeed_zero3_stacks_state_the_copy_and_their_sub_group():
    assert catalog.get_stack_facts("deepspeed-zero3")["step_grad_copy_bytes_per_param"] == 2 + 4
    assert catalog.get_stack_facts("deepspeed-zero3")["optimizer_sub_group_params"] == 10**9  # config.py at v0.7.0
    assert catalog.get_stack_facts("deepspeed-zero3-2021")["optimizer_sub_group_params"] == 10**12  # constants.py at v0.3.15
    for stack in ("torchtitan-2025", "megatron-core-2024", "pytorch-fsdp1-2023"):
        assert catalog.get_stack_facts(stack)["step_grad_copy_bytes_per_param"] == 0


def test_the_12b_record_peaks_at_the_step_and_the_peak_is_the_larger_moment():
    """GPT-2 12B under ZeRO-3 on 8 A100-40GB at micro-batch 1 with every block checkpointed: its
    activations are small, so the fp32 copy of the whole 1.5e9-parameter shard (Lightning's
    sub-group of 1e12) sets the peak. The published max_memory_allocated is 29.05 GiB."""
    run = _record(RECORD_12B)["run"]
    assert run["optimizer_sub_group_params"] == 10**12
    model, cluster, training, parallel, ev = _evaluate_run(run)
    stage = ev.stages[0]
    memory = stage.memory_bytes
    states = sum(memory[k] for k in STATE_KEYS)
    transient = sum(memory[k] for k in TRANSIENT_KEYS)
    copy = memory["optimizer_step_copy"] + transient  # the step's copy, when it exceeds the transient
    assert memory["optimizer_step_copy"] > 0
    allocated = states + transient + memory["optimizer_step_copy"]
    assert allocated == pytest.approx(max(states + transient, states + copy))
    # 6 bytes per parameter of the local shard: 12.3e9 parameters over 8 ranks.
    assert copy == pytest.approx(6 * 12.3e9 / 8, rel=0.01)
    allocated_gib = allocated / GIB_BYTES
    assert allocated_gib == pytest.approx(29.05, rel=0.10)
    assert ev.feasible  # it ran on 40 GB
    # Before the step was costed the record read -15.8%: the backward peak alone.
    assert (states + transient) / GIB_BYTES < 0.85 * 29.05
    # DeepSpeed's own default sub-group (1e9) copies less.
    *_, default_ev = _evaluate_run(run, optimizer_sub_group_params=10**9)
    assert default_ev.stages[0].memory_bytes["optimizer_step_copy"] == pytest.approx(6e9 - transient)


def test_a_stage_whose_activations_outweigh_the_copy_keeps_its_backward_peak():
    """GPT-2 XL under ZeRO-3 at micro-batch 40 on 4 GPUs: the activations freed before the step
    are larger than the copy of its 0.39e9-parameter shard, so nothing is added."""
    run = _record("colossalai-lightning-gpt2xl-deepspeed-zero3-4gpu")["run"]
    *_, ev = _evaluate_run(run)
    memory = ev.stages[0].memory_bytes
    assert memory["optimizer_step_copy"] == 0.0
    assert sum(memory[k] for k in TRANSIENT_KEYS) > 6 * 1.56e9 / 4


def test_no_copy_on_the_gpu_where_the_optimizer_steps_on_the_host():
    run = _record(RECORD_12B)["run"]
    model, cluster, training, parallel, _ = _evaluate_run(run)
    offloaded = evaluate(model, cluster, training, dataclasses.replace(parallel, offload=Offload.OPTIMIZER), num_gpus=8)
    assert offloaded.stages[0].memory_bytes["optimizer_step_copy"] == 0.0


@pytest.mark.parametrize("pp", [1, 4])
def test_the_partition_problem_never_charges_less_than_the_evaluator(pp):
    """The search's partition problem bounds the step's copy before the stage's layers are known
    (the whole model's, less what every stage frees anyway): a partition it accepts must be one
    the evaluator accepts, so at just under the evaluator's peak it must not fit."""
    model = catalog.get_model("gpt3-13b")
    cluster = catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", "dgx-a100-80gb"), "num_nodes": 1})
    training = TrainingSpec(64, 2048, Precision.FP16, step_grad_copy_bytes_per_param=6, optimizer_sub_group_params=10**12)
    zero = ZeroStage.OS_G_P if pp == 1 else ZeroStage.OS
    parallel = ParallelConfig(8 // pp, 1, pp, zero, 1, Recompute.FULL)
    ev = evaluate(model, cluster, training, parallel, parallel.num_gpus)
    assert max(s.memory_bytes["optimizer_step_copy"] for s in ev.stages) > 0
    profile = analytic_profile(model, cluster, training, ProfileShape.of(parallel))
    counts = stage_layer_counts(model, parallel)
    tight = partition_problem(profile, parallel, training, ev.num_micro_batches, ev.peak_bytes * 0.9999, True, cluster.gpu)
    assert fixed_partition(tight, counts) is None
    if pp == 1:  # one stage: the bound exceeds the evaluator's by one layer's recompute working set at most
        roomy = partition_problem(profile, parallel, training, ev.num_micro_batches, ev.peak_bytes * 1.02, True, cluster.gpu)
        assert fixed_partition(roomy, counts) is not None


@pytest.mark.parametrize(("field", "value"), [("step_grad_copy_bytes_per_param", -1), ("step_grad_copy_bytes_per_param", 2.5),
                                               ("optimizer_sub_group_params", -5), ("optimizer_sub_group_params", True),
                                               ("zero_reduce_bucket_params", -1), ("zero_reduce_bucket_params", 5e8)])
def test_a_bad_value_is_an_error_naming_the_field(field, value):
    with pytest.raises(SpecError) as error:
        TrainingSpec(8, 1024, **{field: value})
    assert error.value.field == f"training.{field}"


def _body(**training) -> dict:
    return {
        "model": "gpt3-13b", "cluster": "dgx-a100-80gb", "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 2048, "precision": "fp16", **training},
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "zero_stage": 3, "micro_batch_size": 1, "recompute": "full"},
    }


def test_the_api_reports_the_copy_and_takes_overrides(api):
    whole = api.post("/v1/evaluations", json=_body(stack="deepspeed-zero3", optimizer_sub_group_params=10**12))
    capped = api.post("/v1/evaluations", json=_body(stack="deepspeed-zero3", optimizer_sub_group_params=10**7))
    none = api.post("/v1/evaluations", json=_body(stack="torchtitan-2025"))
    assert whole.status_code == capped.status_code == none.status_code == 200, whole.text
    copy_gib = [r.json()["memory"]["breakdown_gib"]["optimizer_step_copy"] for r in (whole, capped, none)]
    assert copy_gib[0] > copy_gib[1] >= 0.0 and copy_gib[2] == 0.0
    assert whole.json()["memory"]["peak_gib"] > capped.json()["memory"]["peak_gib"]


def test_the_api_takes_the_zero_2_bucket_and_the_stack_s_default(api):
    """DeepSpeed ZeRO-2 holds its 5e8-element 16-bit gradient bucket through backward: 0.93 GiB
    more in the peak's gradients than with no bucket; the stack states it, a request overrides it."""
    body = _body(stack="deepspeed-zero3")
    body["parallel"]["zero_stage"] = 2
    stack = api.post("/v1/evaluations", json=body)
    body["training"]["zero_reduce_bucket_params"] = 0
    none = api.post("/v1/evaluations", json=body)
    assert stack.status_code == none.status_code == 200, (stack.text, none.text)
    grads = [r.json()["memory"]["breakdown_gib"]["gradients"] for r in (stack, none)]
    assert grads[0] - grads[1] == pytest.approx(2 * 5e8 / GIB_BYTES, rel=1e-6)


@pytest.mark.parametrize(("field", "value"), [("step_grad_copy_bytes_per_param", 17), ("optimizer_sub_group_params", "1e9"),
                                               ("optimizer_sub_group_params", -1), ("zero_reduce_bucket_params", -1),
                                               ("zero_reduce_bucket_params", 2.5), ("zero_step_norm_copies", "yes")])
def test_a_bad_override_is_a_422_naming_the_field(api, field, value):
    response = api.post("/v1/evaluations", json=_body(**{field: value}))
    assert f"body.training.{field}" in error_fields(assert_problem(response, 422))


def test_the_deepspeed_config_carries_the_sub_group_the_plan_assumed():
    training = TrainingSpec(64, 2048, Precision.FP16, **{k: v for k, v in catalog.get_stack_facts("deepspeed-zero3").items()})
    parallel = ParallelConfig(dp_size=8, tp_size=1, pp_size=1, zero_stage=ZeroStage.OS_G_P, micro_batch_size=1, recompute=Recompute.FULL)
    exported = export_plan(PlanToExport(catalog.get_model("gpt3-13b"), training, parallel, 8), ExportFormat.DEEPSPEED)
    config = next(f.text for f in exported.files if f.name == "ds_config.json")
    assert '"sub_group_size": 1000000000' in config


@pytest.mark.parametrize("zero", [ZeroStage.OS, ZeroStage.OS_G])
def test_the_deepspeed_config_carries_the_bucket_the_plan_charged(zero):
    """At ZeRO-1/2 the exported reduce_bucket_size is the stack's bucket the memory charged
    (ZeRO-2's contiguous buffer through backward, ZeRO-1's flattened buckets after it), not one
    layer's gradients; a stack with no such bucket keeps the export's own choice."""
    facts = catalog.get_stack_facts("deepspeed-zero3")
    parallel = ParallelConfig(dp_size=8, tp_size=1, pp_size=1, zero_stage=zero, micro_batch_size=1, recompute=Recompute.FULL)
    model = catalog.get_model("gpt3-13b")

    def bucket(**changes) -> int:
        training = TrainingSpec(64, 2048, Precision.FP16, **{**facts, **changes})
        exported = export_plan(PlanToExport(model, training, parallel, 8), ExportFormat.DEEPSPEED)
        return json.loads(next(f.text for f in exported.files if f.name == "ds_config.json"))["zero_optimization"]["reduce_bucket_size"]

    assert bucket() == 5 * 10**8
    assert bucket(zero_reduce_bucket_params=10**8) == 10**8
    layer = 12 * model.hidden_size**2  # the cost model's dense layer, one bucket per layer at ZeRO-2
    assert bucket(zero_reduce_bucket_params=0) == (layer if zero is ZeroStage.OS_G else 5 * 10**8)


def test_an_infeasible_search_suggests_smaller_sub_groups_and_checks_it():
    """When the step's copy is what does not fit, the explanation suggests DeepSpeed's own
    sub-group (1e9) and the search, run again with it, finds the plan."""
    run = _record(RECORD_12B)["run"]
    constraints = Constraints.parse(
        {"tp_size": 1, "pp_size": 1, "zero_stage": 3, "offload": "none", "max_memory_fraction": 0.8}
    )
    request = SearchRequest(
        memory_bench.model_for(run), memory_bench.cluster_for(run), memory_bench.training_for(run), num_gpus=8,
        constraints=constraints,
    )
    result = search(request)
    assert result.status == "infeasible"
    miss = result.explanation["closest_miss"]
    assert miss["memory_gib"]["optimizer_step_copy"] > 0
    fixes = {s["change"]: s for s in result.explanation["suggestions"]}
    change = "step the optimizer in sub-groups of 1e+09 parameters (DeepSpeed's sub_group_size)"
    assert change in fixes and fixes[change]["checked"], list(fixes)
    assert fixes[change]["peak_gib"] <= 0.8 * 40


def test_zero_1_and_2_copy_the_whole_partition_and_zero_0_is_not_charged():
    """DeepSpeed's ZeRO-1/2 optimizer (stage_1_and_2.py ``step``) casts every parameter group's
    partition to fp32 before stepping: the whole partition, whatever ``sub_group_size`` says (a
    ZeRO-3 setting). At ZeRO 0 the stack's plain fp16/bf16 optimizer steps instead: not charged."""
    cluster = catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", "dgx-a100-80gb"), "num_nodes": 1})
    training = TrainingSpec(64, 2048, Precision.FP16, step_grad_copy_bytes_per_param=6, optimizer_sub_group_params=10**8)
    params = 13e9
    copy = {
        zero: step_copy_bytes(params, StagePolicy.of(cluster.gpu, ParallelConfig(8, 1, 1, zero, 1, Recompute.FULL), training, 8))
        for zero in (ZeroStage.NONE, ZeroStage.OS, ZeroStage.OS_G, ZeroStage.OS_G_P)
    }
    assert copy[ZeroStage.NONE] == 0.0
    assert copy[ZeroStage.OS] == copy[ZeroStage.OS_G] == pytest.approx(6 * params / 8)  # the whole partition
    assert copy[ZeroStage.OS_G_P] == pytest.approx(6 * 10**8)  # ZeRO-3: one sub-group of 1e8


def test_bloom_s_single_replica_benchmark_peaks_at_its_zero_1_step():
    """BigScience's 20B probe on one Jean Zay node (tp 8, dp 1, ZeRO-1; chronicles-prequel.md,
    67GB of nvidia-smi): at dp 1 ZeRO-1's partition is the whole stage, so the step's fp32 copy
    of its 2.9e9 parameters sets the peak (-28% without it): the peak reads 68.0 GiB. The figure
    nvidia-smi shows is read as the peak plus the segments the step's per-tensor check and norm
    copies and the reduce's bucket take beside it (6.9 GiB: solver.cost.stage.step_phases), 74.9
    GiB, +11.8%: at dp 1 the measured figure sits between the two, the one record of the family
    (with its 200B twin) the reserved reading over-predicts (docs/cost_model.md, "Memory")."""
    record = _record("bloom-prequel-0217-20B-dp1-tp8-pp1-mbs1")
    result = memory_bench.evaluate_record(record)
    assert result.breakdown_gib["optimizer_step_copy"] > 10
    assert result.measured_gib is not None
    assert abs(result.peak_gib / result.measured_gib - 1) <= 0.10
    assert 0.0 < result.error <= 0.12, result.error
    assert catalog.get_stack_facts("megatron-deepspeed-2022")["step_grad_copy_bytes_per_param"] == 6


def test_the_copy_the_peak_leaves_to_freed_activations_is_reserved_beside_them():
    """BigScience's 181B benchmark at dp 4, tp 8, pp 12 (chronicles-prequel.md, 02-21, 37GB of
    nvidia-smi at micro-batch 2): after the last backward DeepSpeed's ZeRO-1 flattens each bucket
    of up to 5e8 gradients for its reduction, its step copies the partition's part of one gradient
    at a time to fp32 (overflow check) and to fp64 (norm) - the first stage's largest is its
    vocabulary-parallel embedding, 250k x 14336 / 8 - and then flattens and casts the partition
    (2 + 4 bytes per parameter of the shard). All of it is smaller than the activations backward
    frees, so the peak adds nothing, but each is a flat buffer of a billion bytes or more that no
    cached activation block holds: the caching allocator reserves segments for them, reusing a
    freed one where it is large enough (best fit), which the device-used figure shows and the
    feasibility check does not charge."""
    record = _record("bloom-prequel-0221-181B-dp4-tp8-pp12-mbs2")
    run = record["run"]
    model, cluster, training, parallel, ev = _evaluate_run(run)
    stage = ev.stages[memory_bench.measured_stage(ev, run)]
    assert stage.has_embedding and stage.memory_bytes["optimizer_step_copy"] == 0.0
    shard = stage.parameter_count / parallel.dp_size
    embedding = model.vocab_size * model.hidden_size / parallel.tp_size
    assert embedding < shard
    bucket, check, norm, flat16, fp32 = 2 * 5e8, 4 * embedding, 8 * embedding, 2 * shard, 4 * shard
    assert bucket < flat16 < check < fp32 < norm  # the flat copy fits the check's segment, its cast the norm's
    assert stage.step_segment_bytes == pytest.approx(bucket + check + norm)
    assert stage.step_segment_bytes / GIB_BYTES == pytest.approx(5.9, abs=0.1)
    result = memory_bench.evaluate_record(record)
    assert result.predicted_gib == pytest.approx((stage.peak_bytes + stage.step_segment_bytes) / GIB_BYTES)
    assert result.peak_gib == pytest.approx(stage.peak_bytes / GIB_BYTES)  # plans are checked against this
    assert abs(result.error) < 0.05  # -20.5% with the peak alone, -11.8% with the step's copy alone
    # A stack whose step copies and checks nothing (Megatron-core's distributed optimizer).
    *_, in_place = _evaluate_run(run, step_grad_copy_bytes_per_param=0, zero_reduce_bucket_params=0, zero_step_norm_copies=False)
    assert all(s.step_segment_bytes == 0.0 for s in in_place.stages)


def test_the_buffers_after_backward_reuse_freed_segments_by_best_fit():
    """new_segment_bytes replays the caching allocator: a buffer takes the smallest free block
    that holds it (split if larger), else a new segment; each moment frees its buffers."""
    assert new_segment_bytes(()) == 0.0
    assert new_segment_bytes(((10.0,), (4.0, 5.0))) == 10.0  # both fit the first segment's 10
    assert new_segment_bytes(((4.0,), (8.0,), (5.0, 7.0))) == 19.0  # 5 splits the 8, then 7 fits neither the 4 nor the 3 left: new
    assert new_segment_bytes(((3.0,), (8.0,), (2.0, 7.0))) == 11.0  # 2 in the 3 (best fit), 7 in the 8


def test_the_deepspeed_stacks_state_their_zero_1_2_buffers():
    for stack in ("megatron-deepspeed-2022", "deepspeed-zero3"):
        facts = catalog.get_stack_facts(stack)
        assert facts["zero_reduce_bucket_params"] == 5 * 10**8 and facts["zero_step_norm_copies"] is True
    for stack in ("torchtitan-2025", "megatron-core-2024", "pytorch-fsdp1-2023", "deepspeed-zero3-2021"):
        facts = catalog.get_stack_facts(stack)
        assert facts["zero_reduce_bucket_params"] == 0 and facts["zero_step_norm_copies"] is False


def test_zero_2_holds_its_bucket_through_backward_and_zero_1_after_it():
    """ZeRO-2 allocates its contiguous gradient buffer at every backward's start (at the peak);
    ZeRO-1 flattens its buckets only at the reduce after backward; neither under BF16_Optimizer."""
    cluster = catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", "dgx-a100-80gb"), "num_nodes": 1})
    training = TrainingSpec(64, 2048, Precision.FP16, step_grad_copy_bytes_per_param=6, zero_reduce_bucket_params=5 * 10**8)
    policy = {zero: StagePolicy.of(cluster.gpu, ParallelConfig(8, 1, 1, zero, 1, Recompute.FULL), training, 8) for zero in ZeroStage}
    assert zero_bucket_at_peak_bytes(policy[ZeroStage.OS_G]) == 2 * 5e8
    assert zero_bucket_at_peak_bytes(policy[ZeroStage.OS]) == 0.0
    assert step_phases(13e9, policy[ZeroStage.OS])[0] == (2 * 5e8,)
    assert step_phases(3e8, policy[ZeroStage.OS])[0] == (2 * 3e8,)  # a stage smaller than a bucket
    assert all(phase != (2 * 5e8,) for phase in step_phases(13e9, policy[ZeroStage.OS_G]))
    bf16 = dataclasses.replace(training, precision=Precision.BF16, grad_reduce=GradReduce.FP32_BESIDE_HALF)
    bf16_policy = StagePolicy.of(cluster.gpu, ParallelConfig(8, 1, 1, ZeroStage.OS, 1, Recompute.FULL), bf16, 8)
    assert step_phases(13e9, bf16_policy)[0] == (2 * 13e9,)  # its reduce casts instead
    assert zero_bucket_at_peak_bytes(dataclasses.replace(bf16_policy, zero_stage=ZeroStage.OS_G)) == 0.0


def test_where_the_copy_sets_the_peak_nothing_is_reserved_twice():
    """The 12B ZeRO-3 record peaks at its step: the copy is in the peak, no segment on top."""
    *_, ev = _evaluate_run(_record(RECORD_12B)["run"])
    stage = ev.stages[0]
    transient = sum(stage.memory_bytes[k] for k in TRANSIENT_KEYS)
    assert stage.memory_bytes["optimizer_step_copy"] > 0
    assert stage.step_segment_bytes == pytest.approx(transient)  # the copy less its excess over the transient


def _without(document, key: str):
    """``document`` with ``key`` removed at every depth, as a row stored before the key existed."""
    if isinstance(document, dict):
        return {k: _without(v, key) for k, v in document.items() if k != key}
    if isinstance(document, list):
        return [_without(v, key) for v in document]
    return document


def test_a_plan_stored_before_the_copy_was_costed_still_reads(api, database_url):
    """Nothing lost: a stored candidate whose memory breakdown predates ``optimizer_step_copy``
    (rows written before 2026-11-23) reads back with it as 0, the copy that plan assumed."""
    body = {
        "model": "gpt3-1.3b", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8, "top_k": 2,
        "training": {"global_batch_size": 64, "seq_length": 2048, "stack": "deepspeed-zero3", "optimizer_sub_group_params": 7},
    }
    created = api.post("/v1/plans", json=body)
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    engine = sqlalchemy.create_engine(database_url)
    try:
        with engine.begin() as connection:
            rows = connection.execute(
                sqlalchemy.select(PlanCandidate.id, PlanCandidate.document).where(PlanCandidate.plan_id == plan_id)
            ).all()
            assert rows and all("optimizer_step_copy" in json.dumps(document) for _, document in rows)
            for row_id, document in rows:
                connection.execute(
                    sqlalchemy.update(PlanCandidate).where(PlanCandidate.id == row_id).values(
                        document=_without(document, "optimizer_step_copy")
                    )
                )
    finally:
        engine.dispose()
    stored = api.get(f"/v1/plans/{plan_id}")
    assert stored.status_code == 200, stored.text
    for candidate in stored.json()["candidates"]:
        assert candidate["memory"]["breakdown_gib"]["optimizer_step_copy"] == 0.0
    # Everything else reads back as it was stored.
    assert _without(stored.json(), "optimizer_step_copy") == _without(created.json(), "optimizer_step_copy")


def test_the_api_reports_what_nvidia_smi_shows_beside_the_peak(api):
    """The evaluation's memory carries the reserved figure: for DeepSpeed's ZeRO-1 under a
    pipeline (gpt3-13b, tp 2, pp 4, dp 4: the step's buffers are smaller than what backward frees)
    the peak plus the segments the step's copies take, for a stack without them the peak."""
    def body(stack: str) -> dict:
        return {
            "model": "gpt3-13b", "cluster": "dgx-a100-80gb", "num_gpus": 32,
            "training": {"global_batch_size": 256, "seq_length": 2048, "precision": "fp16", "stack": stack},
            "parallel": {"dp_size": 4, "tp_size": 2, "pp_size": 4, "zero_stage": 1, "micro_batch_size": 2, "recompute": "full"},
        }

    deepspeed = api.post("/v1/evaluations", json=body("megatron-deepspeed-2022"))
    megatron = api.post("/v1/evaluations", json=body("megatron-lm-2024"))
    assert deepspeed.status_code == megatron.status_code == 200, (deepspeed.text, megatron.text)
    ds, mg = deepspeed.json()["memory"], megatron.json()["memory"]
    assert ds["breakdown_gib"]["optimizer_step_copy"] == 0.0
    assert ds["reserved_gib"] > ds["peak_gib"] + 1.0  # the step's flat copies in segments of their own
    assert ds["reserved_gib"] <= ds["capacity_gib"]
    assert mg["reserved_gib"] == pytest.approx(mg["peak_gib"])

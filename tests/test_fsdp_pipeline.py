"""FSDP under a pipeline (issue 13, mechanisms 4 and 6): torchtitan runs ZeRO-2/3 with pipeline
parallelism, without resharding after forward, and syncs gradients on the last micro-batch only,
so a stage holds its weights and fp32 gradients unsharded; only optimizer states stay sharded."""

from __future__ import annotations

import pytest

import catalog
from solver.cost.comm import data_parallel_collective_s
from solver.cost.evaluate import evaluate
from solver.cost.memory import GIB_BYTES, OPTIMIZER_BYTES_PER_PARAM, model_state_bytes
from solver.frameworks import framework_violations
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Framework, OptimizerKind, Recompute, TrainingSpec, ZeroStage


def test_state_bytes_under_a_pipeline():
    params, dp = 1e9, 8
    for zero in (ZeroStage.OS_G, ZeroStage.OS_G_P):
        piped = model_state_bytes(params, zero, dp, OptimizerKind.ADAM, pp_size=4)
        assert piped == {"weights": 2 * params, "gradients": 4 * params, "optimizer_states": 12 * params / dp}
        flat = model_state_bytes(params, zero, dp, OptimizerKind.ADAM, pp_size=1)
        assert flat["gradients"] == 2 * params / dp
    # ZeRO-0/1 are unchanged by the pipeline.
    assert model_state_bytes(params, ZeroStage.OS, dp, OptimizerKind.ADAM, pp_size=4) == model_state_bytes(
        params, ZeroStage.OS, dp, OptimizerKind.ADAM
    )


def test_only_torchtitan_runs_it_and_any_admits_it():
    piped = ParallelConfig(2, 2, 4, ZeroStage.OS_G_P, 1, Recompute.FULL)
    assert framework_violations(piped, Framework.TORCHTITAN) == []
    assert framework_violations(piped, Framework.ANY) == []
    for framework in (Framework.DEEPSPEED, Framework.MEGATRON, Framework.FSDP):
        assert framework_violations(piped, framework), framework
    # 'any' refuses what no framework runs; today every (ZeRO, pp, cp) is run by one of them.
    grid = [ParallelConfig(2, 2, pp, ZeroStage(z), 1, Recompute.FULL, cp_size=cp) for z in range(4) for pp in (1, 4) for cp in (1, 2)]
    for parallel in grid:
        runs = [f for f in (Framework.MEGATRON, Framework.DEEPSPEED, Framework.FSDP, Framework.TORCHTITAN)
                if not framework_violations(parallel, f)]
        assert runs, parallel
        assert framework_violations(parallel, Framework.ANY) == []


def test_evaluation_charges_gathered_weights_fp32_grads_and_one_sync_a_step():
    cluster = catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-h100", 64))
    model = catalog.get_model("gpt3-13b")
    training = TrainingSpec(256, 2048, overlap_grad_reduce=False)
    zero3 = ParallelConfig(8, 2, 4, ZeroStage.OS_G_P, 1, Recompute.FULL)
    zero1 = ParallelConfig(8, 2, 4, ZeroStage.OS, 1, Recompute.FULL)
    ev3 = evaluate(model, cluster, training, zero3, num_gpus=64, framework=Framework.TORCHTITAN)
    ev1 = evaluate(model, cluster, training, zero1, num_gpus=64, framework=Framework.MEGATRON)
    stage3, stage1 = ev3.stages[0], ev1.stages[0]
    params = stage3.parameter_count
    m3, m1 = stage3.memory_bytes, stage1.memory_bytes
    assert m3.weights == m1.weights == 2 * params
    assert m3.gradients == 4 * params and m1.gradients == 2 * params
    assert m3.optimizer_states == m1.optimizer_states == pytest.approx(OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.ADAM] * params / 8)
    assert m3.zero3_gather_buffers == 0
    assert stage3.peak_bytes - stage1.peak_bytes == pytest.approx(2 * params * 1.05, rel=1e-6)  # + fragmentation share
    # One reduce-scatter (fp32) and one all-gather a step, after backward (overlap off here).
    expected = max(
        data_parallel_collective_s(cluster, 2, 8, 4 * s.parameter_count, "reduce_scatter")
        + data_parallel_collective_s(cluster, 2, 8, 2 * s.parameter_count, "all_gather")
        for s in ev3.stages
    )
    assert ev3.prediction.breakdown_s["dp_comm_exposed_s"] == pytest.approx(expected, rel=1e-9)
    assert ev3.peak_bytes / GIB_BYTES < 80

"""Offload to NVMe (issue 16): ZeRO-Infinity's third tier (Rajbhandari et al. 2021, arXiv
2104.07857) as DeepSpeed's ZeRO-3 runs it (``offload_optimizer`` / ``offload_param`` device nvme).

Golden values are the sources' own: a DGX-2 holds 30 TB of NVMe (DeepSpeed's ZeRO-Inference post)
and reads 28 GB/s of it, 1.75 GB/s per GPU when its 16 GPUs each move their own partition
(ZeRO-Infinity's SC21 talk, DeepSpeed docs/assets/files/SC21-ZeRO-Infinity.pdf: 1,792 GB/s over
64 DGX-2 nodes); ZeRO-Infinity fine-tunes a trillion-parameter model on one DGX-2 ("1T params on a
single node", its talk; its abstract: "fine-tune trillion parameter models on a single NVIDIA
DGX-2 node") only with the model states on NVMe: in host memory they take 16-18 bytes per
parameter, over 16 TB against the node's 1.5 TB. No source states a DGX-2's NVMe write bandwidth,
so the tests give one inline (20 GB/s), as a request must.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

import catalog
from catalog.loader import node_cluster_entry
from solver.cost.evaluate import evaluate
from solver.cost.offload import (
    CPU_OPTIMIZER_BYTES_PER_PARAM,
    HOST_MEMORY_EFFICIENCY,
    NVME_OPTIMIZER_SWAP_BUFFERS,
    NVME_PARAM_BUFFER_ELEMENTS,
    NVME_PARAM_SWAP_BUFFERS,
    NVME_SUB_GROUP_ELEMENTS,
    PCIE_EFFICIENCY,
    host_bytes_per_gpu,
    nvme_bytes_per_gpu,
    nvme_share_bytes_per_s,
)
from solver.frameworks import ExportFormat, PlanToExport, export_plan, framework_violations
from solver.search.loop import search
from solver.search.request import Constraints, Objective, SearchRequest
from solver.spec.dimensions import NvmeOffload, Offload
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig, parallel_from_dict, parallel_to_dict
from solver.spec.rules import Rule
from solver.spec.training import Framework, OptimizerKind, Precision, Recompute, TrainingSpec, ZeroStage

GIB = 2**30
DGX2 = catalog.cluster_spec_from_dict(node_cluster_entry("dgx2-v100", 16))
WRITE_BYTES_PER_S = 20e9  # assumed: no source states a DGX-2's NVMe write bandwidth
DGX2_NVME = replace(DGX2, nvme_write_bytes_per_s=WRITE_BYTES_PER_S)
TRAINING = TrainingSpec(global_batch_size=32, seq_length=1024, precision=Precision.FP16)
ONE_GPU = ParallelConfig(micro_batch_size=1, recompute=Recompute.FULL, zero_stage=ZeroStage.OS_G_P)
HOST = replace(ONE_GPU, offload=Offload.OPTIMIZER_PARAMS)
NVME_OPTIMIZER = replace(HOST, nvme_offload=NvmeOffload.OPTIMIZER)
NVME_ALL = replace(HOST, nvme_offload=NvmeOffload.OPTIMIZER_PARAMS)
# A trillion-parameter GPT (128 layers of hidden 25,600: 12 x 128 x 25,600^2 = 1.007e12 in the
# layers), trained as ZeRO-Infinity does on one node, split over its 16 GPUs by NVSwitch.
ONE_T = ModelSpec(name="gpt-1t", num_layers=128, hidden_size=25600, num_attention_heads=160, vocab_size=51200, seq_length=1024)
ONE_T_TRAINING = TrainingSpec(global_batch_size=16, seq_length=1024, precision=Precision.FP16)
ONE_T_LAYOUT = ParallelConfig(
    tp_size=16, micro_batch_size=1, recompute=Recompute.FULL, zero_stage=ZeroStage.OS_G_P, sequence_parallel=True,
    offload=Offload.OPTIMIZER_PARAMS_ACTIVATIONS,
)


# --------------------------------------------------------------------------- cluster facts


def test_the_dgx2_carries_its_sourced_nvme_capacity_and_read_bandwidth_not_a_write_bandwidth():
    entry = catalog.get_entry("nodes", "dgx2-v100")
    assert (entry["nvme_gbytes"], entry["nvme_read_gbytes_per_s"]) == (30000, 28.0)
    assert "nvme_write_gbytes_per_s" not in entry
    assert {"nvme_gbytes", "nvme_read_gbytes_per_s"} <= set(entry["sources"])
    assert (DGX2.nvme_bytes, DGX2.nvme_read_bytes_per_s, DGX2.nvme_write_bytes_per_s) == (30e12, 28e9, None)
    assert not DGX2.has_nvme_facts and DGX2_NVME.has_nvme_facts
    # No other node states NVMe figures with a source: none carries them.
    for node in catalog.list_entries("nodes"):
        if node["name"] != "dgx2-v100":
            assert not {"nvme_gbytes", "nvme_read_gbytes_per_s", "nvme_write_gbytes_per_s"} & set(node), node["name"]


@pytest.mark.parametrize(("field", "value"), [
    ("nvme_bytes", 0.0), ("nvme_bytes", 2.0**61), ("nvme_read_bytes_per_s", 0.0), ("nvme_write_bytes_per_s", float("inf")),
])
def test_nvme_facts_outside_their_range_are_refused_naming_the_field(field, value):
    with pytest.raises(SpecError) as error:
        replace(DGX2_NVME, **{field: value})
    assert error.value.field == f"cluster.{field}"


def test_every_gpu_of_a_node_gets_its_share_of_the_nodes_nvme_bandwidth():
    # ZeRO-Infinity's talk: 28 GB/s of NVMe per DGX-2, 1.75 GB/s for each of its 16 GPUs.
    assert nvme_share_bytes_per_s(DGX2_NVME, 16) == pytest.approx(1.75e9)
    assert nvme_share_bytes_per_s(DGX2_NVME, 1) == pytest.approx(28e9)
    assert nvme_share_bytes_per_s(DGX2_NVME, 64 * 16, write=True) == pytest.approx(WRITE_BYTES_PER_S / 16)


# --------------------------------------------------------------------------- memory


def test_nvme_holds_16_bytes_per_parameter_of_optimizer_states_and_18_with_the_parameters():
    shard = 1e9
    states = 12 * shard  # Adam's optimizer states of the shard, as the GPU would hold them
    assert nvme_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER, NvmeOffload.OPTIMIZER) == pytest.approx(16 * shard)
    assert nvme_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER_PARAMS, NvmeOffload.OPTIMIZER_PARAMS) == pytest.approx(18 * shard)
    assert nvme_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER_PARAMS, NvmeOffload.NONE) == 0
    # Host memory keeps only the swappers' pinned buffers: 4 fp32 buffers of one sub-group, and
    # 5 x 1e8 16-bit parameters; the 16-bit parameters themselves where they stay on the host.
    pool = NVME_OPTIMIZER_SWAP_BUFFERS * 4 * NVME_SUB_GROUP_ELEMENTS
    assert host_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER, NvmeOffload.OPTIMIZER) == pytest.approx(pool)
    assert host_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER_PARAMS, NvmeOffload.OPTIMIZER) == pytest.approx(pool + 2 * shard)
    params_pool = NVME_PARAM_SWAP_BUFFERS * NVME_PARAM_BUFFER_ELEMENTS * 2
    assert host_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER_PARAMS, NvmeOffload.OPTIMIZER_PARAMS) == pytest.approx(pool + params_pool)
    assert host_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER_PARAMS, NvmeOffload.NONE) == pytest.approx(18 * shard)


def test_the_gpu_holds_the_same_with_the_states_on_nvme_as_in_host_memory():
    model = catalog.get_model("gpt3-13b")
    host = evaluate(model, DGX2_NVME, TRAINING, HOST, num_gpus=1)
    for parallel in (NVME_OPTIMIZER, NVME_ALL):
        nvme = evaluate(model, DGX2_NVME, TRAINING, parallel, num_gpus=1)
        assert nvme.stages[0].memory_bytes == host.stages[0].memory_bytes
    params = host.stages[0].parameter_count
    nvme = evaluate(model, DGX2_NVME, TRAINING, NVME_ALL, num_gpus=1)
    assert nvme.nvme_bytes_per_node == pytest.approx(18 * params)
    assert host.nvme_bytes_per_node == 0 and host.host_bytes_per_node == pytest.approx(18 * params)
    assert nvme.host_bytes_per_node < 3 * GIB  # the pinned buffers: 1.6 GB + 1 GB


def test_a_trillion_parameters_fit_one_dgx2_only_with_the_model_states_on_nvme():
    host = evaluate(ONE_T, DGX2_NVME, ONE_T_TRAINING, ONE_T_LAYOUT, num_gpus=16)
    assert [v.rule for v in host.violations] == [Rule.HOST_MEMORY]
    # 18 bytes per parameter in host memory: over 16 TiB against 1.5 TiB.
    assert host.host_bytes_per_node > 16_000 * GIB
    optimizer = evaluate(ONE_T, DGX2_NVME, ONE_T_TRAINING, replace(ONE_T_LAYOUT, nvme_offload=NvmeOffload.OPTIMIZER), num_gpus=16)
    # The 16-bit parameters alone (2 bytes each, 2 TB) still overflow the host.
    assert [v.rule for v in optimizer.violations] == [Rule.HOST_MEMORY]
    everything = replace(ONE_T_LAYOUT, nvme_offload=NvmeOffload.OPTIMIZER_PARAMS)
    nvme = evaluate(ONE_T, DGX2_NVME, ONE_T_TRAINING, everything, num_gpus=16)
    assert nvme.feasible
    params = 16 * nvme.stages[0].parameter_count
    assert params == pytest.approx(1.0e12, rel=0.02)
    assert nvme.nvme_bytes_per_node == pytest.approx(18 * params) and nvme.nvme_bytes_per_node < 30e12
    # On drives of 15 TB the same plan does not fit, and says where it ran out.
    small = evaluate(ONE_T, replace(DGX2_NVME, nvme_bytes=15e12), ONE_T_TRAINING, everything, num_gpus=16)
    assert [v.rule for v in small.violations] == [Rule.NVME_CAPACITY]
    assert "18.14 TB per node" in small.violations[0].text and "15.00 TB" in small.violations[0].text


# --------------------------------------------------------------------------- time


def test_the_step_reads_and_writes_the_states_beside_the_cpu_step_not_overlapped():
    model = catalog.get_model("gpt3-13b")
    host = evaluate(model, DGX2_NVME, TRAINING, HOST, num_gpus=1).prediction.breakdown_s
    params = evaluate(model, DGX2_NVME, TRAINING, HOST, num_gpus=1).stages[0].parameter_count
    cpu_s = CPU_OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.ADAM] * params / (256e9 * HOST_MEMORY_EFFICIENCY)
    assert host["optimizer_s"] == pytest.approx(cpu_s)
    # States (12) and fp32 gradients (4) read back; gradients written at the boundary and the
    # states written after the step (16); with the parameters on NVMe their new copy too (2).
    read_s, write_s = 16 * params / 28e9, 16 * params / WRITE_BYTES_PER_S
    optimizer = evaluate(model, DGX2_NVME, TRAINING, NVME_OPTIMIZER, num_gpus=1).prediction.breakdown_s
    assert optimizer["optimizer_s"] == pytest.approx(cpu_s + read_s + write_s)
    everything = evaluate(model, DGX2_NVME, TRAINING, NVME_ALL, num_gpus=1).prediction.breakdown_s
    assert everything["optimizer_s"] == pytest.approx(cpu_s + read_s + write_s + 2 * params / WRITE_BYTES_PER_S)
    # Sixteen GPUs of the node share its drives: each moves its shard at a sixteenth of them.
    sixteen = evaluate(model, DGX2_NVME, TRAINING, replace(NVME_OPTIMIZER, dp_size=16, micro_batch_size=2), num_gpus=16)
    shard = sixteen.stages[0].parameter_count / 16
    assert sixteen.prediction.breakdown_s["optimizer_s"] == pytest.approx(
        16 * CPU_OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.ADAM] * shard / (256e9 * HOST_MEMORY_EFFICIENCY)
        + 16 * (16 * shard / 28e9 + 16 * shard / WRITE_BYTES_PER_S)
    )


def test_parameters_on_nvme_arrive_at_the_slower_of_nvme_and_pcie():
    model = catalog.get_model("gpt3-1.3b")
    params = evaluate(model, DGX2_NVME, TRAINING, HOST, num_gpus=1).stages[0].parameter_count
    # Fast drives: PCIe (16 GB/s x 0.8) is the slower link, and its copies hide behind compute
    # as with the parameters in host memory; the first layer also waits for its NVMe read.
    host = evaluate(model, DGX2_NVME, TRAINING, HOST, num_gpus=1).prediction.breakdown_s
    fast = evaluate(model, DGX2_NVME, TRAINING, NVME_ALL, num_gpus=1).prediction.breakdown_s
    assert fast["dp_comm_exposed_s"] >= host["dp_comm_exposed_s"]
    assert fast["dp_comm_exposed_s"] - host["dp_comm_exposed_s"] < 0.01 * 32
    # Slow drives (0.5 GB/s): every pass waits for them instead.
    slow_cluster = replace(DGX2_NVME, nvme_read_bytes_per_s=0.5e9)
    ev = evaluate(model, slow_cluster, TRAINING, NVME_ALL, num_gpus=1)
    slow, stage = ev.prediction.breakdown_s, ev.stages[0]
    assert 2 * params / 0.5e9 > 2 * params / (16e9 * PCIE_EFFICIENCY)
    per_pass_s = 2 * params / 0.5e9
    # 32 micro-batches, each reading every parameter in forward and again in backward.
    assert slow["dp_comm_exposed_s"] > 32 * (2 * per_pass_s - stage.time_per_micro_batch_s)
    assert slow["dp_comm_exposed_s"] < 32 * (2 * per_pass_s + 1.0)


# --------------------------------------------------------------------------- legality


def test_nvme_rules_are_named():
    model = catalog.get_model("gpt3-1.3b")
    cases = [
        (DGX2_NVME, replace(ONE_GPU, nvme_offload=NvmeOffload.OPTIMIZER), Rule.NVME_OFFLOAD_MODE, "parallel.nvme_offload"),
        (DGX2_NVME, replace(ONE_GPU, offload=Offload.OPTIMIZER, nvme_offload=NvmeOffload.OPTIMIZER_PARAMS), Rule.NVME_OFFLOAD_MODE,
         "parallel.nvme_offload"),
        (DGX2, NVME_OPTIMIZER, Rule.OFFLOAD_NEEDS_NVME, "parallel.nvme_offload"),  # no write bandwidth given
        (DGX2_NVME, replace(NVME_OPTIMIZER, offload=Offload.OPTIMIZER, zero_stage=ZeroStage.OS_G), Rule.OFFLOAD_NEEDS_ZERO,
         "parallel.zero_stage"),
    ]
    for cluster, parallel, rule, field in cases:
        with pytest.raises(SpecError) as error:
            evaluate(model, cluster, TRAINING, parallel, num_gpus=1)
        assert (error.value.rule, error.value.field) == (rule, field)
    assert "nvme_write_gbytes_per_s" in str(pytest.raises(SpecError, evaluate, model, DGX2, TRAINING, NVME_OPTIMIZER, num_gpus=1).value)


def test_the_parallel_object_carries_nvme_offload():
    assert parallel_to_dict(NVME_ALL)["nvme_offload"] == "optimizer+params"
    assert parallel_to_dict(ParallelConfig())["nvme_offload"] == "none"
    assert parallel_from_dict({"offload": "optimizer", "nvme_offload": "optimizer"}).nvme_offload is NvmeOffload.OPTIMIZER
    with pytest.raises(SpecError) as error:
        parallel_from_dict({"nvme_offload": "activations"})
    assert error.value.field == "parallel.nvme_offload"


# --------------------------------------------------------------------------- search


def _cramped(host_gib: float = 10.0, gpu_gib: float = 16.0):
    """One DGX-2 with 16 GiB GPUs and 10 GiB of host memory: 1.3B fits neither without offload
    (21 GB of model states) nor with them in host memory (16 bytes a parameter), only on NVMe."""
    return replace(DGX2_NVME, host_memory_bytes=host_gib * GIB, gpu=replace(DGX2.gpu, memory_bytes=int(gpu_gib * GIB)))


def test_search_keeps_nvme_for_what_fits_nowhere_else():
    model = catalog.get_model("gpt3-1.3b")
    cramped = search(SearchRequest(model, _cramped(), TRAINING, num_gpus=1, top_k=3))
    assert cramped.status == "succeeded"
    assert all(c.parallel.nvme_offload is not NvmeOffload.NONE for c in cramped.candidates)
    # With the host memory to hold them, the states stay there: NVMe is never chosen.
    roomy = search(SearchRequest(model, _cramped(host_gib=512), TRAINING, num_gpus=1, top_k=3))
    assert roomy.status == "succeeded" and roomy.best.parallel.offload is not Offload.NONE
    assert all(c.parallel.nvme_offload is NvmeOffload.NONE for c in roomy.candidates)
    # On a node that does not give its NVMe facts, it stays infeasible, on host memory.
    bare = search(SearchRequest(model, replace(_cramped(), nvme_write_bytes_per_s=None), TRAINING, num_gpus=1))
    assert bare.status == "infeasible" and "[host_memory]" in bare.explanation.rejections
    # A request may pin it off, or ask for it outright.
    pinned = search(SearchRequest(model, _cramped(), TRAINING, num_gpus=1, constraints=Constraints.parse({"nvme_offload": "none"})))
    assert pinned.status == "infeasible"
    asked = search(SearchRequest(model, _cramped(host_gib=512), TRAINING, num_gpus=1,
                                 constraints=Constraints.parse({"nvme_offload": "optimizer+params"})))
    assert asked.status == "succeeded" and asked.best.parallel.nvme_offload is NvmeOffload.OPTIMIZER_PARAMS


def test_min_gpus_turns_to_nvme_to_use_fewer_gpus():
    # Two 16 GiB GPUs hold 1.3B's states sharded (ZeRO-3); one holds them only with them on NVMe.
    training = replace(TRAINING, train_tokens=32 * 1024 * 100)
    request = SearchRequest(catalog.get_model("gpt3-1.3b"), _cramped(), training, objective=Objective.MIN_GPUS, deadline_s=1e7)
    result = search(request)
    assert result.best.parallel.num_gpus == 1 and result.best.parallel.nvme_offload is not NvmeOffload.NONE
    two = search(replace(request, objective=Objective.MAX_THROUGHPUT, num_gpus=2, deadline_s=None))
    assert two.status == "succeeded" and two.best.parallel.offload is Offload.NONE


def test_search_plans_a_trillion_parameters_on_one_dgx2_on_nvme():
    result = search(SearchRequest(ONE_T, DGX2_NVME, ONE_T_TRAINING, num_gpus=16, top_k=1))
    assert result.status == "succeeded"
    best = result.best
    assert best.parallel.nvme_offload is NvmeOffload.OPTIMIZER_PARAMS and best.evaluation.feasible
    assert best.evaluation.nvme_bytes_per_node == pytest.approx(18e12, rel=0.02)


def _brute_force(model, cluster, training, num_gpus):
    """Every configuration of one stage (offload needs pp 1) with the full-recompute counts of
    its one chunk, every offload and NVMe mode, through the evaluator: the fastest feasible."""
    best = None
    layers = model.num_layers
    for tp in (t for t in range(1, num_gpus + 1) if num_gpus % t == 0):
        dp = num_gpus // tp
        for zero, mb, offload, nvme in itertools.product(range(4), (1, 2, 4, 8, 16, 32), Offload, NvmeOffload):
            for base, full in [(Recompute.NONE, None), (Recompute.SELECTIVE, None),
                               *((Recompute.FULL, (k,)) for k in range(layers + 1))]:
                try:
                    parallel = ParallelConfig(dp, tp, 1, ZeroStage(zero), mb, base, full_recompute_layers=full,
                                              offload=offload, nvme_offload=nvme)
                    ev = evaluate(model, cluster, training, parallel, num_gpus)
                except SpecError:
                    continue
                if ev.feasible and (best is None or ev.prediction.step_time_s < best[0]):
                    best = (ev.prediction.step_time_s, parallel)
    return best


def test_search_equals_brute_force_where_only_nvme_fits():
    model = ModelSpec(name="nvme-small", num_layers=4, hidden_size=4096, num_attention_heads=32, vocab_size=32000, seq_length=1024)
    training = TrainingSpec(global_batch_size=32, seq_length=1024, precision=Precision.FP16)
    # 0.94B parameters: 15 GB of model states; 6 GiB GPUs, 4 GiB of host memory per GPU.
    cluster = replace(_cramped(host_gib=4.0, gpu_gib=6.0), gpus_per_node=1)
    truth = _brute_force(model, cluster, training, 1)
    assert truth is not None and truth[1].nvme_offload is not NvmeOffload.NONE
    result = search(SearchRequest(model, cluster, training, num_gpus=1))
    assert result.status == "succeeded"
    assert result.best.evaluation.prediction.step_time_s == pytest.approx(truth[0])


# --------------------------------------------------------------------------- exports


def _ds_config(export) -> dict:
    return json.loads(next(f for f in export.files if f.name == "ds_config.json").text)


@pytest.mark.parametrize("parallel", [NVME_OPTIMIZER, NVME_ALL, replace(NVME_OPTIMIZER, offload=Offload.OPTIMIZER)])
def test_deepspeed_export_writes_device_nvme_and_deepspeed_reads_it(parallel):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    export = export_plan(PlanToExport(catalog.get_model("gpt3-13b"), TRAINING, parallel, 1), ExportFormat.DEEPSPEED)
    assert export.exact
    raw = _ds_config(export)["zero_optimization"]
    zero = DeepSpeedZeroConfig(**raw)
    assert zero.stage == 3 and zero.sub_group_size == NVME_SUB_GROUP_ELEMENTS
    assert zero.offload_optimizer.device == OffloadDeviceEnum.nvme
    assert str(zero.offload_optimizer.nvme_path) == "/local_nvme" and zero.offload_optimizer.buffer_count == NVME_OPTIMIZER_SWAP_BUFFERS
    if parallel.offload is Offload.OPTIMIZER:
        assert zero.offload_param is None
    elif parallel.nvme_offload is NvmeOffload.OPTIMIZER_PARAMS:
        assert zero.offload_param.device == OffloadDeviceEnum.nvme and zero.offload_param.max_in_cpu == 0
        assert (zero.offload_param.buffer_count, zero.offload_param.buffer_size) == (NVME_PARAM_SWAP_BUFFERS, NVME_PARAM_BUFFER_ELEMENTS)
    else:
        assert zero.offload_param.device == OffloadDeviceEnum.cpu
    # The path is the user's to set: the notes and the script's header say so.
    assert any("nvme_path" in note and "placeholder" in note for note in export.notes)
    script = next(f for f in export.files if f.name == "launch.sh").text
    assert "on NVMe (set nvme_path in ds_config.json)" in script and "--cpu-optimizer" in script


@pytest.mark.parametrize("export_format", [ExportFormat.MEGATRON, ExportFormat.TORCHTITAN, ExportFormat.NEMO])
def test_frameworks_without_nvme_offload_name_the_field(export_format):
    parallel = replace(NVME_ALL, dp_size=8, micro_batch_size=4)
    export = export_plan(PlanToExport(catalog.get_model("gpt3-13b"), TRAINING, parallel, 8), export_format)
    assert not export.exact
    difference = next(d for d in export.differences if d.field == "parallel.nvme_offload")
    assert (difference.planned, difference.exported) == ("optimizer+params", "none")
    assert "no offload to NVMe" in difference.reason
    assert export.parallel.nvme_offload is NvmeOffload.NONE


def test_fsdp_refuses_nvme_and_any_framework_runs_it_through_deepspeed():
    violations = framework_violations(NVME_ALL, Framework.FSDP)
    assert [v.rule for v in violations] == [Rule.FRAMEWORK_NVME]
    assert framework_violations(NVME_ALL, Framework.DEEPSPEED) == [] and framework_violations(NVME_ALL, Framework.ANY) == []

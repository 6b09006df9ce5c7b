"""Offload (issue 16): optimizer states to host memory (ZeRO-Offload, Ren et al. 2021, arXiv
2101.06840) and parameters too (ZeRO-Infinity, Rajbhandari et al. 2021, arXiv 2104.07857).

Golden values are the papers' memory claims, on the node type they ran on (DGX-2: 16 V100 32GB,
1.5 TB of host memory): ZeRO-Offload trains a 13B model on one V100 where PyTorch alone stops at
about 1.4B (abstract: "over 13 billion parameters on a single GPU, a 10x increase in size compared
to popular framework such as PyTorch"; "1.4B parameter model, the largest that can be trained
without running out of memory"), and with model parallelism "over 70 billion parameters on a
single DGX-2 box". The search uses offload only where nothing fits without it.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import catalog
from catalog.loader import node_cluster_entry
from solver.cost.evaluate import evaluate
from solver.cost.memory import GIB_BYTES
from solver.cost.offload import (
    CPU_OPTIMIZER_BYTES_PER_PARAM,
    HOST_MEMORY_EFFICIENCY,
    PCIE_EFFICIENCY,
    cpu_optimizer_step_s,
    host_bytes_per_gpu,
)
from solver.cost.stage import state_bytes_per_parameter
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.search.loop import search
from solver.search.request import Constraints, Objective, SearchRequest
from solver.spec.dimensions import Offload
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig, parallel_from_dict, parallel_to_dict
from solver.spec.rules import Rule
from solver.spec.training import OptimizerKind, Precision, Recompute, TrainingSpec, ZeroStage

DGX2 = catalog.cluster_spec_from_dict(node_cluster_entry("dgx2-v100", 16))  # ZeRO-Offload's node
V100_CAPACITY_GIB = 32  # V100 SXM3 32GB
# GPT-2-style training as in ZeRO-Offload's evaluation: fp16 mixed precision, 1024-token sequences.
TRAINING = TrainingSpec(global_batch_size=32, seq_length=1024, precision=Precision.FP16)
ONE_GPU = ParallelConfig(micro_batch_size=1, recompute=Recompute.FULL)
# ZeRO-Offload on one GPU: DeepSpeed's stage-2 offload, gradients streamed to the host.
ZERO_OFFLOAD = replace(ONE_GPU, zero_stage=ZeroStage.OS_G, offload=Offload.OPTIMIZER)
ZERO_INFINITY = replace(ONE_GPU, zero_stage=ZeroStage.OS_G_P, offload=Offload.OPTIMIZER_PARAMS)


def _fits(model: str, parallel: ParallelConfig, num_gpus: int = 1) -> bool:
    return evaluate(catalog.get_model(model), DGX2, TRAINING, parallel, num_gpus=num_gpus).feasible


# --------------------------------------------------------------------------- host facts


def test_catalog_nodes_carry_sourced_host_facts():
    for name in ("dgx1-v100", "dgx2-v100", "dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "hgx-h200"):
        entry = catalog.get_entry("nodes", name)
        for key in ("host_memory_gib", "pcie_gbytes_per_s", "host_memory_gbytes_per_s"):
            assert entry[key] > 0 and entry["sources"][key], (name, key)
        assert catalog.cluster_spec_from_dict(node_cluster_entry(name, None)).has_host_facts
    assert DGX2.host_memory_bytes == 1536 * GIB_BYTES  # DGX-2 datasheet: 1.5 TB
    assert DGX2.pcie_bytes_per_s == 16e9  # PCIe Gen3 x16, one way
    # A cluster that does not state them (inline specs, the other built-in nodes) cannot offload.
    assert not catalog.cluster_spec_from_dict(node_cluster_entry("mi300x-platform", None)).has_host_facts


# --------------------------------------------------------------------------- memory: golden values


def test_optimizer_offload_keeps_only_the_16_bit_weights_on_the_gpu():
    """ZeRO-Offload Sec 3: of mixed-precision Adam's 16 bytes per parameter the GPU keeps the
    16-bit parameters (2); the host holds fp32 master weights, momentum and variance (12) and
    the fp32 gradients (4)."""
    training = TrainingSpec(global_batch_size=8, seq_length=1024)
    assert state_bytes_per_parameter(ParallelConfig(), training) == 16
    assert state_bytes_per_parameter(ZERO_OFFLOAD, training) == 2
    assert state_bytes_per_parameter(ZERO_INFINITY, training) == 0
    # ZeRO-0/1 keep the 16-bit gradients on the GPU until the step (Megatron-core's optimizer offload).
    assert state_bytes_per_parameter(ParallelConfig(offload=Offload.OPTIMIZER), training) == 4
    optimizer_states_one_param = 12.0
    assert host_bytes_per_gpu(optimizer_states_one_param, OptimizerKind.ADAM, Offload.OPTIMIZER) == 16
    assert host_bytes_per_gpu(optimizer_states_one_param, OptimizerKind.ADAM, Offload.OPTIMIZER_PARAMS) == 18
    # With data parallelism each rank offloads its ZeRO-2 partition (ZeRO-Offload Sec 4.2).
    sharded = state_bytes_per_parameter(ParallelConfig(dp_size=8, zero_stage=ZeroStage.OS_G, offload=Offload.OPTIMIZER), training)
    assert sharded == 2


def test_13b_on_one_v100_only_with_offload_and_14b_pytorch_limit():
    """ZeRO-Offload's headline: 13B trains on one V100 32GB with offload; without it the largest is
    about 1.4B (gpt3-1.3b fits, gpt3-2.7b does not); a 20B model is out of reach even with
    optimizer offload (its 16-bit weights alone are 41 GB)."""
    offload = ZERO_OFFLOAD
    assert _fits("gpt3-13b", offload)
    assert not _fits("gpt3-13b", ONE_GPU)
    assert not _fits("gpt3-13b", replace(ONE_GPU, offload=Offload.OPTIMIZER))  # gradients kept: 26 GB more
    assert _fits("gpt3-1.3b", ONE_GPU)
    assert not _fits("gpt3-2.7b", ONE_GPU)
    assert not _fits("gpt-neox-20b", offload)
    ev = evaluate(catalog.get_model("gpt3-13b"), DGX2, TRAINING, offload, num_gpus=1)
    memory = ev.stages[0].memory_bytes
    assert memory["optimizer_states"] == 0 and memory["gradients"] == 0
    assert memory["weights"] == pytest.approx(2 * ev.stages[0].parameter_count)
    assert ev.peak_bytes <= V100_CAPACITY_GIB * GIB_BYTES
    # 12.9B parameters x 16 bytes on the host (ZeRO-Offload Sec 3): about 192 GiB.
    assert ev.host_bytes_per_node == pytest.approx(16 * ev.stages[0].parameter_count)


def test_70b_on_one_dgx2_with_model_parallelism_and_offload():
    """ZeRO-Offload abstract: with model parallelism, over 70B parameters on a single DGX-2 (16
    V100 32GB), 4.5x what model parallelism alone trains there. tp 8 x dp 2 here."""
    base = ParallelConfig(dp_size=2, tp_size=8, micro_batch_size=1, recompute=Recompute.FULL, sequence_parallel=True)
    assert not _fits("llama2-70b", replace(base, zero_stage=ZeroStage.OS_G_P), 16)
    assert _fits("llama2-70b", replace(base, zero_stage=ZeroStage.OS_G, offload=Offload.OPTIMIZER), 16)
    ev = evaluate(catalog.get_model("llama2-70b"), DGX2, TRAINING, replace(base, zero_stage=ZeroStage.OS_G, offload=Offload.OPTIMIZER))
    assert ev.host_bytes_per_node <= DGX2.host_memory_bytes


def test_parameter_offload_streams_weights_through_two_layer_buffers():
    """ZeRO-Infinity: no resident weights; the layer in use and the one prefetched are on the GPU,
    as ZeRO-3's gather buffers; the host holds 2 more bytes per parameter."""
    model = catalog.get_model("gpt3-13b")
    ev = evaluate(model, DGX2, TRAINING, ZERO_INFINITY, num_gpus=1)
    memory = ev.stages[0].memory_bytes
    layer = max(ev.stages[0].parameter_count / model.num_layers, 0)
    assert memory["weights"] == 0
    # two layers of 16-bit weights, one layer's 16-bit gradients on their way down (the largest
    # layer is the embedding's 0.26B of the 12.9B; buffers are of that size)
    assert memory["zero3_gather_buffers"] > 2 * 2 * layer
    assert ev.host_bytes_per_node == pytest.approx(18 * ev.stages[0].parameter_count)


def test_a_plan_that_overflows_the_host_is_infeasible_naming_host_memory():
    parallel = ParallelConfig(
        dp_size=2, tp_size=8, zero_stage=ZeroStage.OS_G_P, micro_batch_size=1, recompute=Recompute.FULL,
        sequence_parallel=True, offload=Offload.OPTIMIZER_PARAMS,
    )
    ev = evaluate(catalog.get_model("gpt3-175b"), DGX2, TRAINING, parallel)
    assert not ev.feasible
    assert [v.rule for v in ev.violations] == [Rule.HOST_MEMORY]
    assert "1536.0 GiB" in ev.violations[0].text
    # 175B x 18 bytes over one node's 16 GPUs: about 2,900 GiB of 1,536.
    assert ev.host_bytes_per_node == pytest.approx(18 * 175e9, rel=0.02)


# --------------------------------------------------------------------------- time


def test_the_cpu_step_streams_the_shard_at_the_hosts_memory_bandwidth():
    shard = 1e9
    alone = cpu_optimizer_step_s(DGX2, shard, OptimizerKind.ADAM, 1)
    assert alone == pytest.approx(CPU_OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.ADAM] * shard / (256e9 * HOST_MEMORY_EFFICIENCY))
    # Sixteen GPUs of a node step their shards at once, each with a sixteenth of the bandwidth.
    assert cpu_optimizer_step_s(DGX2, shard, OptimizerKind.ADAM, 16) == pytest.approx(16 * alone)


def test_offload_costs_the_cpu_step_and_the_parameter_upload():
    model = catalog.get_model("gpt3-1.3b")
    # 8 sequences a micro-batch: backward outlasts the copy of its 2.6 GB of gradients.
    parallel = replace(ONE_GPU, micro_batch_size=8)
    none = evaluate(model, DGX2, TRAINING, parallel, num_gpus=1).prediction
    offloaded = evaluate(model, DGX2, TRAINING, replace(ZERO_OFFLOAD, micro_batch_size=8), num_gpus=1)
    params = offloaded.stages[0].parameter_count
    step = offloaded.prediction.breakdown_s
    cpu_s = 30 * params / (256e9 * HOST_MEMORY_EFFICIENCY)
    upload_s = 2 * params / (16e9 * PCIE_EFFICIENCY)
    assert step["optimizer_s"] == pytest.approx(cpu_s + upload_s)
    # Gradients go down during backward, hidden by it; nothing is accumulated on the GPU.
    assert step["dp_comm_exposed_s"] == 0 and step["grad_accumulation_s"] == 0
    assert step["compute_s"] == pytest.approx(none.breakdown_s["compute_s"])
    assert offloaded.prediction.step_time_s > none.step_time_s - none.breakdown_s["grad_accumulation_s"]
    # One sequence a micro-batch: 32 copies of the gradients down, each longer than its backward.
    small = evaluate(model, DGX2, TRAINING, ZERO_OFFLOAD, num_gpus=1).prediction.breakdown_s
    assert small["dp_comm_exposed_s"] > 0
    # Gradients kept on the GPU (ZeRO-0/1): accumulated there, sent down once at the step.
    kept = evaluate(model, DGX2, TRAINING, replace(parallel, offload=Offload.OPTIMIZER), num_gpus=1).prediction.breakdown_s
    assert kept["optimizer_s"] == pytest.approx(cpu_s + 2 * upload_s)
    assert kept["grad_accumulation_s"] == pytest.approx(none.breakdown_s["grad_accumulation_s"])


def test_parameter_offload_exposes_what_compute_cannot_hide():
    model = catalog.get_model("gpt3-1.3b")
    slow_pcie = replace(DGX2, pcie_bytes_per_s=1e8)  # 0.1 GB/s: nothing hides it
    parallel = ZERO_INFINITY
    fast = evaluate(model, DGX2, TRAINING, parallel, num_gpus=1).prediction.breakdown_s
    slow = evaluate(model, slow_pcie, TRAINING, parallel, num_gpus=1).prediction.breakdown_s
    assert slow["dp_comm_exposed_s"] > 10 * max(fast["dp_comm_exposed_s"], 1e-3)


# --------------------------------------------------------------------------- legality


def test_offload_rules_are_named():
    model = catalog.get_model("gpt3-1.3b")
    cases = [
        (DGX2, ParallelConfig(pp_size=2, offload=Offload.OPTIMIZER), Rule.OFFLOAD_WITH_PP),
        (DGX2, ParallelConfig(dp_size=2, zero_stage=ZeroStage.NONE, offload=Offload.OPTIMIZER), Rule.OFFLOAD_NEEDS_ZERO),
        (DGX2, ParallelConfig(dp_size=2, zero_stage=ZeroStage.OS_G, offload=Offload.OPTIMIZER_PARAMS), Rule.OFFLOAD_NEEDS_ZERO),
        (DGX2, ParallelConfig(offload=Offload.OPTIMIZER_PARAMS), Rule.OFFLOAD_NEEDS_ZERO),
        (replace(DGX2, pcie_bytes_per_s=None), ParallelConfig(offload=Offload.OPTIMIZER), Rule.OFFLOAD_NEEDS_HOST),
    ]
    for cluster, parallel, rule in cases:
        with pytest.raises(SpecError) as error:
            evaluate(model, cluster, TRAINING, parallel)
        assert error.value.rule is rule


def test_the_parallel_object_carries_offload():
    parallel = ParallelConfig(offload=Offload.OPTIMIZER_PARAMS)
    assert parallel_to_dict(parallel)["offload"] == "optimizer+params"
    assert parallel_from_dict({"offload": "optimizer"}).offload is Offload.OPTIMIZER
    assert parallel_to_dict(ParallelConfig())["offload"] == "none"
    with pytest.raises(SpecError) as error:
        parallel_from_dict({"offload": "nvme"})
    assert error.value.field == "parallel.offload"


# --------------------------------------------------------------------------- search


def test_search_offloads_13b_on_one_v100_and_not_what_fits_without():
    thirteen = search(SearchRequest(catalog.get_model("gpt3-13b"), DGX2, TRAINING, num_gpus=1))
    assert thirteen.status == "succeeded"
    assert thirteen.best.parallel.offload is not Offload.NONE
    small = search(SearchRequest(catalog.get_model("gpt3-1.3b"), DGX2, TRAINING, num_gpus=1))
    assert small.status == "succeeded" and all(c.parallel.offload is Offload.NONE for c in small.candidates)


def test_search_without_host_facts_or_with_offload_pinned_off_stays_infeasible():
    model = catalog.get_model("gpt3-13b")
    pinned = search(SearchRequest(model, DGX2, TRAINING, num_gpus=1, constraints=Constraints.parse({"offload": "none"})))
    assert pinned.status == "infeasible"
    bare = replace(DGX2, host_memory_bytes=None)
    assert search(SearchRequest(model, bare, TRAINING, num_gpus=1)).status == "infeasible"
    # A request may ask for offload outright.
    asked = search(SearchRequest(
        catalog.get_model("gpt3-1.3b"), DGX2, TRAINING, num_gpus=1, constraints=Constraints.parse({"offload": "optimizer"})
    ))
    assert asked.status == "succeeded" and asked.best.parallel.offload is Offload.OPTIMIZER


def test_70b_on_a_dgx2_is_found_with_offload():
    request = SearchRequest(
        catalog.get_model("llama2-70b"), DGX2, TRAINING, num_gpus=16,
        constraints=Constraints.parse({"tp_size": 8, "micro_batch_size": 1}),
    )
    result = search(request)
    assert result.status == "succeeded" and result.best.parallel.offload is Offload.OPTIMIZER


def test_min_gpus_offloads_to_use_fewer_gpus():
    training = replace(TRAINING, train_tokens=32 * 1024 * 100)
    result = search(SearchRequest(catalog.get_model("gpt3-13b"), DGX2, training, objective=Objective.MIN_GPUS, deadline_s=1e6))
    assert result.best.parallel.num_gpus == 1 and result.best.parallel.offload is not Offload.NONE


# --------------------------------------------------------------------------- exports


def _ds_config(export) -> dict:
    return json.loads(next(f for f in export.files if f.name == "ds_config.json").text)


@pytest.mark.parametrize(("parallel", "stage"), [
    (ZERO_OFFLOAD, 2), (ZERO_INFINITY, 3),
    (replace(ONE_GPU, offload=Offload.OPTIMIZER), 1),  # DeepSpeed offloads from ZeRO-1; one plan with ZeRO-0 at dp 1
])
def test_deepspeed_export_writes_offload_and_deepspeed_reads_it(parallel, stage):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    offload = parallel.offload
    plan = PlanToExport(catalog.get_model("gpt3-13b"), TRAINING, parallel, 1)
    export = export_plan(plan, ExportFormat.DEEPSPEED)
    assert export.exact
    zero = DeepSpeedZeroConfig(**_ds_config(export)["zero_optimization"])
    assert zero.stage == stage
    assert zero.offload_optimizer is not None and zero.offload_optimizer.device == OffloadDeviceEnum.cpu
    assert zero.offload_optimizer.pin_memory
    assert (zero.offload_param is not None) is (offload is Offload.OPTIMIZER_PARAMS)
    if zero.offload_param is not None:
        assert zero.offload_param.device == OffloadDeviceEnum.cpu
    script = next(f for f in export.files if f.name == "launch.sh").text
    assert "--cpu-optimizer" in script and f"--zero-stage {stage}" in script


def test_deepspeed_export_without_offload_is_unchanged():
    plan = PlanToExport(catalog.get_model("gpt3-1.3b"), TRAINING, ONE_GPU, 1)
    config = _ds_config(export_plan(plan, ExportFormat.DEEPSPEED))
    assert "offload_optimizer" not in config["zero_optimization"] and config["zero_optimization"]["stage"] == 0


def _flags(export, script: str) -> dict:
    from test_export_frameworks import _file, script_arguments

    return script_arguments(_file(export, script).text, "pretrain_gpt.py")[1]


def test_megatron_export_offloads_the_optimizer_and_megatron_core_reads_the_flags(monkeypatch):
    import megatron.core.optimizer.optimizer_config as optimizer_config
    from megatron.core.optimizer import OptimizerConfig

    # The precision-aware optimizer asks Transformer Engine's version, absent here (CPU-only venv).
    monkeypatch.setattr(optimizer_config, "is_te_min_version", lambda *args, **kwargs: True)

    plan = PlanToExport(catalog.get_model("llama2-70b"), TRAINING, ParallelConfig(
        dp_size=2, tp_size=8, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL,
        sequence_parallel=True, offload=Offload.OPTIMIZER,
    ), 16)
    export = export_plan(plan, ExportFormat.MEGATRON)
    assert export.exact and export.parallel.offload is Offload.OPTIMIZER
    flags = _flags(export, "pretrain_gpt.sh")
    fields = set(OptimizerConfig.__dataclass_fields__)
    offload_flags = ("--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer", "--use-distributed-optimizer")
    kwargs = {}
    for flag in offload_flags:
        name = flag[2:].replace("-", "_")
        assert flag in flags and name in fields, flag
        kwargs[name] = True if flags[flag] is None else float(flags[flag])
    config = OptimizerConfig(optimizer="adam", **kwargs)
    assert config.optimizer_cpu_offload and config.optimizer_offload_fraction == 1.0


def test_megatron_export_names_what_its_offload_does_not_do():
    plan = PlanToExport(catalog.get_model("gpt3-13b"), TRAINING, ZERO_INFINITY, 1)
    export = export_plan(plan, ExportFormat.MEGATRON)
    assert not export.exact
    fields = {d.field for d in export.differences}
    assert {"parallel.offload", "parallel.zero_stage"} <= fields
    assert export.parallel.offload is Offload.OPTIMIZER and export.parallel.zero_stage == ZeroStage.OS
    # Its gradient buffer stays on the GPU: 13B does not fit one V100 that way.
    assert not evaluate(plan.model, DGX2, export.training, export.parallel, num_gpus=1).feasible


def test_torchtitan_export_offloads_through_fsdp2_and_torchtitan_reads_it(tmp_path):
    from torchtitan.config.manager import ConfigManager

    plan = PlanToExport(catalog.get_model("llama2-70b"), TRAINING, ParallelConfig(
        dp_size=2, tp_size=8, zero_stage=ZeroStage.OS_G, micro_batch_size=1, recompute=Recompute.FULL,
        sequence_parallel=True, offload=Offload.OPTIMIZER,
    ), 16)
    export = export_plan(plan, ExportFormat.TORCHTITAN)
    assert export.parallel.offload is Offload.OPTIMIZER_PARAMS and export.parallel.zero_stage == ZeroStage.OS_G_P
    assert {d.field for d in export.differences} >= {"parallel.offload", "parallel.zero_stage"}
    path = tmp_path / "job.toml"
    path.write_text(export.files[0].text)
    config = ConfigManager().parse_args(["--job.config_file", str(path)])
    assert config.training.enable_cpu_offload is True
    # At one rank torchtitan does not apply FSDP2, so it cannot offload.
    single = export_plan(PlanToExport(catalog.get_model("gpt3-13b"), TRAINING, ZERO_OFFLOAD, 1), ExportFormat.TORCHTITAN)
    assert single.parallel.offload is Offload.NONE and "enable_cpu_offload" not in single.files[0].text


def test_nemo_export_names_the_offload_it_does_not_write():
    export = export_plan(PlanToExport(catalog.get_model("gpt3-13b"), TRAINING, ZERO_OFFLOAD, 1), ExportFormat.NEMO)
    assert "parallel.offload" in {d.field for d in export.differences}
    assert export.parallel.offload is Offload.NONE


def test_an_infeasible_search_names_the_host_memory_offload_ran_out_of():
    """175B on one DGX A100 80GB: nothing fits the GPUs without offload, and offloaded (18 bytes
    a parameter, 3.2 TB) nothing fits the node's 2 TiB of host memory."""
    result = search(SearchRequest(
        catalog.get_model("gpt3-175b"), catalog.get_cluster("dgx-a100-80gb-x1"), TrainingSpec(global_batch_size=64, seq_length=2048),
    ))
    assert result.status == "infeasible"
    explanation = result.explanation.to_dict()
    assert explanation["rejections"]["[host_memory]"] > 0
    # The closest miss is the GPU-memory miss without offload (offloaded plans fit the GPU).
    miss = explanation["closest_miss"]
    assert miss["parallel"]["offload"] == "none" and miss["peak_gib"] > miss["usable_gib"]


# --------------------------------------------------------------------------- activation offload

LONG = TrainingSpec(global_batch_size=8, seq_length=16384, precision=Precision.FP16)
ZERO_INFINITY_ALL = replace(ZERO_INFINITY, offload=Offload.OPTIMIZER_PARAMS_ACTIVATIONS)


def test_activation_offload_moves_the_recomputed_layers_checkpoints_to_the_host():
    """ZeRO-Infinity's activation checkpoints in host memory: of the fully recomputed layers'
    checkpoints (each layer's input, s x b x h 16-bit values) the GPU keeps two in transit."""
    model = catalog.get_model("gpt3-13b")
    params = evaluate(model, DGX2, LONG, ZERO_INFINITY, num_gpus=1)
    everything = evaluate(model, DGX2, LONG, ZERO_INFINITY_ALL, num_gpus=1)
    checkpoint = 2 * LONG.seq_length * model.hidden_size  # one sequence, 16 bit
    moved = params.stages[0].memory_bytes["activations"] - everything.stages[0].memory_bytes["activations"]
    assert moved == pytest.approx((model.num_layers - 2) * checkpoint)
    assert everything.host_bytes_per_node - params.host_bytes_per_node == pytest.approx(model.num_layers * checkpoint)
    # Down in forward, up in backward over PCIe, hidden behind the layers' compute here.
    assert everything.prediction.step_time_s == pytest.approx(params.prediction.step_time_s)
    # Nothing is recomputed, nothing is moved.
    none = replace(ZERO_INFINITY_ALL, recompute=Recompute.NONE)
    assert evaluate(model, DGX2, LONG, none, num_gpus=1).host_bytes_per_node == pytest.approx(
        evaluate(model, DGX2, LONG, replace(none, offload=Offload.OPTIMIZER_PARAMS), num_gpus=1).host_bytes_per_node
    )


def test_search_offloads_activations_where_only_that_fits():
    model = catalog.get_model("gpt3-13b")
    params = evaluate(model, DGX2, LONG, ZERO_INFINITY, num_gpus=1).peak_bytes
    everything = evaluate(model, DGX2, LONG, ZERO_INFINITY_ALL, num_gpus=1).peak_bytes
    fraction = (params + everything) / 2 / (V100_CAPACITY_GIB * GIB_BYTES)
    constraints = Constraints.parse({"max_memory_fraction": fraction, "micro_batch_size": 1})
    result = search(SearchRequest(model, DGX2, LONG, num_gpus=1, constraints=constraints))
    assert result.status == "succeeded" and result.best.parallel.offload is Offload.OPTIMIZER_PARAMS_ACTIVATIONS


def test_activation_offload_exports():
    from deepspeed.runtime.activation_checkpointing.config import DeepSpeedActivationCheckpointingConfig

    plan = PlanToExport(catalog.get_model("gpt3-13b"), LONG, ZERO_INFINITY_ALL, 1)
    deepspeed = export_plan(plan, ExportFormat.DEEPSPEED)
    assert deepspeed.exact
    checkpointing = DeepSpeedActivationCheckpointingConfig(_ds_config(deepspeed))
    assert checkpointing.cpu_checkpointing and checkpointing.partition_activations
    script = next(f for f in deepspeed.files if f.name == "launch.sh").text
    assert "--checkpoint-in-cpu" in script and "--partition-activations" in script
    # Megatron-DeepSpeed's block recomputation does not go through DeepSpeed's checkpointing.
    partial = replace(ZERO_INFINITY_ALL, full_recompute_layers=(20,))
    exported = export_plan(PlanToExport(plan.model, LONG, partial, 1), ExportFormat.DEEPSPEED)
    assert exported.parallel.offload is Offload.OPTIMIZER_PARAMS and "parallel.offload" in {d.field for d in exported.differences}
    for fmt in (ExportFormat.MEGATRON, ExportFormat.NEMO):
        assert "parallel.offload" in {d.field for d in export_plan(plan, fmt).differences}

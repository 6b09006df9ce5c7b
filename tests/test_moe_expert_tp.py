"""Expert tensor parallelism (``expert_tp_size``, issue 16): each routed expert split over its own
group of etp ranks instead of the dense model's tp, as Megatron-core's
--expert-tensor-parallel-size, NeMo / Megatron-Bridge's expert_tensor_parallel_size and
torchtitan's expert_tensor_parallel_degree allow. Left out it is tp, and everything is costed as
before; the dimension, its legality, the experts' memory and traffic, the exports and the search
with it."""

from __future__ import annotations

import dataclasses

import pytest
from test_export_frameworks import _file, script_arguments
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims

import catalog
from solver.cost.analytic import analytic_layers
from solver.cost.comm import all_reduce_s, all_to_all_s, inter_node_link, tp_link
from solver.cost.evaluate import evaluate
from solver.cost.flops import layer_expert_parameter_count
from solver.cost.moe import EXPERT_LOAD_FACTOR, dispatch_bytes, ep_comm_s, moe_mlp_cost
from solver.cost.profile import ProfileShape
from solver.cost.stage import expert_state_bytes_per_parameter
from solver.frameworks import ExportFormat, PlanToExport, export_plan, framework_violations
from solver.search import loop
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.search.result import SearchStats
from solver.search.space import SearchRun, dominated_selective, expert_tp_sizes, is_legal, shapes
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig, parallel_from_dict, parallel_to_dict
from solver.spec.rules import Rule
from solver.spec.training import Framework, GradReduce, Precision, Recompute, TrainingSpec, ZeroStage

DEEPSEEK = catalog.get_model("deepseek-v3")
MIXTRAL = catalog.get_model("mixtral-8x7b")
H100 = catalog.get_cluster("dgx-h100-x128")
H800 = catalog.get_cluster("hgx-h800-x256")  # 8 GPUs per node
TRAINING = TrainingSpec(global_batch_size=8192, seq_length=4096, precision="fp8")
# NVIDIA's DeepSeek-V3 preset on 1024 H100 (bench/data/run_inputs.json): tp 2, pp 8, ep 64, etp 1.
NVIDIA_H100 = ParallelConfig(
    dp_size=64, tp_size=2, pp_size=8, zero_stage=ZeroStage.OS, sequence_parallel=True, ep_size=64, expert_tp_size=1,
)


# --------------------------------------------------------------------------- the dimension


def test_expert_tp_size_defaults_to_tp_and_equal_configurations_compare_equal():
    default = dataclasses.replace(NVIDIA_H100, expert_tp_size=None)
    assert default.etp_size == 2 and default.expert_tp_size is None
    assert dataclasses.replace(NVIDIA_H100, expert_tp_size=2) == default  # etp = tp is held as None
    assert NVIDIA_H100.etp_size == 1 and NVIDIA_H100 != default
    # Following tp: a configuration that never named it keeps etp = tp when tp changes.
    assert dataclasses.replace(default, tp_size=4, dp_size=32).etp_size == 4


def test_the_api_form_carries_it_and_old_forms_still_load():
    as_dict = parallel_to_dict(NVIDIA_H100)
    assert as_dict["expert_tp_size"] == 1 and parallel_from_dict(as_dict) == NVIDIA_H100
    default = dataclasses.replace(NVIDIA_H100, expert_tp_size=None)
    assert parallel_to_dict(default)["expert_tp_size"] == 2  # written as the value it stands for
    assert parallel_from_dict(parallel_to_dict(default)) == default
    stored = {k: v for k, v in as_dict.items() if k != "expert_tp_size"}  # a plan stored before etp
    assert parallel_from_dict(stored) == default
    with pytest.raises(SpecError) as error:
        ParallelConfig(expert_tp_size=0)
    assert error.value.field == "parallel.expert_tp_size"


def test_expert_data_parallel_size_is_world_over_pp_etp_ep():
    """Megatron-core parallel_state.initialize_model_parallel: expert data-parallel size =
    world / (pp x expert_tensor_parallel_size x expert_model_parallel_size)."""
    assert NVIDIA_H100.expert_dp_size == 1024 // (8 * 1 * 64) == 2
    assert dataclasses.replace(NVIDIA_H100, expert_tp_size=None).expert_dp_size == 1024 // (8 * 2 * 64) == 1
    with_cp = ParallelConfig(dp_size=4, tp_size=2, pp_size=4, cp_size=8, ep_size=8, expert_tp_size=1)  # Mixtral 8x22B on B200
    assert with_cp.expert_dp_size == 256 // (4 * 1 * 8) == 8


@pytest.mark.parametrize(
    "model,parallel,rule",
    [
        (catalog.get_model("llama2-7b"), ParallelConfig(dp_size=4, tp_size=2, expert_tp_size=1), Rule.ETP_NEEDS_EXPERTS),
        (DEEPSEEK, ParallelConfig(dp_size=3, ep_size=1, expert_tp_size=3), Rule.ETP_DIVIDES_MOE_FFN_HIDDEN_SIZE),  # 2048 % 3
        (MIXTRAL, ParallelConfig(dp_size=2, tp_size=2, ep_size=8, expert_tp_size=1), Rule.EXPERT_GROUP_DIVIDES_RANKS),  # 8 > 2 x 2
    ],
)
def test_expert_tp_legality_names_the_field_and_the_rule(model, parallel, rule):
    with pytest.raises(SpecError) as error:
        evaluate(model, dataclasses.replace(H800, num_nodes=1), TrainingSpec(global_batch_size=64, seq_length=4096), parallel)
    assert error.value.field == "parallel.expert_tp_size" and error.value.rule is rule


def test_at_etp_1_the_expert_group_may_take_the_tensor_parallel_ranks():
    """ep 8 over dp 4 x tp 2 ranks: not carved from dp x cp alone, legal once the experts are not
    split (Megatron-core: world divisible by etp x ep x pp)."""
    parallel = ParallelConfig(dp_size=4, tp_size=2, sequence_parallel=True, ep_size=8, zero_stage=ZeroStage.OS)
    training = TrainingSpec(global_batch_size=64, seq_length=4096)
    with pytest.raises(SpecError) as error:
        evaluate(MIXTRAL, dataclasses.replace(H800, num_nodes=1), training, parallel)
    assert error.value.rule is Rule.EP_DIVIDES_DATA_PARALLEL
    ev = evaluate(MIXTRAL, dataclasses.replace(H800, num_nodes=1), training, dataclasses.replace(parallel, expert_tp_size=1))
    assert ev.prediction.step_time_s > 0


# --------------------------------------------------------------------------- memory


def test_deepseek_expert_parameters_per_gpu_at_tp_2_etp_1_and_etp_2():
    """Per MoE layer: 256 experts x 3 matrices (gate, up, down) x 7168 x 2048 = 11,274,289,152
    parameters, over ep 64 x etp ranks: 176,160,768 at etp 1, 88,080,384 at etp 2; in bf16 twice
    as many bytes."""
    per_layer = 256 * 3 * 7168 * 2048
    assert layer_expert_parameter_count(DEEPSEEK) == per_layer == 11_274_289_152
    tokens = 4096
    etp1 = moe_mlp_cost(DEEPSEEK, H100, Precision.FP8, tokens, 2, 64, expert_tp_size=1)
    etp2 = moe_mlp_cost(DEEPSEEK, H100, Precision.FP8, tokens, 2, 64)
    assert etp1.expert_parameter_count == 176_160_768 and etp2.expert_parameter_count == 88_080_384
    assert 2 * etp1.expert_parameter_count == 352_321_536  # bytes of bf16 weights per GPU per MoE layer at etp 1
    assert etp1.parameter_count - etp1.expert_parameter_count == etp2.parameter_count - etp2.expert_parameter_count
    assert etp1.model_flops == etp2.model_flops  # the same work, cut differently


def test_expert_states_shard_over_world_over_pp_etp_ep():
    """ZeRO-1 with Adam, fp32 gradients (Megatron-core's main_grad): 2 + 4 + 12 / expert_dp bytes
    per expert parameter: expert_dp 2 at etp 1, 1 at etp 2."""
    training = dataclasses.replace(TRAINING, grad_reduce=GradReduce.FP32_FOR_BF16)
    assert training.grad_bytes_per_param == 4
    assert expert_state_bytes_per_parameter(NVIDIA_H100, training) == 2 + 4 + 12 / 2
    assert expert_state_bytes_per_parameter(dataclasses.replace(NVIDIA_H100, expert_tp_size=None), training) == 2 + 4 + 12 / 1


# --------------------------------------------------------------------------- traffic


def test_dispatch_sends_each_ranks_sequence_parallel_share_to_adjacent_ranks_at_etp_1():
    """Megatron-core's MoEAlltoAllTokenDispatcher: each rank sends its tokens/tp x k rows over the
    EP group, whose ranks are etp apart (expert rank grid tp-ep-dp-pp with etp innermost). On
    8-GPU nodes an ep 64 group holds 8 ranks of a node at etp 1 and 4 at etp 2, and sends the
    other 56 / 64 or 60 / 64 of its bytes through its own NIC share."""
    tokens = 4096
    message = dispatch_bytes(DEEPSEEK, tokens, 2)
    assert message == tokens / 2 * 8 * 7168 * 2
    inter = inter_node_link(H800)
    assert all_to_all_s(H800, message, 64, 1) == pytest.approx(message * 56 / 64 / inter.bytes_per_s + inter.latency_s)
    assert all_to_all_s(H800, message, 64, 2) == pytest.approx(message * 60 / 64 / inter.bytes_per_s + inter.latency_s)
    assert ep_comm_s(H800, DEEPSEEK, tokens, 2, 64, 1) == 4 * all_to_all_s(H800, message, 64, 1)
    assert ep_comm_s(H800, DEEPSEEK, tokens, 2, 64) == 4 * all_to_all_s(H800, message, 64, 2)


def test_no_expert_tp_collectives_at_etp_1():
    """At etp = tp the routed tokens are all-gathered and reduce-scattered over the expert-TP
    group (dispatch_postprocess / combine_preprocess), the ring volume of an all-reduce of tokens x
    k rows, forward and backward; at etp 1 Megatron-core skips both. DeepSeek-V3's shared expert
    is an MLP on the dense TP group (SharedExpertMLP), whose all-reduce of tokens x h forward and
    backward stays at any etp."""
    tokens, h, k = 4096, DEEPSEEK.hidden_size, DEEPSEEK.experts_per_token
    assert DEEPSEEK.num_shared_experts == 1
    link = tp_link(H100, 2)
    shared = all_reduce_s(2 * tokens * h, 2, link)
    etp2 = moe_mlp_cost(DEEPSEEK, H100, Precision.FP8, tokens, 2, 64)
    etp1 = moe_mlp_cost(DEEPSEEK, H100, Precision.FP8, tokens, 2, 64, expert_tp_size=1)
    assert etp2.tp_comm_s == 2 * (all_reduce_s(2 * tokens * k * h, 2, link) + shared)
    assert etp1.tp_comm_s == 2 * shared
    # Without shared experts (Mixtral-style) etp 1 leaves the MoE MLP no TP traffic at all, and
    # at tp 1 there is none either way.
    routed_only = dataclasses.replace(DEEPSEEK, num_shared_experts=0)
    assert moe_mlp_cost(routed_only, H100, Precision.FP8, tokens, 2, 64, expert_tp_size=1).tp_comm_s == 0.0
    assert moe_mlp_cost(DEEPSEEK, H100, Precision.FP8, tokens, 1, 64).tp_comm_s == 0.0
    # The busiest rank's routed rows: tokens x k x load factor gathered at etp 2, half of them at etp 1.
    assert etp1.kept_bytes < etp2.kept_bytes
    assert EXPERT_LOAD_FACTOR == 1.25


@pytest.mark.parametrize("tp_comm_overlap", [False, True])
def test_moe_layer_tp_traffic_is_the_attention_half_of_the_dense_layer_plus_the_moe_mlp(tp_comm_overlap):
    """An MoE layer keeps the dense layer's attention collectives (two of its four equal ones, as
    exposed as the stack's TP overlap leaves them) and adds the MoE MLP's own. With Transformer
    Engine's TP overlap the dense figure is already reduced to what the GEMMs cannot hide, so the
    dense MLP's share must come off that figure, not off the raw all-reduce: taking 2 raw
    all-reduces off an overlapped figure made the layer's TP time negative at etp 1."""
    training = dataclasses.replace(TRAINING, tp_comm_overlap=tp_comm_overlap)
    par = dataclasses.replace(NVIDIA_H100, virtual_stages=4, stage_layers=(1, *(2,) * 30, 0), recompute=Recompute.SELECTIVE)
    routed_only = dataclasses.replace(DEEPSEEK, num_shared_experts=0)
    for model in (DEEPSEEK, routed_only):
        for etp in (1, None):
            ev = evaluate(model, H100, training, dataclasses.replace(par, expert_tp_size=etp))
            assert ev.prediction.breakdown_s["tp_comm_s"] > 0.0
    # Exactly half the dense layer's figure plus the MoE MLP's, at the layer level.
    shape = ProfileShape(tp_size=2, sequence_parallel=True, ep_size=64, expert_tp_size=1)
    layers = analytic_layers(routed_only, H100, training, shape)
    dense_layer = layers.transformer_layers[0]  # DeepSeek-V3's first three layers are dense
    moe_layer = layers.transformer_layers[-1]
    assert dense_layer.tp_comm_s > 0.0
    assert moe_layer.tp_comm_s == pytest.approx(dense_layer.tp_comm_s / 2)
    with_shared = analytic_layers(DEEPSEEK, H100, training, shape).transformer_layers[-1]
    tokens = training.seq_length  # micro-batch 1, cp 1
    assert with_shared.tp_comm_s == pytest.approx(dense_layer.tp_comm_s / 2 + 2 * all_reduce_s(2 * tokens * DEEPSEEK.hidden_size, 2, tp_link(H100, 2)))


def test_nvidia_deepseek_layout_is_faster_and_heavier_at_etp_1():
    cluster = H100  # 128 nodes of 8
    layers = (1, *(2,) * 30, 0)
    training = dataclasses.replace(TRAINING, recompute_modules=("mla_up_proj", "mlp"), ep_comm_overlap=True)
    base = dataclasses.replace(NVIDIA_H100, virtual_stages=4, stage_layers=layers, recompute=Recompute.SELECTIVE)
    etp1 = evaluate(DEEPSEEK, cluster, training, base)
    etp2 = evaluate(DEEPSEEK, cluster, training, dataclasses.replace(base, expert_tp_size=None))
    assert etp1.prediction.step_time_s < etp2.prediction.step_time_s
    assert etp1.stages[1].memory_bytes.weights > etp2.stages[1].memory_bytes.weights


# --------------------------------------------------------------------------- frameworks and exports

MIXTRAL_PLAN = PlanToExport(MIXTRAL, TrainingSpec(global_batch_size=1024, seq_length=4096), ParallelConfig(
    dp_size=4, tp_size=2, pp_size=1, zero_stage=ZeroStage.OS_G, micro_batch_size=1, sequence_parallel=True, ep_size=8, expert_tp_size=1,
), 8)


def test_megatron_export_writes_the_expert_tensor_parallel_size_only_where_it_is_not_tp():
    plan = dataclasses.replace(MIXTRAL_PLAN, parallel=dataclasses.replace(MIXTRAL_PLAN.parallel, zero_stage=ZeroStage.OS))
    export = export_plan(plan, ExportFormat.MEGATRON)
    assert export.exact and export.parallel.expert_tp_size == 1
    _, flags = script_arguments(_file(export, "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert flags["--expert-tensor-parallel-size"] == "1" and flags["--expert-model-parallel-size"] == "8"
    default = dataclasses.replace(plan, parallel=dataclasses.replace(plan.parallel, expert_tp_size=None, dp_size=8, tp_size=1))
    _, flags = script_arguments(_file(export_plan(default, ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    assert "--expert-tensor-parallel-size" not in flags


def test_torchtitan_export_writes_etp_1_and_torchtitan_takes_it(tmp_path):
    export = export_plan(MIXTRAL_PLAN, ExportFormat.TORCHTITAN)
    assert export.exact
    path = tmp_path / "job.toml"
    path.write_text(_file(export, "job.toml").text)
    p = ConfigManager().parse_args(["--job.config_file", str(path)]).parallelism
    assert (p.tensor_parallel_degree, p.expert_parallel_degree, p.expert_tensor_parallel_degree) == (2, 8, 1)
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
        etp=p.expert_tensor_parallel_degree, world_size=MIXTRAL_PLAN.num_gpus,
    )
    assert dims.etp == 1 and dims.ep == 8


def test_torchtitan_runs_etp_1_or_tp_only():
    assert framework_violations(MIXTRAL_PLAN.parallel, Framework.TORCHTITAN) == []
    for parallel in (
        ParallelConfig(dp_size=2, tp_size=4, ep_size=2, expert_tp_size=2, zero_stage=ZeroStage.OS_G),  # neither 1 nor tp
        ParallelConfig(dp_size=4, tp_size=2, ep_size=1, expert_tp_size=1, zero_stage=ZeroStage.OS_G),  # no expert parallelism
        ParallelConfig(dp_size=4, tp_size=2, ep_size=2, cp_size=2, expert_tp_size=1, zero_stage=ZeroStage.OS_G),  # ep 2 % (tp x cp)
    ):
        violations = framework_violations(parallel, Framework.TORCHTITAN)
        assert [v.rule for v in violations] == [Rule.FRAMEWORK_EXPERT_TP], parallel
        assert "expert" in violations[0].text
    export = export_plan(dataclasses.replace(MIXTRAL_PLAN, parallel=dataclasses.replace(
        MIXTRAL_PLAN.parallel, ep_size=1, dp_size=4)), ExportFormat.TORCHTITAN)
    assert "parallel.expert_tp_size" in [d.field for d in export.differences] and export.parallel.expert_tp_size is None


def test_deepspeed_refuses_an_expert_tp_size_of_its_own_naming_the_field():
    violations = framework_violations(MIXTRAL_PLAN.parallel, Framework.DEEPSPEED)
    assert Rule.FRAMEWORK_EXPERT_TP in [v.rule for v in violations]
    assert any("parallel.expert_tp_size" in v.text for v in violations)
    export = export_plan(MIXTRAL_PLAN, ExportFormat.DEEPSPEED)
    assert "parallel.expert_tp_size" in [d.field for d in export.differences] and not export.exact
    assert export.parallel.expert_tp_size is None
    assert [v.rule for v in framework_violations(MIXTRAL_PLAN.parallel, Framework.FSDP)].count(Rule.FRAMEWORK_EXPERT_TP) == 1


def test_nemo_export_names_the_expert_tp_size_its_gpt_config_cannot_set():
    plan = dataclasses.replace(MIXTRAL_PLAN, parallel=dataclasses.replace(MIXTRAL_PLAN.parallel, zero_stage=ZeroStage.OS))
    export = export_plan(plan, ExportFormat.NEMO)
    assert [d.field for d in export.differences] == ["parallel.expert_tp_size"] and not export.exact
    text = "\n".join(f.text for f in export.files)
    assert "expert_model_parallel_size: 8" in text and "expert_tensor_parallel_size" not in text


# --------------------------------------------------------------------------- search


def test_the_search_considers_tp_and_1_for_moe_models_unless_the_request_names_sizes():
    moe = SearchRequest(MIXTRAL, H800, TrainingSpec(global_batch_size=64, seq_length=4096), num_gpus=16)
    assert expert_tp_sizes(moe, 2, 16) == [0, 1]  # 0: tp
    assert expert_tp_sizes(moe, 8, 16) == [0, 1]
    assert expert_tp_sizes(moe, 1, 16) == [0]
    both = dataclasses.replace(moe, constraints=Constraints.parse({"expert_tp_size": [1, 2]}))
    assert expert_tp_sizes(both, 2, 16) == [1, 0] and expert_tp_sizes(both, 4, 16) == [1, 2]
    dense = dataclasses.replace(moe, model=catalog.get_model("llama2-7b"))
    assert expert_tp_sizes(dense, 4, 16) == [0]
    pinned = dataclasses.replace(moe, constraints=Constraints.parse({"expert_tp_size": 1}))
    assert expert_tp_sizes(pinned, 2, 16) == [1] and expert_tp_sizes(pinned, 1, 16) == [0]


def _exhaustive(request: SearchRequest) -> list[tuple[float, ParallelConfig]]:
    """Every plan of the search's space for ``request`` through the evaluator, fastest first:
    each legal shape (every expert layout the search considers) with both of its partitions, the
    even one and the optimum (``_plan`` without a bound to prune by)."""
    run = SearchRun(request, SearchStats(), float("inf"))
    plans = {}
    for shape in shapes(run, request.num_gpus):
        if not is_legal(run, shape):
            continue
        if shape.base_recompute is Recompute.SELECTIVE and dominated_selective(run, shape):
            continue  # selective recomputation changes nothing: its base-none twin's plans, relabelled
        for parallel, _ in loop._plan(run, shape) or []:
            evaluation = request.evaluate(parallel, request.num_gpus)
            if evaluation.feasible:
                plans[parallel] = evaluation.prediction.step_time_s
    return sorted(((step_s, parallel) for parallel, step_s in plans.items()), key=lambda plan: plan[0])


# A DeepSeek-V3 cut to a few layers and experts (MLA, a shared expert, dense layers first, MTP):
# on 16 to 32 H800 cut to 24-40 GiB, tp > 1 with whole experts (etp 1) is the fastest plan.
MINI_DEEPSEEK = dataclasses.replace(DEEPSEEK, name="mini-deepseek", num_layers=8, first_dense_layers=2, num_experts=32)


@pytest.mark.parametrize("num_layers, num_experts, num_gpus, memory_gib, batch, zero_stage, best_layout", [
    (8, 32, 32, 40, 128, 0, (2, 1, 8, 2)),
    (6, 16, 16, 24, 64, 0, (4, 1, 4, 2)),
    (6, 16, 16, 40, 64, None, (2, 1, 8, 1)),
])
def test_the_pruned_search_finds_what_evaluating_every_plan_finds(
    num_layers, num_experts, num_gpus, memory_gib, batch, zero_stage, best_layout,
):
    """The default search (etp = tp and etp 1 for an MoE model at tp > 1) prunes with bounds
    (the step bound, the memory-aware partition bound, groups built only when their bound comes
    up): its top plans must be those of evaluating every plan of the same space. The space is cut
    to micro-batches 1 and 2 and v <= 2 (and one ZeRO stage where memory should push pp > 1) to
    keep the exhaustive pass to seconds; the search's best here takes whole experts at tp > 1
    (tp, etp, ep, pp as ``best_layout``)."""
    model = dataclasses.replace(MINI_DEEPSEEK, num_layers=num_layers, num_experts=num_experts)
    gpu = dataclasses.replace(H800.gpu, memory_bytes=memory_gib * 2**30)
    cluster = dataclasses.replace(H800, gpu=gpu, num_nodes=num_gpus // H800.gpus_per_node)
    constraints = {"micro_batch_size": [1, 2], "virtual_stages": [1, 2]} | ({"zero_stage": zero_stage} if zero_stage is not None else {})
    request = SearchRequest(
        model, cluster, TrainingSpec(global_batch_size=batch, seq_length=4096), num_gpus=num_gpus,
        constraints=Constraints.parse(constraints),
    )
    result = search(request)
    every = _exhaustive(request)
    assert {(p.tp_size, p.etp_size) for _, p in every} >= {(2, 2), (2, 1), (4, 4), (4, 1)}  # both etp at each tp
    assert [c.evaluation.prediction.step_time_s for c in result.candidates] == [step_s for step_s, _ in every[:request.top_k]]
    best = result.best.parallel
    assert (best.tp_size, best.etp_size, best.ep_size, best.pp_size) == best_layout


def test_a_pinned_expert_tp_size_is_what_the_search_returns():
    request = SearchRequest(
        MIXTRAL, dataclasses.replace(H800, num_nodes=2), TrainingSpec(global_batch_size=64, seq_length=4096), num_gpus=16,
        constraints=Constraints.parse({"tp_size": 2, "expert_tp_size": 1, "ep_size": 8}), top_k=3,
    )
    result = search(request)
    assert result.candidates
    for candidate in result.candidates:
        assert (candidate.parallel.tp_size, candidate.parallel.etp_size, candidate.parallel.ep_size) == (2, 1, 8)

"""How the routed experts' GEMMs are launched and what an MoE layer quantises (issue 16).

Transformer Engine's ``GroupedLinear`` (Megatron-core's ``TEGroupedMLP``) runs one cuBLASLt GEMM
per local expert and, in MXFP8, one quantisation kernel per expert's rows
(``TrainingSpec.expert_gemms`` PER_EXPERT); a grouped-GEMM kernel runs all local experts at once
(GROUPED, the default). Whatever the launches, an FP8-family MoE layer quantises its routed
tokens' fc1 and fc2 inputs and output gradients, k x load factor more rows than the dense MLP it
replaces."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from bench.accuracy import _model_for, load_inputs, load_moe_records, record_settings, training_for
from solver.cost.analytic import BACKWARD_TO_FORWARD, MXFP8_QUANTISE_BYTES, analytic_profile
from solver.cost.moe import EXPERT_LOAD_FACTOR, moe_mlp_cost
from solver.cost.profile import ProfileShape
from solver.spec.training import ExpertGemms, Precision, TrainingSpec

DEEPSEEK = catalog.get_model("deepseek-v3")
B200 = catalog.get_cluster("hgx-b200-x128")  # Blackwell: MXFP8 and NVFP4 tensor cores
TOKENS = 4096


def test_grouped_is_the_default_and_a_name_is_read_as_the_enum():
    assert TrainingSpec(global_batch_size=8, seq_length=4096).expert_gemms is ExpertGemms.GROUPED
    assert TrainingSpec(global_batch_size=8, seq_length=4096, expert_gemms="per_expert").expert_gemms is ExpertGemms.PER_EXPERT
    with pytest.raises(ValueError):
        TrainingSpec(global_batch_size=8, seq_length=4096, expert_gemms="per_token")


@pytest.mark.parametrize(("ep_size", "local_experts"), [(8, 32), (64, 4), (256, 1)])
def test_per_expert_gemms_add_one_launch_per_further_local_expert_to_fc1_and_fc2(ep_size, local_experts):
    grouped = moe_mlp_cost(DEEPSEEK, B200, Precision.BF16, TOKENS, 1, ep_size)
    per_expert = moe_mlp_cost(DEEPSEEK, B200, Precision.BF16, TOKENS, 1, ep_size, expert_gemms=ExpertGemms.PER_EXPERT)
    launch_s = B200.gpu.kernel_launch_s
    assert per_expert.gemm_forward_s - grouped.gemm_forward_s == pytest.approx(2 * (local_experts - 1) * launch_s, rel=1e-9, abs=1e-15)
    # Nothing else moves: the GEMMs' work, the wire, the memory.
    assert dataclasses.replace(per_expert, gemm_forward_s=grouped.gemm_forward_s) == grouped


def test_the_moe_mlp_quantises_its_routed_and_shared_experts_tensors_instead_of_the_dense_mlps():
    cost = moe_mlp_cost(DEEPSEEK, B200, Precision.MXFP8, TOKENS, 1, 8)
    h, f, fe = DEEPSEEK.hidden_size, DEEPSEEK.ffn_hidden_size, DEEPSEEK.moe_ffn_hidden_size
    assert (h, f, fe, DEEPSEEK.experts_per_token, DEEPSEEK.num_shared_experts) == (7168, 18432, 2048, 8, 1)
    routed = TOKENS * 8 * EXPERT_LOAD_FACTOR  # rows the busiest rank's experts receive
    assert cost.quantised_forward_elements == pytest.approx(routed * (h + fe) + TOKENS * (h + fe) - TOKENS * (h + f))
    assert cost.quantised_backward_elements == pytest.approx(routed * (2 * fe + h) + TOKENS * (2 * fe + h) - TOKENS * (2 * f + h))
    # One kernel per tensor: the routed fc1 and fc2 inputs and the shared expert's two, for the dense MLP's two.
    assert cost.quantised_tensors == 2


@pytest.mark.parametrize(
    ("precision", "tensors"),
    [(Precision.MXFP8, 2 * 32), (Precision.FP8, 2), (Precision.NVFP4, 2), (Precision.BF16, 2)],
)
def test_per_expert_quantisation_kernels_are_mxfp8s_only(precision, tensors):
    """Transformer Engine's split_quantize fuses FP8 delayed scaling and NVFP4 into one kernel;
    MXFP8 quantises each split with its own (DeepSeek-V3: 32 local experts at ep 8, plus the
    shared expert's two tensors, minus the dense MLP's two)."""
    cost = moe_mlp_cost(DEEPSEEK, B200, precision, TOKENS, 1, 8, expert_gemms=ExpertGemms.PER_EXPERT)
    assert cost.quantised_tensors == tensors


def test_an_mxfp8_moe_layer_pays_each_experts_launches_forward_and_backward():
    training = TrainingSpec(global_batch_size=256, seq_length=TOKENS, precision="mxfp8")
    per_expert = dataclasses.replace(training, expert_gemms=ExpertGemms.PER_EXPERT)
    shape = ProfileShape(1, 1, False, 1, 8)
    grouped_layer = analytic_profile(DEEPSEEK, B200, training, shape).transformer_layers[3]
    layer = analytic_profile(DEEPSEEK, B200, per_expert, shape).transformer_layers[3]
    assert DEEPSEEK.is_moe_layer(3)
    launch_s, extra = B200.gpu.kernel_launch_s, 32 - 1
    # fc1 and fc2 forward, their dgrad and wgrad backward; one quantisation kernel per expert for
    # fc1's and fc2's inputs forward and output gradients backward.
    assert layer.forward_s - grouped_layer.forward_s == pytest.approx((2 + 2) * extra * launch_s)
    assert layer.backward_s - grouped_layer.backward_s == pytest.approx((2 * BACKWARD_TO_FORWARD + 2) * extra * launch_s)
    assert layer.activation_bytes == grouped_layer.activation_bytes


def test_an_mxfp8_moe_layer_is_charged_its_quantisation_bytes_and_a_bf16_one_none():
    shape = ProfileShape(1, 1, False, 1, 8)
    mxfp8 = TrainingSpec(global_batch_size=256, seq_length=TOKENS, precision="mxfp8")
    cost = moe_mlp_cost(DEEPSEEK, B200, Precision.MXFP8, TOKENS, 1, 8)
    gpu = B200.gpu
    forward_bytes_s = MXFP8_QUANTISE_BYTES * cost.quantised_forward_elements / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency)
    assert forward_bytes_s > 1e-4  # a tenth of a millisecond per layer and micro-batch at DeepSeek-V3's size
    bf16_shape_layer = analytic_profile(DEEPSEEK, B200, dataclasses.replace(mxfp8, precision="bf16"), shape).transformer_layers[3]
    assert analytic_profile(DEEPSEEK, B200, mxfp8, shape).transformer_layers[3].forward_s < bf16_shape_layer.forward_s
    # bf16 quantises nothing: per-expert launches are all that PER_EXPERT adds.
    bf16 = TrainingSpec(global_batch_size=256, seq_length=TOKENS)
    grouped = analytic_profile(DEEPSEEK, B200, bf16, shape).transformer_layers[3]
    per_expert = analytic_profile(DEEPSEEK, B200, dataclasses.replace(bf16, expert_gemms="per_expert"), shape).transformer_layers[3]
    assert per_expert.forward_s - grouped.forward_s == pytest.approx(2 * 31 * gpu.kernel_launch_s)


def test_a_dense_model_is_costed_as_before():
    llama = catalog.get_model("llama3-8b")
    shape = ProfileShape()
    training = TrainingSpec(global_batch_size=256, seq_length=4096, precision="fp8")
    per_expert = dataclasses.replace(training, expert_gemms=ExpertGemms.PER_EXPERT)
    assert analytic_profile(llama, B200, per_expert, shape).layers == analytic_profile(llama, B200, training, shape).layers


def test_the_bench_runs_on_transformer_engine_launch_per_expert_and_the_report_row_does_not():
    """Megatron-Bridge's DeepSeek-V3 runs and NeMo's Mixtral / Llama 4 runs use Megatron-core's
    TEGroupedMLP; DeepSeek's own HAI-LLM states no such thing (the default)."""
    inputs = load_inputs()
    per_expert = set()
    for record in load_moe_records():
        settings = record_settings(record, inputs)
        model = _model_for(record, settings)
        assert model is not None
        if training_for(record, settings, model).expert_gemms is ExpertGemms.PER_EXPERT:
            per_expert.add(record["id"])
    assert per_expert == {record["id"] for record in load_moe_records()} - {"moe-deepseekv3-report-2048gpu"}


# --- The stack sets it (catalog/data/stacks.json), a request may override it -----------------------

def test_each_stack_says_how_its_experts_launch_their_gemms():
    import catalog

    # Megatron-core's TEGroupedMLP (Transformer Engine GroupedLinear: one cuBLASLt GEMM per local
    # expert) and DeepSpeed-MoE's loop over its local experts launch per expert; torchtitan's
    # GroupedExperts runs one torch._grouped_mm over all of them.
    for stack in ("megatron-core-2024", "megatron-lm-2024", "megatron-deepspeed-2022", "deepspeed-zero3"):
        assert catalog.get_stack_facts(stack)["expert_gemms"] == "per_expert", stack
    assert catalog.get_stack_facts("torchtitan-2025")["expert_gemms"] == "grouped"


def _moe_evaluation(**training: object) -> dict:
    from conftest import unique_name

    model = {
        "name": unique_name("moe-gemms"), "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
        "num_kv_heads": 4, "ffn_hidden_size": 3584, "vocab_size": 32000, "seq_length": 2048,
        "mlp_activation": "swiglu", "tied_embeddings": False, "position_embedding": "none",
        "num_experts": 32, "experts_per_token": 2,
    }
    return {
        "model": model,
        "cluster": "dgx-h100",
        "training": {"global_batch_size": 64, "seq_length": 2048, **training},
        # ep 8 over 8 GPUs: 4 local experts per rank, so per-expert launches cost 3 more per GEMM.
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "ep_size": 8, "zero_stage": 1, "micro_batch_size": 1},
    }


def test_a_request_takes_the_stacks_expert_gemms_and_may_override_it(api):
    # The stack's host time per MoE layer (moe_host_s_per_layer) would set this small model's pace
    # and hide the GPU work compared here: off, for the GEMMs alone.
    core = {"stack": "megatron-core-2024", "moe_host_s_per_layer": 0}
    stack = api.post("/v1/evaluations", json=_moe_evaluation(**core))
    grouped = api.post("/v1/evaluations", json=_moe_evaluation(**core, expert_gemms="grouped"))
    spelled = api.post("/v1/evaluations", json=_moe_evaluation(**core, expert_gemms="per_expert"))
    assert stack.status_code == grouped.status_code == spelled.status_code == 200, (stack.text, grouped.text)
    step_s = {name: r.json()["prediction"]["step_time_s"] for name, r in (("stack", stack), ("grouped", grouped), ("spelled", spelled))}
    assert step_s["stack"] == step_s["spelled"]
    # Per-expert launches only add time (the same FLOPs, more kernels).
    assert step_s["stack"] > step_s["grouped"]
    titan = api.post("/v1/evaluations", json=_moe_evaluation(stack="torchtitan-2025"))
    titan_per_expert = api.post("/v1/evaluations", json=_moe_evaluation(stack="torchtitan-2025", expert_gemms="per_expert"))
    assert titan.status_code == titan_per_expert.status_code == 200, titan.text
    assert titan_per_expert.json()["prediction"]["step_time_s"] > titan.json()["prediction"]["step_time_s"]


def test_an_unknown_expert_gemms_is_a_422_naming_it(api):
    from conftest import assert_problem, error_fields

    response = api.post("/v1/evaluations", json=_moe_evaluation(expert_gemms="per_token"))
    problem = assert_problem(response, 422)
    assert error_fields(problem) == ["body.training.expert_gemms"]

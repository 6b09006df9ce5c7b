"""Transformer Engine's cross entropy (``LossKernel.IN_PLACE``): its forward writes the gradient
into the 16-bit logits in place and saves them (transformer_engine/pytorch/triton/cross_entropy.py,
v2.2 to v2.17), so the loss holds 2 bytes per logit where Megatron-core's native fused loss holds
the 16-bit logits and an fp32 softmax (2 + 4). Megatron-Bridge's performance scripts run it for
every model (cross_entropy_fusion_impl 'te'), and with it the one bench run the planner called
infeasible although it ran now fits."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from test_activation_offload import _bench_inputs

import catalog
from bench import accuracy
from conftest import assert_problem, error_fields
from solver.cost.analytic import loss_peak_bytes_per_logit
from solver.cost.evaluate import evaluate
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Framework, LossDtype, LossKernel, Recompute, TrainingSpec, ZeroStage

GIB = 2**30
RUN = "mbridge2602-dgx-gb200-llama3-70b-64gpu-fp8-cs"


@pytest.mark.parametrize("dtype, fused, keeps, vocab_parallel", itertools.product(LossDtype, (True, False), (True, False), (True, False)))
def test_the_in_place_loss_holds_the_16_bit_logits_alone(dtype, fused, keeps, vocab_parallel):
    assert loss_peak_bytes_per_logit(dtype, LossKernel.IN_PLACE, fused, keeps, vocab_parallel) == 2
    # Megatron-core's native fused loss beside it: the 16-bit logits and the fp32 softmax.
    if dtype is LossDtype.FP32 and not keeps:
        assert loss_peak_bytes_per_logit(dtype, LossKernel.FUSED, fused, keeps, vocab_parallel) == 2 + 4


def test_the_name_reads_as_the_enum_and_a_bad_one_names_the_field():
    assert TrainingSpec(global_batch_size=8, seq_length=128, loss_kernel="in_place").loss_kernel is LossKernel.IN_PLACE
    with pytest.raises(ValueError, match="'te' is not a valid LossKernel"):
        TrainingSpec(global_batch_size=8, seq_length=128, loss_kernel="te")


def _record_evaluation(loss_kernel: str):
    """The bench's GB200 record at its preset's layout (Megatron-FSDP, tp 1, pp 1, micro-batch 2,
    40 layers offloaded, as tests/test_activation_offload.py builds it), with ``loss_kernel``."""
    model, cluster, training = _bench_inputs(RUN)
    training = dataclasses.replace(training, loss_kernel=LossKernel(loss_kernel))
    parallel = ParallelConfig(64, 1, 1, ZeroStage.OS_G_P, 2, Recompute.NONE, activation_offload_layers=40)
    return evaluate(model, cluster, training, parallel, num_gpus=64, framework=Framework.MEGATRON), model, training, parallel


def test_megatron_bridges_llama3_70b_on_gb200_fits_with_the_loss_it_ran():
    """Llama 3 70B on 64 GB200 (Megatron-FSDP, 40 of 80 layers' activations offloaded, micro-batch
    2 of 8,192 tokens, FP8): the run's own loss (the source's in_place) fits in 186 GiB; the native
    loss would hold 4 more bytes on each of 16,384 x 128,256 logits, 7.83 GiB (with Llama 3's
    dropout-free layers it would still fit, at about 177 GiB)."""
    inputs = accuracy.load_inputs()
    assert inputs["sources"]["mbridge2602-dgx-gb200"]["loss_kernel"] == "in_place"
    ran, model, training, parallel = _record_evaluation("in_place")
    native, *_ = _record_evaluation("fused")
    assert ran.feasible  # without dropout's masks the native loss fits as well
    assert inputs["records"][RUN]["activation_offload_layers"] == parallel.activation_offload_layers
    assert (training.seq_length, model.vocab_size) == (8192, 128256)
    logits = parallel.micro_batch_size * training.seq_length * model.vocab_size
    head = [s.memory_bytes["embedding_and_logits"] for s in (native.stages[0], ran.stages[0])]
    assert head[0] - head[1] == pytest.approx(4 * logits)
    assert 4 * logits / GIB == pytest.approx(7.83, abs=0.01)
    assert ran.peak_bytes / GIB == pytest.approx(168.7, abs=0.1)
    assert native.peak_bytes - ran.peak_bytes > 4 * logits


def test_every_megatron_bridge_source_runs_transformer_engines_loss_and_no_other_does():
    sources = accuracy.load_inputs()["sources"]
    in_place = {key for key, settings in sources.items() if settings.get("loss_kernel") == "in_place"}
    # NVIDIA's Megatron-Bridge tables, AWS's Megatron-Bridge runs on EFA (moe-aws-*) and the
    # Megatron-LM runs of NVIDIA's MoE report (moe-mcore2603: --cross-entropy-fusion-impl te).
    assert in_place == {key for key in sources if "mbridge" in key or key.startswith(("moe-aws-", "moe-mcore2603"))}
    for key in in_place:
        assert "cross_entropy_fusion_impl 'te'" in sources[key]["why"] or "--cross-entropy-fusion-impl te" in sources[key]["why"], key
    # The stacks keep their own losses: Megatron-core's default is its native fused loss.
    assert catalog.get_stack_facts("megatron-core-2024")["loss_kernel"] == "fused"


def _body(**training) -> dict:
    return {
        "model": "llama3-8b", "cluster": "dgx-h100", "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 8192, "stack": "megatron-core-2024", **training},
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "none"},
    }


def test_the_api_takes_the_override_and_holds_less_at_the_loss(api):
    native = api.post("/v1/evaluations", json=_body())
    in_place = api.post("/v1/evaluations", json=_body(loss_kernel="in_place"))
    assert native.status_code == in_place.status_code == 200, in_place.text
    logits_gib = 8192 * 128256 * 4 / GIB
    assert native.json()["memory"]["peak_gib"] - in_place.json()["memory"]["peak_gib"] == pytest.approx(logits_gib, rel=0.1)


@pytest.mark.parametrize("value", ["te", 1, "IN_PLACE"])
def test_a_bad_override_is_a_422_naming_the_field(api, value):
    response = api.post("/v1/evaluations", json=_body(loss_kernel=value))
    assert "body.training.loss_kernel" in error_fields(assert_problem(response, 422))

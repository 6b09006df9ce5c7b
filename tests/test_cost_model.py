"""Cost model against published figures (golden values) and physical properties."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import catalog
from solver.cost.analytic import analytic_profile, loss_peak_bytes_per_logit
from solver.cost.evaluate import evaluate
from solver.cost.flops import (
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    total_parameter_count,
)
from solver.cost.memory import in_flight_micro_batches, model_state_bytes
from solver.cost.profile import ProfileShape
from solver.cost.schedule import pipeline_bubble_fraction
from solver.cost.stage import working_bytes
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import (
    Framework,
    LossDtype,
    LossKernel,
    OptimizerKind,
    Precision,
    Recompute,
    TrainingSpec,
    ZeroStage,
)

GB = 1e9
GIB = 2**30


# --- ZeRO (Rajbhandari et al. 2020) -------------------------------------------------------------

@pytest.mark.parametrize(
    ("stage", "expected_gb"),
    [(ZeroStage.NONE, 120.0), (ZeroStage.OS, 31.4), (ZeroStage.OS_G, 16.6), (ZeroStage.OS_G_P, 1.9)],
)
def test_zero_paper_7_5b_on_64_gpus(stage, expected_gb):
    """Sec 5 / Figure 1: 7.5B parameters, N_d = 64: 120, 31.4, 16.6, 1.9 GB per device."""
    states = model_state_bytes(7.5e9, stage, 64, OptimizerKind.ADAM)
    assert sum(states.values()) / GB == pytest.approx(expected_gb, abs=0.05)


@pytest.mark.parametrize(
    ("params", "dp", "os_gb", "osg_gb", "osgp_gb"),
    [(7.5e9, 4, 52.5, 41.3, 30.0), (128e9, 16, 608, 368, 128), (1e12, 1024, 4011, 2013, 15.6)],
)
def test_zero_paper_table_1_cells(params, dp, os_gb, osg_gb, osgp_gb):
    for stage, expected in ((ZeroStage.OS, os_gb), (ZeroStage.OS_G, osg_gb), (ZeroStage.OS_G_P, osgp_gb)):
        got = sum(model_state_bytes(params, stage, dp, OptimizerKind.ADAM).values()) / GB
        assert got == pytest.approx(expected, rel=0.005, abs=0.05)


# --- Megatron-LM 2021 parameters and FLOPs ----------------------------------------------------------

MEGATRON_TABLE_1 = [  # (catalog name, published billions of parameters)
    ("megatron-1.7b", 1.7), ("megatron-3.6b", 3.6), ("megatron-7.5b", 7.5), ("megatron-18.4b", 18.4),
    ("megatron-39.1b", 39.1), ("megatron-76.1b", 76.1), ("megatron-145.6b", 145.6),
    ("megatron-310.1b", 310.1), ("megatron-529.6b", 529.6), ("megatron-1t", 1008.0),
]


@pytest.mark.parametrize(("name", "billions"), MEGATRON_TABLE_1)
def test_megatron_table_1_parameter_counts(name, billions):
    model = catalog.get_model(name)
    l, h, V, s = model.num_layers, model.hidden_size, model.vocab_size, model.seq_length
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    count = total_parameter_count(model)
    # Our count adds the final LayerNorm (2h) that eq. 2 leaves out.
    assert count - eq2 == pytest.approx(2 * h, abs=1e-3 * h)
    assert count / 1e9 == pytest.approx(billions, abs=0.051)


@pytest.mark.parametrize("name", ["megatron-1.7b", "megatron-145.6b", "megatron-1t", "gpt3-175b"])
def test_flops_match_megatron_and_korthikanti_equations(name):
    model = catalog.get_model(name)
    B, s, l, h, V = 1536, model.seq_length, model.num_layers, model.hidden_size, model.vocab_size
    eq7 = 72 * B * l * s * h * h * (1 + s / (6 * h) + V / (12 * h * l))
    eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    eq8 = 72 * B * l * s * h * h * (1 + s / (3 * h) + V / (12 * h * l))
    assert model_flops_per_iteration(model, B, s) == pytest.approx(eq7, rel=1e-12)
    assert hardware_flops_per_iteration(model, B, s, Recompute.FULL) == pytest.approx(eq3, rel=1e-12)
    assert hardware_flops_per_iteration(model, B, s, Recompute.SELECTIVE) == pytest.approx(eq8, rel=1e-12)


# --- Korthikanti et al. 2022 Table 2: activation bytes per layer ------------------------------------

@pytest.fixture(scope="module")
def selene():
    return catalog.get_cluster("selene")


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_activation_memory_table_2(selene, tp):
    model = ModelSpec("gpt3", 96, 12288, 96, 51200, 2048)
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h
    train = TrainingSpec(8, s, Precision.FP16, flash_attention=False)
    baseline = analytic_profile(model, selene, train, ProfileShape(tp, b, False)).transformer_layers[0]
    seqpar = analytic_profile(model, selene, train, ProfileShape(tp, b, True)).transformer_layers[0]
    assert baseline.activation_bytes == pytest.approx(sbh * (10 + 24 / tp + 5 * a * s / (h * tp)), rel=1e-6)
    assert seqpar.activation_bytes == pytest.approx(sbh * (34 / tp + 5 * a * s / (h * tp)), rel=1e-6)
    assert baseline.selective_activation_bytes == pytest.approx(sbh * (10 + 24 / tp), rel=1e-6)
    assert seqpar.selective_activation_bytes == pytest.approx(sbh * 34 / tp, rel=1e-6)
    assert baseline.checkpoint_bytes == 2 * sbh  # full recompute keeps 2*s*b*h per layer
    # Selective recompute of GPT-3 saves 70% of the activations (Sec 4.3: 5as/h = 80 vs 34).
    assert 1 - seqpar.selective_activation_bytes / seqpar.activation_bytes == pytest.approx(80 / 114, rel=1e-6)


# --- Pipeline schedule ---------------------------------------------------------------------------

def test_bubble_fractions():
    assert pipeline_bubble_fraction(8, 1, 64) == pytest.approx(7 / 64)
    assert pipeline_bubble_fraction(8, 3, 64) == pytest.approx(7 / (3 * 64))
    assert pipeline_bubble_fraction(1, 1, 16) == 0


def test_in_flight_micro_batches():
    assert [in_flight_micro_batches(i, 4, 1, 32) for i in range(4)] == [4, 3, 2, 1]
    # Interleaved first stage: p * (1 + (p - 1)/(p * v)) (Korthikanti et al. 2022 Sec 4.2.3).
    assert in_flight_micro_batches(0, 8, 3, 64) == pytest.approx(8 * (1 + 7 / 24))
    assert in_flight_micro_batches(0, 8, 1, 2) == 2  # never more micro-batches than exist


def test_evaluated_bubble_is_the_schedule_fraction_of_busy_time(selene):
    model = catalog.get_model("gpt3-175b")
    train = TrainingSpec(256, 2048, Precision.BF16)
    for v in (1, 2, 3):
        par = ParallelConfig(4, 8, 8, ZeroStage.OS, 1, Recompute.SELECTIVE, v, True)
        p = evaluate(model, selene, train, par).prediction
        busy = sum(p.breakdown_s[k] for k in ("compute_s", "recompute_s", "tp_comm_s", "grad_accumulation_s"))
        assert p.breakdown_s["bubble_s"] / busy == pytest.approx(7 / (v * 64), rel=1e-9)


# --- Evaluation outputs ----------------------------------------------------------------------------

def test_prediction_is_consistent(selene):
    model = catalog.get_model("gpt3-175b")
    train = TrainingSpec(1536, 2048, Precision.BF16, train_tokens=300e9)
    ev = evaluate(model, selene, train, ParallelConfig(16, 8, 8, ZeroStage.OS, 1, Recompute.SELECTIVE, 2, True))
    p = ev.prediction
    assert ev.feasible, ev.violations
    assert sum(p.breakdown_s.values()) == pytest.approx(p.step_time_s, rel=1e-9)
    assert p.tokens_per_s == pytest.approx(1536 * 2048 / p.step_time_s)
    assert p.time_to_train_s == pytest.approx(300e9 / p.tokens_per_s)
    assert p.mfu == pytest.approx(p.model_tflops_per_gpu * 1e12 / 312e12)
    assert p.hfu > p.mfu  # selective recompute adds hardware FLOPs
    # Megatron-LM reports 140 TFLOP/s on this job (eq. 4 example); our figure must be in range.
    assert 120 < p.hardware_tflops_per_gpu < 190
    d = ev.to_dict()
    assert d["memory"]["capacity_gib"] == pytest.approx(80.0)
    assert len(d["stages"]) == 8 and d["stages"][0]["has_embedding"] and d["stages"][-1]["has_head"]


def test_memory_violation_names_stage_and_sizes(selene):
    model = catalog.get_model("gpt3-175b")
    ev = evaluate(model, selene, TrainingSpec(64, 2048), ParallelConfig(1, 8, 8, 0, 4, Recompute.NONE), num_gpus=64)
    assert not ev.feasible
    assert any(v.startswith("[memory] stage 0 needs ") and v.endswith("the GPU has 80.0 GiB") for v in ev.violations)
    assert ev.peak_stage == 0  # 1F1B: the first stage holds p micro-batches


def test_illegal_structure_raises_naming_the_field(selene):
    model = catalog.get_model("gpt3-175b")
    train = TrainingSpec(1536, 2048)
    with pytest.raises(SpecError) as err:
        evaluate(model, selene, train, ParallelConfig(1, 7, 1), num_gpus=7)
    assert err.value.field == "parallel.tp_size"
    with pytest.raises(SpecError) as err:
        evaluate(model, selene, train, ParallelConfig(2, 8, 8), num_gpus=64 * 4)
    assert err.value.field == "parallel"
    with pytest.raises(SpecError) as err:
        evaluate(model, selene, TrainingSpec(100, 2048), ParallelConfig(8, 8, 1, micro_batch_size=1))
    assert err.value.field == "training.global_batch_size"


def test_framework_rules_are_violations_not_errors(selene):
    """DeepSpeed's pipeline engine refuses ZeRO-2 with a pipeline: a violation, not an error.
    torchtitan runs it (FSDP2 under PP), so 'any' admits it."""
    model = catalog.get_model("megatron-7.5b")
    piped = ParallelConfig(4, 2, 2, ZeroStage.OS_G, 1, Recompute.FULL)
    ev = evaluate(model, selene, TrainingSpec(64, 2048), piped, framework=Framework.DEEPSPEED)
    assert any(v.startswith("[zero_with_pp]") for v in ev.violations) and not ev.feasible
    assert not any(v.startswith("[zero_with_pp]") for v in evaluate(model, selene, TrainingSpec(64, 2048), piped).violations)


# --- Properties ------------------------------------------------------------------------------------

def _peak(model, cluster, train, **kw):
    return evaluate(model, cluster, train, ParallelConfig(**kw), num_gpus=kw["dp_size"] * kw["tp_size"] * kw["pp_size"]).peak_bytes


@pytest.mark.parametrize("name", ["megatron-7.5b", "llama2-70b", "bert-large"])
def test_memory_never_rises_with_tp_pp_or_zero(selene, name):
    model = catalog.get_model(name)
    train = TrainingSpec(64, min(model.seq_length, 2048), Precision.BF16)
    for rc in Recompute:
        for sp in (False, True):
            by_tp = [_peak(model, selene, train, dp_size=1, tp_size=t, pp_size=1, micro_batch_size=2, recompute=rc,
                           sequence_parallel=sp) for t in (1, 2, 4, 8)]
            assert by_tp == sorted(by_tp, reverse=True), (rc, sp, by_tp)
        by_pp = [_peak(model, selene, train, dp_size=1, tp_size=1, pp_size=p, micro_batch_size=2, recompute=rc)
                 for p in (1, 2, 4) if model.num_layers % p == 0]
        assert by_pp == sorted(by_pp, reverse=True), (rc, by_pp)
        by_zero = [_peak(model, selene, train, dp_size=8, tp_size=1, pp_size=1, zero_stage=z, micro_batch_size=2,
                         recompute=rc) for z in ZeroStage]
        assert by_zero == sorted(by_zero, reverse=True), (rc, by_zero)


@pytest.mark.parametrize("flash", [False, True])
def test_recompute_never_raises_memory(selene, flash):
    model = catalog.get_model("megatron-22b")
    train = TrainingSpec(32, 2048, Precision.BF16, flash_attention=flash)
    for pp in (1, 4):
        peaks = {rc: _peak(model, selene, train, dp_size=1, tp_size=8, pp_size=pp, micro_batch_size=1, recompute=rc)
                 for rc in Recompute}
        assert peaks[Recompute.SELECTIVE] <= peaks[Recompute.NONE]
        assert peaks[Recompute.FULL] <= peaks[Recompute.SELECTIVE]


def test_time_never_falls_when_a_link_gets_slower(selene):
    model = catalog.get_model("gpt3-175b")
    train = TrainingSpec(512, 2048, Precision.BF16)
    configs = [
        ParallelConfig(8, 8, 16, ZeroStage.OS, 1, Recompute.SELECTIVE, 2, True),
        ParallelConfig(128, 1, 1, ZeroStage.OS_G_P, 2, Recompute.FULL),
        ParallelConfig(16, 8, 8, ZeroStage.NONE, 2, Recompute.FULL),
    ]
    for par in configs:
        base = evaluate(model, selene, train, par, num_gpus=par.num_gpus).prediction.step_time_s
        for field in ("intra_node_bytes_per_s", "inter_node_bytes_per_s"):
            slow = dataclasses.replace(selene, **{field: getattr(selene, field) / 4})
            slower = evaluate(model, slow, train, par, num_gpus=par.num_gpus).prediction.step_time_s
            assert slower >= base
            if field == "inter_node_bytes_per_s":  # every config here spans nodes
                assert slower > base
        laggy = dataclasses.replace(selene, inter_node_latency_s=selene.inter_node_latency_s * 10)
        assert evaluate(model, laggy, train, par, num_gpus=par.num_gpus).prediction.step_time_s >= base


def test_gradient_sync_after_backward_is_fully_exposed(selene):
    """Megatron-LM 2021's local DDP and DeepSpeed's pipeline engine reduce gradients after the
    last backward: the whole ring all-reduce (ZeRO-0) or reduce-scatter + all-gather (ZeRO-1)
    lands on the step, where an overlapping framework hides all but the last bucket."""
    from solver.cost.comm import data_parallel_collective_s
    from solver.cost.schedule import GRAD_BYTES_PER_PARAM, WEIGHT_BYTES_PER_PARAM

    model = catalog.get_model("gpt3-1.3b")
    for zero, kinds in ((ZeroStage.NONE, ("all_reduce",)), (ZeroStage.OS, ("reduce_scatter", "all_gather"))):
        par = ParallelConfig(32, 1, 1, zero, 4, Recompute.FULL)
        overlapped = TrainingSpec(512, 2048, Precision.BF16)
        after = dataclasses.replace(overlapped, overlap_grad_reduce=False)
        hidden = evaluate(model, selene, overlapped, par, num_gpus=32).prediction
        exposed = evaluate(model, selene, after, par, num_gpus=32).prediction
        profile = analytic_profile(model, selene, overlapped, ProfileShape(1, 4, False))
        params = sum(layer.parameter_count for layer in profile.layers)
        bytes_per_param = {"all_reduce": GRAD_BYTES_PER_PARAM, "reduce_scatter": GRAD_BYTES_PER_PARAM,
                           "all_gather": WEIGHT_BYTES_PER_PARAM}
        expected = sum(data_parallel_collective_s(selene, 1, 32, bytes_per_param[k] * params, k) for k in kinds)
        assert exposed.breakdown_s["dp_comm_exposed_s"] == pytest.approx(expected, rel=1e-9)
        # Overlapped, the reduction shows its last bucket and the slowdown of the backward it ran
        # beside (ZeRO-1's parameter all-gather after the optimizer step shows either way).
        after_step = (data_parallel_collective_s(selene, 1, 32, WEIGHT_BYTES_PER_PARAM * params, "all_gather")
                      if zero is ZeroStage.OS else 0.0)
        beside = expected - after_step
        s = selene.gpu.overlap_slowdown
        last_bucket = beside * max(layer.parameter_count for layer in profile.layers) / params
        assert hidden.breakdown_s["dp_comm_exposed_s"] == pytest.approx(beside * s / (1 + s) + last_bucket + after_step, rel=1e-9)
        assert hidden.breakdown_s["dp_comm_exposed_s"] < expected - 0.7 * beside
        assert exposed.step_time_s - hidden.step_time_s == pytest.approx(
            exposed.breakdown_s["dp_comm_exposed_s"] - hidden.breakdown_s["dp_comm_exposed_s"], rel=1e-9
        )
    # Without data parallelism there is nothing to sync either way.
    solo = ParallelConfig(1, 8, 1, ZeroStage.NONE, 1, Recompute.FULL)
    one = evaluate(model, selene, TrainingSpec(8, 2048, overlap_grad_reduce=False), solo, num_gpus=8).prediction
    assert one.breakdown_s["dp_comm_exposed_s"] == 0.0


@pytest.mark.parametrize("flash", [False, True])
def test_eager_kernels_cost_time_never_memory(selene, flash):
    """Eager element-wise kernels move more bytes than fused ones: no configuration gets faster
    and no memory figure changes but the loss's: a compiled cross entropy (the default
    ``loss_kernel``) holds the 16-bit logits and their 16-bit gradient, an eager fp32 one
    log_softmax's output and two fp32 gradients (12 - 4 = 8 more bytes per logit of the last
    stage's micro-batch; under tensor parallelism DTensor's loss parallel, 16 - 4). Where compute sets the pace the step is strictly slower; in the ZeRO-3
    layout the parameter gathers set it, and the longer compute only hides more of them."""
    model = catalog.get_model("gpt3-175b")
    fused = TrainingSpec(512, 2048, Precision.BF16, flash_attention=flash)
    eager = dataclasses.replace(fused, fused_kernels=False)
    for par in (
        ParallelConfig(8, 8, 16, ZeroStage.OS, 1, Recompute.SELECTIVE, 2, True),
        ParallelConfig(16, 8, 8, ZeroStage.NONE, 2, Recompute.FULL),
        ParallelConfig(128, 1, 1, ZeroStage.OS_G_P, 2, Recompute.FULL),
    ):
        a = evaluate(model, selene, fused, par, num_gpus=par.num_gpus)
        b = evaluate(model, selene, eager, par, num_gpus=par.num_gpus)
        assert b.prediction.breakdown_s["compute_s"] > a.prediction.breakdown_s["compute_s"]
        if par.zero_stage is ZeroStage.OS_G_P:
            assert b.prediction.step_time_s == pytest.approx(a.prediction.step_time_s, rel=1e-9)
            assert b.prediction.breakdown_s["dp_comm_exposed_s"] < a.prediction.breakdown_s["dp_comm_exposed_s"]
        else:
            assert b.prediction.step_time_s > a.prediction.step_time_s
        assert b.prediction.breakdown_s["tp_comm_s"] == a.prediction.breakdown_s["tp_comm_s"]
        # Under tensor parallelism the eager loss is DTensor's loss parallel: 16 bytes per logit.
        eager_bytes = loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.EAGER, False, vocab_parallel=par.tp_size > 1)
        assert eager_bytes == (16 if par.tp_size > 1 else 12)
        logits_bytes = (eager_bytes - 4) * par.micro_batch_size * 2048 * model.vocab_size / par.tp_size
        extra = [b_stage.memory_bytes["embedding_and_logits"] - a_stage.memory_bytes["embedding_and_logits"] for a_stage, b_stage in zip(a.stages, b.stages)]
        # The head's peak counts only beyond the backward working set, which it never meets
        # (stage.extras_activation_bytes): the 8 bytes per logit show where the loss's peak
        # is above the working set.
        profile = analytic_profile(model, selene, fused, ProfileShape.of(par))
        mode = Recompute.FULL if par.recompute is Recompute.FULL else Recompute.SELECTIVE
        working = working_bytes(profile.transformer_layers[0], mode)
        head_fused = profile.head.kept_bytes(mode)
        expected = max(0.0, head_fused + logits_bytes - working) - max(0.0, head_fused - working)
        assert extra[:-1] == [0.0] * (len(extra) - 1) and extra[-1] == pytest.approx(expected, abs=1)
        assert 0 <= expected <= logits_bytes
        for a_stage, b_stage in zip(a.stages, b.stages):
            for key in ("weights", "gradients", "optimizer_states", "activations", "zero3_gather_buffers"):
                assert b_stage.memory_bytes[key] == a_stage.memory_bytes[key]


def test_eager_element_wise_kernels_match_a_measured_pytorch_layer():
    """Ivanov et al. 2021, "Data Movement Is All You Need" (MLSys; arXiv 2007.00072), profiled a
    BERT-large encoder layer (batch 8, sequence 512, fp16, V100) in PyTorch: tensor contractions
    are 99.8% of its FLOPs but 61% of its runtime (Table 1); the rest is normalisations and
    element-wise operators. Their fully fused and layout-tuned layer ran 1.30x faster, an upper
    bound for fusion alone. The eager model reproduces both."""
    from solver.cost.compute import gemm_time_s

    model = catalog.get_model("bert-large")
    v100 = catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", "dgx1-v100"), "num_nodes": 1})
    b, s, h, a = 8, 512, model.hidden_size, model.num_attention_heads
    gpu, tokens, fp16 = v100.gpu, b * s, Precision.FP16

    def layer_s(fused: bool) -> float:
        training = TrainingSpec(b, s, fp16, flash_attention=False, fused_kernels=fused)
        layer = analytic_profile(model, v100, training, ProfileShape(1, b, False)).layers[1]
        return layer.forward_s + layer.backward_s

    contractions_s = 3 * (
        gemm_time_s(gpu, fp16, tokens, 3 * h, h) + gemm_time_s(gpu, fp16, tokens, h, h)
        + gemm_time_s(gpu, fp16, tokens, model.ffn_hidden_size, h) + gemm_time_s(gpu, fp16, tokens, h, model.ffn_hidden_size)
        + gemm_time_s(gpu, fp16, s, s, h // a, b * a) + gemm_time_s(gpu, fp16, s, h // a, s, b * a)
    )
    eager_s, fused_s = layer_s(False), layer_s(True)
    assert contractions_s / eager_s == pytest.approx(0.61, abs=0.04)
    assert 1.10 < eager_s / fused_s < 1.30


# --- Catalog and purity --------------------------------------------------------------------------

def test_catalog_entries_are_sourced_slugs_that_load():
    for kind, loader in (("gpus", catalog.get_gpu), ("models", catalog.get_model), ("clusters", catalog.get_cluster)):
        for entry in catalog.list_entries(kind):
            assert entry["name"] == entry["name"].lower() and " " not in entry["name"]
            assert entry.get("sources") or entry.get("source"), entry["name"]
            loader(entry["name"])
    for required in ("v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "mi250x", "mi300x"):
        catalog.get_gpu(required)
    with pytest.raises(catalog.CatalogError) as err:
        catalog.get_model("llama2-70")
    assert "llama2-70b" in err.value.suggestions


def test_solver_is_a_pure_library():
    forbidden = {"fastapi", "sqlalchemy", "starlette", "app", "catalog", "torch", "pydantic"}
    for path in Path(__file__).resolve().parent.parent.joinpath("solver").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


def test_measured_profile_at_the_plan_configuration_gets_tp_comm_from_the_model(selene):
    """One GPU cannot measure TP collectives: a profile measured at tp_size 2 that equals the
    analytic one except for them must predict the analytic step time, TP communication included."""
    model = catalog.get_model("megatron-1.7b")
    train = TrainingSpec(64, 2048, Precision.BF16)
    par = ParallelConfig(4, 2, 1, ZeroStage.OS, 2, Recompute.SELECTIVE, 1, True)
    analytic = analytic_profile(model, selene, train, ProfileShape(2, 2, True))
    measured = dataclasses.replace(
        analytic,
        sequence_parallel=True,
        layers=tuple(dataclasses.replace(layer, tp_comm_s=0.0, model_flops=0.0) for layer in analytic.layers),
    )
    expected = evaluate(model, selene, train, par).prediction
    got = evaluate(model, selene, train, par, profile=measured)
    assert got.prediction.step_time_s == pytest.approx(expected.step_time_s, rel=1e-9)
    assert got.prediction.breakdown_s["tp_comm_s"] == pytest.approx(expected.breakdown_s["tp_comm_s"], rel=1e-9)
    assert got.prediction.breakdown_s["tp_comm_s"] > 0
    assert set(got.profile_origins.values()) == {"measured"}


def test_calibration_override_replaces_gpu_knobs():
    gpus = {e["name"]: e for e in catalog.list_entries("gpus")}
    override = {"gpus": [{"name": "h100-sxm5-80gb", "gemm_efficiency": {"bf16": 0.7}, "gemm_saturation_dim": 96,
                          "hbm_efficiency": 0.9, "sources": {"gemm_efficiency": "partitura calibrate on a test"}}]}
    catalog.merge_gpu_overrides(gpus, override, origin="calibration.json")
    spec = catalog.gpu_spec_from_dict(gpus["h100-sxm5-80gb"])
    assert (spec.efficiency(Precision.BF16), spec.gemm_saturation_dim, spec.hbm_efficiency) == (0.7, 96.0, 0.9)
    assert spec.peak(Precision.BF16) == 989.4e12  # untouched fields stay
    assert gpus["h100-sxm5-80gb"]["sources"]["gemm_efficiency"] == "partitura calibrate on a test"
    with pytest.raises(SpecError) as err:
        catalog.merge_gpu_overrides(gpus, {"gpus": [{"name": "new-gpu", "gemm_efficiency": {"bf16": 0.5}}]}, "x.json")
    assert err.value.field.startswith("x.json.gpus[0]")


def test_spec_error_survives_pickling_with_its_field_and_reason():
    import pickle

    error = pickle.loads(pickle.dumps(SpecError("parallel.tp_size", "[tp_divides_num_attention_heads] 3 does not divide 32")))
    assert isinstance(error, SpecError)
    assert (error.field, error.reason) == ("parallel.tp_size", "[tp_divides_num_attention_heads] 3 does not divide 32")
    assert str(error) == "parallel.tp_size: [tp_divides_num_attention_heads] 3 does not divide 32"


def test_a_layout_may_give_the_embedding_and_the_loss_chunks_of_their_own():
    """Megatron-core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split:
    Llama 3.1 405B's 126 layers in 128 slots at pp 16 x vp 8, the first chunk the embedding alone
    and the last the loss alone. More chunks than layers is refused for the uniform split and for a
    layout that leaves an interior chunk empty."""
    model = catalog.get_model("llama3-405b")
    assert model.num_layers == 126
    cluster = catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", "dgx-h100"), "num_nodes": 64})
    training = TrainingSpec(global_batch_size=512, seq_length=8192)
    slots = (0,) + (1,) * 126 + (0,)
    ok = ParallelConfig(4, 8, 16, ZeroStage.OS, 1, Recompute.FULL, 8, True, slots)
    assert evaluate(model, cluster, training, ok, num_gpus=512).prediction.step_time_s > 0
    for bad in (
        ParallelConfig(4, 8, 16, ZeroStage.OS, 1, Recompute.FULL, 8, True),
        ParallelConfig(4, 8, 16, ZeroStage.OS, 1, Recompute.FULL, 8, True, (1,) * 63 + (0,) + (1,) * 63 + (0,)),
    ):
        with pytest.raises(SpecError) as error:
            evaluate(model, cluster, training, bad, num_gpus=512)
        assert error.value.rule.value == "pp_at_most_layers"

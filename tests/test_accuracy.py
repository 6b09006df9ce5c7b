"""The cost model against the published measured runs (bench/accuracy.py), deterministically.

The issue's target is MAPE <= 10% with no run worse than 20%; both are enforced here.
"""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from bench import vtrain
from bench.accuracy import (
    RunResult,
    _candidates,
    _model_for,
    bench_records,
    evaluate_all,
    evaluate_bench,
    family_table,
    gpt_neox_2022_flops_per_token,
    gpt_neox_logged_parameter_count,
    load_inputs,
    load_records,
    macro_mape,
    rank_correlations,
    record_settings,
    summary,
    training_for,
)
from solver.cost.flops import model_flops_per_iteration


@pytest.fixture(scope="module")
def results():
    return evaluate_all()


def test_every_record_with_a_model_shape_is_evaluated(results):
    evaluated = [r for r in results if r.error is not None]
    skipped = {r.run_id: r.skipped for r in results if r.skipped}
    assert len(evaluated) == 21
    # The ZeRO paper's record is an average over 8B-100B models with no per-model figure.
    assert set(skipped) == {"zero2019-zero100b-400v100"}
    assert all(r.predicted > 0 and "INFEASIBLE" not in r.filled for r in evaluated)


def test_controlled_benchmarks_within_10_percent(results):
    for r in results:
        if r.run_id.startswith("korthikanti2022"):
            assert abs(r.error) <= 0.10, (r.run_id, r.error)


def test_megatron_runs_within_20_percent(results):
    for r in results:
        if r.run_id.startswith("megatron2021") or r.run_id.startswith("korthikanti2022"):
            assert abs(r.error) <= 0.20, (r.run_id, r.error)


def test_eager_pytorch_runs_within_10_percent(results):
    """DeepLearningExamples BERT runs eager PyTorch kernels (training.fused_kernels false)."""
    bert = [r for r in results if r.run_id.startswith("dle-bert")]
    assert len(bert) == 5
    for r in bert:
        assert abs(r.error) <= 0.10, (r.run_id, r.error)


def test_public_set_mape_within_10_percent(results):
    mape, worst, count = summary(results)
    assert count == 21
    assert mape <= 0.10
    assert worst <= 0.20


def test_gpt_neox_counting_convention_reproduces_its_published_figures():
    """GPT-NeoX-20B's 117 TFLOP/s is in its logger's convention (6 * params + 60 * s * h * L per
    token, params summed over model-parallel ranks). The same count gives the model card's
    parameter figure, and turns 117 TFLOP/s on 96 GPUs into the paper's 1,830 hours for 150,000
    steps of 1,536 x 2,048 tokens (Black et al. 2022 Sec 3)."""
    model = catalog.get_model("gpt-neox-20b")
    assert gpt_neox_logged_parameter_count(model, tp_size=2) == 20_556_201_984
    step_flops = 1536 * 2048 * gpt_neox_2022_flops_per_token(model, 2048, tp_size=2)
    hours = 150_000 * step_flops / (117e12 * 96) / 3600
    assert hours == pytest.approx(1830, rel=0.005)


# The grown bench (issue 13, first step): every record is evaluated or listed with its reason.


@pytest.fixture(scope="module")
def bench_results():
    return evaluate_bench()


def test_grown_bench_evaluates_or_lists_every_record(bench_results):
    records = bench_records()
    # Published runs, Blackwell, H100 and MoE runs (issue 16, Qwen3's 10, gpt-oss's 5 and Kimi K2's 1
    # among them), AWS's Qwen3 and DeepSeek-V3 runs on EFA, torchtitan's FSDP runs, Megatron-Bridge
    # 26.08's MoE runs, BigScience's 2021 V100 pipeline runs, llm-foundry's single-node rows, vTrain rows.
    assert len(records) == 91 + 16 + 2 + 37 + 16 + 3 + 6 + 8 + 3 + 145 + 47
    assert [r.run_id for r in bench_results] == [record["id"] for record in records]
    assert len({record["id"] for record in records}) == len(records)
    for r in bench_results:
        assert (r.predicted is not None and r.predicted > 0 and not r.skipped) or (r.predicted is None and r.skipped), r
        assert r.family, r.run_id


def test_headline_is_the_bench_before_it_grew(results, bench_results):
    """The headline set is the first 22 published records, and the grown bench evaluates them
    to the same numbers."""
    assert [r.run_id for r in results] == [record["id"] for record in load_records()[:22]]
    grown = {r.run_id: r for r in bench_results}
    assert all(grown[r.run_id] == r for r in results)


# Narayanan et al. 2021 Table 1 as its authors launched it: Megatron-LM examples/sc21/run_table_1.sh
# (de7dc40f88): micro-batch, model chunks per device (--num-layers-per-virtual-pipeline-stage) and
# whether PyTorch DDP overlaps the gradient all-reduce (--DDP-impl torch) or Megatron's local DDP
# reduces after backward (local).
SC21_TABLE_1 = {
    "megatron2021-t1-1.7B": (16, 1, True),
    "megatron2021-t1-7.5B": (16, 1, True),
    "megatron2021-t1-18.4B": (8, 1, True),
    "megatron2021-t1-39.1B": (4, 1, False),
    "megatron2021-t1-76.1B": (2, 3, False),
    "megatron2021-t1-145.6B": (2, 2, False),
    "megatron2021-t1-310.1B": (1, 2, False),
    "megatron2021-t1-1008.0B": (1, 1, False),
}


@pytest.mark.parametrize("run_id", sorted(SC21_TABLE_1))
def test_megatron2021_table_1_runs_as_its_scripts_launched_them(run_id, bench_results):
    """One candidate per record, the scripts' micro-batch and chunks, nothing filled in."""
    micro_batch, chunks, overlapped = SC21_TABLE_1[run_id]
    record = next(r for r in bench_records() if r["id"] == run_id)
    settings = record_settings(record, load_inputs())
    model = _model_for(record, settings)
    training = training_for(record, settings, model)
    assert training.overlap_grad_reduce is overlapped
    candidates = list(_candidates(record, settings, model, training.global_batch_size))
    assert [(c.micro_batch_size, c.virtual_stages) for c in candidates] == [(micro_batch, chunks)]
    result = next(r for r in bench_results if r.run_id == run_id)
    assert result.filled == "" and result.error is not None


def test_table_2s_175b_ptd_p_row_runs_the_papers_own_split_of_its_96_model_parallel_gpus(bench_results):
    """Table 2 states only t x p = 96; the same paper's Figure 12 script runs this model at that
    size as TP 8 x PP 12 (run_inputs.json model_parallel_split), so nothing is filled but the
    recomputation the record leaves out."""
    run_id = "megatron2021-t2-ptd-174.6B-384gpu"
    record = next(r for r in bench_records() if r["id"] == run_id)
    assert record["parallel"]["tp"] is None and record["parallel"]["pp"] is None
    settings = record_settings(record, load_inputs())
    model = _model_for(record, settings)
    candidates = list(_candidates(record, settings, model, training_for(record, settings, model).global_batch_size))
    assert candidates and {(c.tp_size, c.pp_size, c.dp_size) for c in candidates} == {(8, 12, 4)}
    result = next(r for r in bench_results if r.run_id == run_id)
    assert result.filled == "rc=full"


NEMOTRON_ROWS = {"nemo2407-Nemotron-8B-64gpu": ("nemotron3-8b", 12701, 653), "nemo2407-Nemotron-22B-64gpu": ("nemotron3-22b", 4256, 554)}


def test_nemo2407_nemotron_rows_are_evaluated_on_their_catalog_models(bench_results):
    """NeMo 24.07's Nemotron 8B and 22B rows, once on the to-do list (no squared ReLU, no shape):
    evaluated on the catalog's Nemotron models with their measured tokens/s per GPU, and within
    the 10% the controlled benchmarks are held to."""
    rows = {r.run_id: r for r in bench_results if r.run_id in NEMOTRON_ROWS}
    assert set(rows) == set(NEMOTRON_ROWS)
    for run_id, r in rows.items():
        assert (r.metric, r.measured, r.skipped, r.family) == ("tokens_per_sec_per_gpu", NEMOTRON_ROWS[run_id][1], "", "nemo2407")
        assert r.predicted > 0 and "sp=on" in r.filled and "INFEASIBLE" not in r.filled
        assert abs(r.error) <= 0.10, (run_id, r.error)


@pytest.mark.parametrize("run_id", list(NEMOTRON_ROWS))
def test_nemotron_vocabulary_reproduces_the_tables_flop_count(run_id):
    """The table's model TFLOP/s over its tokens/s per GPU is the FLOPs per token it counted;
    Megatron's 72 L h^2 (1 + s/6h + V/12hL) (model_flops_per_iteration) on the catalog's shape
    with the 256,000-token vocabulary gives it to the table's rounding (0.1%); GPT-2's 50,257
    would be 6-10% short."""
    name, tokens_per_s, tflops = NEMOTRON_ROWS[run_id]
    model = catalog.get_model(name)
    table = tflops * 1e12 / tokens_per_s
    assert model_flops_per_iteration(model, 1, 4096) / 4096 == pytest.approx(table, rel=1e-3)
    gpt2 = dataclasses.replace(model, vocab_size=50257)
    assert model_flops_per_iteration(gpt2, 1, 4096) / 4096 < 0.95 * table


def test_vtrain_public_rows():
    rows = vtrain.load_rows()
    assert len(rows) == 47
    records = vtrain.load_records()
    assert {vtrain.model_key(record) for record in records} == {"3.6B (L30 h3072)", "175B (L96 h12288)"}
    assert all(record["cluster"]["gpus"] == record["parallel"]["tp"] * record["parallel"]["pp"] * record["parallel"]["dp"] for record in records)


def test_every_vtrain_row_is_evaluated(bench_results):
    rows = [r for r in bench_results if r.family == "vtrain"]
    assert len(rows) == 47 and all(r.error is not None and r.metric == "iteration_time_s" for r in rows)


def test_family_table_on_a_synthetic_bench():
    def run(run_id, family, measured, predicted, metric="tokens_per_sec_per_gpu"):
        return RunResult(run_id, metric, measured, predicted, "", family=family)

    results = [
        run("a1", "a", 100.0, 110.0),  # +10%
        run("a2", "a", 100.0, 70.0),  # -30%
        run("b1", "b", 2.0, 1.0, "iteration_time_s"),  # measured / predicted - 1 = +100%
        RunResult("c1", "-", None, None, "", skipped="no model shape in the record", family="c"),
    ]
    rows = {row.family: row for row in family_table(results)}
    assert set(rows) == {"a", "b", "all"}
    assert rows["a"].count == 2
    assert rows["a"].mape == pytest.approx(0.20)
    assert rows["a"].signed_mean == pytest.approx(-0.10)
    assert (rows["a"].worst_run, rows["a"].worst_error) == ("a2", pytest.approx(-0.30))
    assert rows["b"].mape == pytest.approx(1.0) and rows["b"].signed_mean == pytest.approx(1.0)
    assert rows["all"].count == 3
    assert rows["all"].mape == pytest.approx((0.1 + 0.3 + 1.0) / 3)
    assert rows["all"].worst_run == "b1"
    assert macro_mape(list(rows.values())) == pytest.approx((0.20 + 1.0) / 2)


def test_spearman_rho():
    assert vtrain.spearman_rho([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert vtrain.spearman_rho([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ties share their mean rank: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4).
    expected = 0.9486832980505138  # Pearson of those ranks = 4.5 / sqrt(4.5 * 5)
    assert vtrain.spearman_rho([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(expected)
    # No ties: 1 - 6 * sum(d^2) / (n (n^2 - 1)) with d = (0, -1, 1, 0, 0): 1 - 12 / 120.
    assert vtrain.spearman_rho([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.9)
    groups = {"x1": "x", "x2": "x", "x3": "x"}
    results = [RunResult(f"x{i}", "iteration_time_s", m, p, "") for i, (m, p) in enumerate([(1.0, 2.0), (2.0, 1.0), (3.0, 3.0)], 1)]
    assert rank_correlations(results, groups) == {"x": (3, pytest.approx(0.5))}

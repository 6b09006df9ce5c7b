"""Megatron-Bridge's 26.08 MoE rows (bench/data/published_runs_mbridge2608.json, family
mbridge2608-moe): DeepSeek-V3, gpt-oss-120b and Qwen3 in MXFP8 on DGX-GB300 and GB200, the newest
container in our sources. Held out: transcribed with the settings of their performance recipes
and evaluated once, no constant moved for them."""

from __future__ import annotations

import pytest

from bench.accuracy import (
    NEW_KIND_FAMILY_TARGET,
    _candidates,
    _model_for,
    evaluate_bench,
    family_table,
    load_inputs,
    load_mbridge2608_records,
    record_settings,
    training_for,
)

# The 26.08 table's rows (docs/performance-summary.md at 4ab94dfad): id suffix -> (GPUs, GBS, MBS,
# TP, PP, VP, EP, tokens/s/GPU, model TFLOP/s/GPU).
PUBLISHED = {
    "gb300-deepseek-v3-256gpu-mxfp8": (256, 4096, 1, 1, 2, 8, 32, 6288, 1635),
    "gb200-deepseek-v3-256gpu-mxfp8": (256, 4096, 1, 1, 4, 4, 64, 4912, 1276),
    "gb300-gpt-oss-120b-64gpu-mxfp8": (64, 1280, 4, 1, 1, None, 16, 33024, 1077),
    "gb200-gpt-oss-120b-64gpu-mxfp8": (64, 1280, 4, 1, 1, None, 64, 28672, 934),
    "gb300-qwen3-30b-a3b-8gpu-mxfp8": (8, 512, 8, 1, 1, None, 8, 44544, 1029),
    "gb200-qwen3-30b-a3b-8gpu-mxfp8": (8, 512, 4, 1, 1, None, 8, 39936, 923),
    "gb300-qwen3-235b-a22b-256gpu-mxfp8": (256, 8192, 2, 1, 4, 12, 32, 8816, 1306),
    "gb200-qwen3-235b-a22b-256gpu-mxfp8": (256, 8192, 1, 1, 8, 3, 32, 7280, 1077),
}
PREFIX = "moe-mbridge2608-"


@pytest.fixture(scope="module")
def results():
    ids = {record["id"] for record in load_mbridge2608_records()}
    return {r.run_id: r for r in evaluate_bench() if r.run_id in ids}


def test_every_row_is_transcribed_as_published():
    records = load_mbridge2608_records()
    assert [record["id"] for record in records] == [PREFIX + key for key in PUBLISHED]
    for record in records:
        gpus, gbs, mbs, tp, pp, vp, ep, tokens, tflops = PUBLISHED[record["id"].removeprefix(PREFIX)]
        par = record["parallel"]
        assert (record["cluster"]["gpus"], par["global_batch"], par["micro_batch"], par["tp"], par["pp"]) == (gpus, gbs, mbs, tp, pp)
        assert (par["virtual_pipeline"], par["ep"], par["dp"]) == (vp, ep, gpus // (tp * pp))
        assert par["gradient_accumulation"] * mbs * par["dp"] == gbs
        assert (record["measured"]["tokens_per_sec_per_gpu"], record["measured"]["tflops_per_gpu"]) == (tokens, tflops)
        assert f"| {gpus} | MXFP8 | {gbs} | {mbs} | 4096 |" in record["where_in_source"] and f"| {tokens} | {tflops} |" in record["where_in_source"]
        assert record["cluster"]["node"] == ("gb300-nvl72" if "-gb300-" in record["id"] else "gb200-nvl72")


def test_settings_are_the_full_iteration_mxfp8_recipes():
    """HybridEP (no alltoall host sync), the combined 1F1B EP overlap and Transformer Engine's fused
    grouped MLP on every row; the recipes' recomputation and pipeline splits per row."""
    inputs = load_inputs()
    for record in load_mbridge2608_records():
        settings = record_settings(record, inputs)
        assert settings["family"] == "mbridge2608-moe" and settings["stack"] == "megatron-core-2024" and settings["why"]
        model = _model_for(record, settings)
        assert model is not None and model.name == record["model"]["catalog"]
        training = training_for(record, settings, model)
        assert training.moe_host_s_per_layer == 0.0 and training.ep_comm_overlap is True
        assert training.expert_gemms == "grouped" and training.precision.value == "mxfp8"
        _, _, mbs, tp, pp, vp, ep, _, _ = PUBLISHED[record["id"].removeprefix(PREFIX)]
        candidates = list(_candidates(record, settings, model, training.global_batch_size))
        assert candidates
        for parallel in candidates:
            assert (parallel.tp_size, parallel.pp_size, parallel.ep_size, parallel.micro_batch_size) == (tp, pp, ep, mbs)
            assert parallel.virtual_stages == (vp or 1) and parallel.etp_size == 1
            if model.name == "deepseek-v3":  # 'Et*4|(t*4|)*14tmL' and the (4, 4) layout: 61 layers
                assert parallel.stage_layers == (4,) * 15 + (1,)
            assert parallel.recompute.value == ("selective" if "gb200-deepseek" in record["id"] else "none")


def test_the_held_out_family_reads_within_the_issue_target(results):
    """Evaluated as transcribed: every row predicted and feasible, the family within issue 16's 15%
    per family (11.6% when first evaluated; 9.9% with FP8 attention costed, 11.3% with the MXFP8
    output projection too). The row that reads furthest off, gpt-oss on GB200, is optimistic as its
    26.02 rows were; the GB300 DeepSeek-V3 row, which runs full-iteration CUDA graphs the model does
    not cost, pessimistic."""
    assert len(results) == len(PUBLISHED)
    assert all(r.error is not None and "INFEASIBLE" not in r.filled for r in results.values())
    (row,) = [row for row in family_table(list(results.values())) if row.family == "mbridge2608-moe"]
    assert row.count == 8 and row.mape <= NEW_KIND_FAMILY_TARGET
    assert results[PREFIX + "gb200-gpt-oss-120b-64gpu-mxfp8"].error > 0.2
    assert results[PREFIX + "gb300-deepseek-v3-256gpu-mxfp8"].error < -0.10

"""The mixture-of-experts runs of the accuracy bench (issue 16): published pre-training throughput
with expert parallelism (bench/data/published_runs_moe.json: DeepSeek-V3 from NVIDIA's
Megatron-Bridge performance summary, Mixtral and Llama 4 Scout from NVIDIA's NeMo performance
summary, DeepSeek-V3's own report, Qwen3 and gpt-oss from the same Megatron-Bridge summary, Kimi K2
from its 26.06 archive), evaluated as their own families, deterministically."""

from __future__ import annotations

import pytest

from bench.accuracy import (
    NEW_KIND_FAMILY_TARGET,
    _candidates,
    _model_for,
    evaluate_bench,
    family_table,
    filled_layout,
    layout_text,
    load_inputs,
    load_moe_records,
    record_settings,
    training_for,
)
from solver.cost.flops import active_parameter_count, embedding_parameter_count, total_parameter_count

FAMILIES = ("mbridge-moe", "nemo-moe", "deepseek-v3-report", "mbridge-qwen3", "mbridge-gptoss", "mbridge-kimi", "mcore2603-moe")

# The runs whose layer split no source states (61 DeepSeek-V3 layers on a pipeline whose
# pipeline_model_parallel_layout NVIDIA did not publish): the bench fills NVIDIA's published
# DeepSeek-V3 split for the same number of model chunks (run_inputs.json ``layouts_by_chunks``):
# 8 chunks, set_deepseek_v3_pipeline_model_parallel_layout's list for (8, 1) and (4, 2); 32 chunks,
# the 25.09 scripts' 'Et|(tt|)*30mL'.
FILLED_LAYOUTS = {
    "moe-mbridge2511-gb300-deepseek-v3-256gpu-bf16-wo-mtp": (2, 4, (8, 8, 8, 8, 8, 8, 8, 5), "layout=8*7,5"),
    "moe-mbridge2511-gb300-deepseek-v3-256gpu-mxfp8-wo-mtp": (2, 4, (8, 8, 8, 8, 8, 8, 8, 5), "layout=8*7,5"),
    "moe-mbridge2511-gb200-deepseek-v3-256gpu-mxfp8-wo-mtp": (8, 4, (1,) + (2,) * 30 + (0,), "layout=1,2*30,0"),
}


@pytest.fixture(scope="module")
def moe_results():
    ids = {record["id"] for record in load_moe_records()}
    return [r for r in evaluate_bench() if r.run_id in ids]


def test_every_moe_record_is_evaluated(moe_results):
    records = load_moe_records()
    assert len(records) == 37
    assert [r.run_id for r in moe_results] == [record["id"] for record in records]
    assert [r.run_id for r in moe_results if r.skipped] == []
    for r in moe_results:
        assert r.metric == "tokens_per_sec_per_gpu" and r.predicted is not None and r.predicted > 0, r


def test_unpublished_deepseek_layouts_are_filled_with_the_published_split_for_their_chunk_count(moe_results):
    """The three 25.11 rows whose layout NVIDIA did not publish are evaluated with the split filled
    (and say so in their filled notes); every other DeepSeek-V3 run's split is its own source's."""
    inputs = load_inputs()
    results = {r.run_id: r for r in moe_results}
    for record in load_moe_records():
        settings = record_settings(record, inputs)
        model = _model_for(record, settings)
        assert model is not None
        par = record["parallel"]
        chunks = par["pp"] * (par["virtual_pipeline"] or 1)
        if record["id"] not in FILLED_LAYOUTS:
            assert filled_layout(settings, chunks) is None, record["id"]
            assert "layout=" not in results[record["id"]].filled, record["id"]
            continue
        pp, vp, split, note = FILLED_LAYOUTS[record["id"]]
        assert (par["pp"], par["virtual_pipeline"]) == (pp, vp)
        assert "not_expressible" not in settings and "filled, not published" in settings["why"]
        assert filled_layout(settings, pp * vp) == split
        assert len(split) == pp * vp and sum(split) == model.num_layers == 61
        training = training_for(record, settings, model)
        for parallel in _candidates(record, settings, model, training.global_batch_size):
            assert parallel.stage_layers == split and parallel.num_chunks == pp * vp
        result = results[record["id"]]
        assert not result.skipped and result.error is not None
        assert note in result.filled.split(), result.filled


def test_the_filled_splits_are_nvidias_deepseek_v3_layouts_for_the_same_chunk_count():
    """8 chunks: the list set_deepseek_v3_pipeline_model_parallel_layout gives both (8, 1) and
    (4, 2) ('E' + 8 decoder layers, 6 chunks of 8, 5 + MTP and loss); 32 chunks: the 25.09
    scripts' 'Et|(tt|)*30mL', which ran at pp 8 x vp 4 on H100 (the 25.09 H100 record's own split)."""
    inputs = load_inputs()
    layouts = inputs["sources"]["moe-mbridge"]["layouts_by_chunks"]
    assert {chunks: tuple(split) for chunks, split in layouts.items()} == {
        "8": (8,) * 7 + (5,),
        "32": (1,) + (2,) * 30 + (0,),
    }
    h100 = inputs["records"]["moe-mbridge2509-h100-deepseek-v3-1024gpu-fp8"]["stage_layers"]
    assert tuple(h100) == tuple(layouts["32"])
    assert layout_text(tuple(layouts["8"])) == "8*7,5" and layout_text(tuple(layouts["32"])) == "1,2*30,0"
    # Filled only where the record states no split, and only for a chunk count published.
    settings = {"layouts_by_chunks": layouts}
    assert filled_layout(settings, 8) == (8,) * 7 + (5,)
    assert filled_layout(settings, 16) is None
    assert filled_layout({**settings, "stage_layers": [4] * 15 + [1]}, 16) is None


def test_nemo_moe_family_meets_the_issue_16_target(moe_results):
    rows = {row.family: row for row in family_table(moe_results)}
    assert set(rows) == set(FAMILIES) | {"all"}
    assert rows["nemo-moe"].count == 5
    assert rows["nemo-moe"].mape <= NEW_KIND_FAMILY_TARGET, rows["nemo-moe"]


def test_no_moe_run_that_ran_is_called_infeasible(moe_results):
    """Megatron-core's recompute modules (mla_up_proj, mlp, layernorm), the inputs Transformer
    Engine keeps in MXFP8/FP8 and the MTP module on the last stage: every published run fits."""
    assert [r.run_id for r in moe_results if "INFEASIBLE" in r.filled] == []


# Where the DeepSeek-V3 families stand (MTP, Megatron-core's recompute modules, the MoE layer's
# quantisation and Transformer Engine's per-expert GEMM launches modelled): guards against drifting
# back beyond what the issue 16 target below allows.
# mbridge-moe: 10.4% over its 10 runs, the three with filled layouts included (12.5% over 7 before).
REACHED = {"mbridge-moe": 0.12, "deepseek-v3-report": 0.105}


@pytest.mark.parametrize("family", sorted(REACHED))
def test_deepseek_families_hold_what_they_reached(moe_results, family):
    rows = {row.family: row for row in family_table(moe_results)}
    assert rows[family].mape <= REACHED[family], rows[family]


@pytest.mark.parametrize(
    "family",
    [
        # +7% optimistic on average: DeepSeek-V3 at pp 16 on DGX-B200/B300 still +11..+39% (CUDA
        # graphs, the per-layer host syncs and HybridEP are not modelled; force-balanced routing is
        # costed at capacity factor 1.25).
        "mbridge-moe",
        "deepseek-v3-report",  # -10%: a whole-run average, with DualPipe's bubble and hidden sends costed
    ],
)
def test_deepseek_families_meet_the_issue_16_target(moe_results, family):
    rows = {row.family: row for row in family_table(moe_results)}
    assert rows[family].mape <= NEW_KIND_FAMILY_TARGET, rows[family]


def test_each_record_takes_its_parallel_layout_precision_node_and_model_from_sourced_settings():
    inputs = load_inputs()
    for record in load_moe_records():
        settings = record_settings(record, inputs)
        assert settings["why"], record["id"]
        assert record["where_in_source"] and record["source"], record["id"]
        assert settings["family"] in FAMILIES
        assert settings["node"] == record["cluster"]["node"]
        assert settings["precision"] == record["precision"].split()[0]
        assert settings["stack"] == "megatron-core-2024"
        model = _model_for(record, settings)
        assert model is not None and model.name == record["model"]["catalog"] and model.is_moe
        par = record["parallel"]
        assert par["dp"] * par["tp"] * par["pp"] * par["cp"] == record["cluster"]["gpus"]
        if par["gradient_accumulation"] is not None:  # the table's GA is GBS / (MBS x dp)
            assert par["global_batch"] == par["micro_batch"] * par["dp"] * par["gradient_accumulation"], record["id"]
        # Megatron-core runs MoE with tp > 1 only under sequence parallelism.
        assert settings.get("sequence_parallel", False) is (par["tp"] > 1), record["id"]
        training = training_for(record, settings, model)
        candidates = list(_candidates(record, settings, model, training.global_batch_size))
        assert candidates, record["id"]
        for parallel in candidates:
            assert (parallel.tp_size, parallel.pp_size, parallel.cp_size, parallel.ep_size) == (par["tp"], par["pp"], par["cp"], par["ep"])
            assert parallel.dp_size == par["dp"]
            assert parallel.virtual_stages == (par["virtual_pipeline"] or 1), record["id"]
            if par["micro_batch"]:
                assert parallel.micro_batch_size == par["micro_batch"]
            if settings.get("stage_layers"):
                assert parallel.stage_layers == tuple(settings["stage_layers"])
                assert sum(parallel.stage_layers) == model.num_layers == 61


def test_only_the_runs_whose_stack_overlaps_the_all_to_alls_say_so():
    """Megatron-Bridge's 25.09 H100 script turns on the combined 1F1B EP overlap
    (overlap_moe_expert_parallel_comm) and DeepSeek-V3 trained with DualPipe; NVIDIA's Blackwell
    DeepSeek-V3 presets and NeMo's Mixtral / Llama 4 scripts leave it off."""
    inputs = load_inputs()
    overlapped = set()
    for record in load_moe_records():
        settings = record_settings(record, inputs)
        model = _model_for(record, settings)
        assert model is not None
        if training_for(record, settings, model).ep_comm_overlap:
            overlapped.add(record["id"])
    assert overlapped == {
        "moe-mbridge2509-h100-deepseek-v3-1024gpu-fp8", "moe-deepseekv3-report-2048gpu",
        # Qwen3 presets with moe_a2a_overlap True (configs/qwen/qwen3_workload_base_configs.py at df0289c).
        "moe-qwen3-mbridge2602-b300-qwen3-235b-a22b-256gpu-mxfp8", "moe-qwen3-mbridge2602-h100-qwen3-30b-a3b-16gpu-fp8-cs",
        "moe-qwen3-mbridge2602-h100-qwen3-235b-a22b-256gpu-fp8-cs",
        # The MoE report's H100 rows: Table 17's EP all-to-all overlap, the Qwen3 script's A2A_OVERLAP=1.
        "moe-mcore2603-h100-qwen3-235b-a22b-256gpu-bf16", "moe-mcore2603-h100-deepseek-v3-1024gpu-fp8",
    }


def test_deepseek_report_row_is_its_gpu_hours_per_trillion_tokens():
    (record,) = [r for r in load_moe_records() if r["id"] == "moe-deepseekv3-report-2048gpu"]
    assert record["measured"]["tokens_per_sec_per_gpu"] == pytest.approx(1e12 / (180e3 * 3600), abs=0.05)
    assert (record["cluster"]["gpus"], record["parallel"]["pp"], record["parallel"]["ep"], record["parallel"]["zero_stage"]) == (2048, 16, 64, 1)


# Qwen3 rows of Megatron-Bridge's 26.02 table whose presets run the flex dispatcher on its HybridEP
# backend (qwen3_llm_pretrain.py: moe_token_dispatcher_type "flex" on GB300 and GB200, and for the
# 30B on B300). The other five run Megatron-core's alltoall dispatcher (B200, B300 235B, H100): they
# read +17% to +405% until its per-MoE-layer host sync was costed (moe_host_s_per_layer,
# tests/test_moe_host_sync.py), -23% to +171% since; evaluated and reported, not guarded at a bound.
QWEN3_FLEX_ROWS = (
    "moe-qwen3-mbridge2602-gb300-qwen3-30b-a3b-8gpu-mxfp8", "moe-qwen3-mbridge2602-gb300-qwen3-235b-a22b-256gpu-mxfp8",
    "moe-qwen3-mbridge2602-gb200-qwen3-30b-a3b-8gpu-mxfp8", "moe-qwen3-mbridge2602-gb200-qwen3-235b-a22b-256gpu-mxfp8",
    "moe-qwen3-mbridge2602-b300-qwen3-30b-a3b-8gpu-mxfp8",
)


def test_qwen3_rows_on_the_hybridep_dispatcher_are_within_10_percent(moe_results):
    """Qwen3-30B-A3B and 235B-A22B (heads of 128 on hidden 2048 / 4096: ModelSpec.head_dim) where
    the stack's dispatch is the one the cost model costs: each within 10% of the published rate."""
    results = {r.run_id: r for r in moe_results}
    for run_id in QWEN3_FLEX_ROWS:
        assert abs(results[run_id].error) <= 0.10, results[run_id]
    models = {_model_for(record, record_settings(record, load_inputs())).head_dim for record in load_moe_records() if "qwen3" in record["id"]}
    assert models == {128}


def test_gpt_oss_rows_run_the_published_layouts_on_the_catalog_model(moe_results):
    """gpt-oss-120b's five 26.02 rows (Megatron-Bridge's gpt_oss presets at df0289c) and the 26.04.01
    container's HGX B300 and B200 rows, which run ep 8 (presets at 21d102f5e): the catalog
    model counts the model card's 116.8B total and 5.1B active parameters (the input embedding, a
    lookup, left out of the active count as the card counts it), with its 64-wide heads and its
    128-token window on every other layer; each row is costed at its preset's layout and
    recomputation. The 26.02 recipe keeps Megatron-core's alltoall dispatcher on every GPU (it never
    calls apply_flex_dispatcher_backend), whose per-MoE-layer host sync is costed since session 18 but
    binds only on the H100 row; the 26.04.01 B300 preset names HybridEP, which that container's recipe
    applies. The rows are evaluated and reported (all optimistic, docs/wip/README.md), not guarded at
    a bound, except that the ep-8 rows, whose all-to-alls stay on NVLink, read as optimistic as the
    NVL72 rows: the family's error is not the network's."""
    inputs = load_inputs()
    records = [r for r in load_moe_records() if r["id"].startswith("moe-gptoss-")]
    assert len(records) == 7
    model = _model_for(records[0], record_settings(records[0], inputs))
    assert model is not None
    assert total_parameter_count(model) / 1e9 == pytest.approx(116.8, abs=0.1)
    assert (active_parameter_count(model) - embedding_parameter_count(model)) / 1e9 == pytest.approx(5.1, abs=0.05)
    assert (model.head_dim, model.sliding_window, model.sliding_window_fraction) == (64, 128, 0.5)
    expected = {  # container-gpu: (pp, ep, micro-batch, recompute modules)
        "mbridge2602-gb300": (1, 64, 4, ()), "mbridge2602-gb200": (1, 64, 4, ("layernorm", "moe_act")),
        "mbridge2602-b300": (1, 64, 4, ()), "mbridge2602-b200": (1, 64, 4, ("layernorm", "moe_act")),
        "mbridge2602-h100": (4, 8, 1, ("layernorm", "moe_act")),
        # 26.04.01: the HGX rows keep their all-to-alls in one node.
        "mbridge260401-b300": (1, 8, 4, ()), "mbridge260401-b200": (1, 8, 4, ("layernorm", "moe_act")),
    }
    results = {r.run_id: r for r in moe_results}
    for record in records:
        settings = record_settings(record, inputs)
        pp, ep, mbs, modules = expected["-".join(record["id"].split("-")[2:4])]
        training = training_for(record, settings, model)
        assert training.global_batch_size == 1280 and training.precision.value == "bf16"
        (parallel,) = list(_candidates(record, settings, model, training.global_batch_size))
        assert (parallel.tp_size, parallel.pp_size, parallel.ep_size, parallel.micro_batch_size) == (1, pp, ep, mbs)
        if modules:
            assert parallel.recompute.value == "selective" and tuple(m.value for m in training.recompute_modules) == modules
        else:
            assert parallel.recompute.value == "none"
        result = results[record["id"]]
        assert result.family == "mbridge-gptoss" and not result.skipped and result.error is not None
        if ep == 8 and pp == 1:
            assert result.error > 0.3 and training.moe_host_s_per_layer == (0.0 if "b300" in record["id"] else pytest.approx(0.0037))

"""llm-foundry's single-node MPT tables (bench family ``llmfoundry-1node``, bench/llmfoundry.py):
the transcription against the table's own columns, the shapes against its parameter counts, and
every row evaluated on its own node."""

from __future__ import annotations

import pytest

from bench import llmfoundry
from bench.accuracy import _model_for, evaluate_record, family_of, load_inputs, load_records, record_settings
from solver.cost.flops import total_parameter_count


@pytest.fixture(scope="module")
def rows():
    return llmfoundry.load_rows()


def test_rows_are_the_tables_single_node_bf16_rows(rows):
    assert len(rows) == 145
    by_table = {table: sum(r["table"] == table for r in rows) for table in {r["table"] for r in rows}}
    assert by_table == {
        "H100 80GB BF16": 36,
        "H100 80GB FP8": 7,
        "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": 57,
        "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": 45,
    }
    assert all(r["gpus"] == "8" and r["sharding"] == "FULL_SHARD" and r["activation_cpu_offload"] == "False" for r in rows)
    for r in rows:
        # The table's own arithmetic: tokens/s = samples/s x sequence, per GPU = / 8 (its rounding).
        assert float(r["tokens_per_s_per_gpu"]) == pytest.approx(float(r["tokens_per_s"]) / 8, abs=1.0)
        assert int(r["global_batch_tokens"]) == int(r["global_batch"]) * int(r["seq_len"])
        assert r["precision"] in ("amp_bf16", "bf16", "amp_fp8")
    # The four rows published_runs.json already holds are not read twice.
    published = {record["id"] for record in load_records()}
    assert "llmfoundry-mpt7b-h100-8gpu-seq2048" in published
    assert not any(r["model"] == "7b" and r["seq_len"] == "2048" and r["gpu"] == "h100_80gb" for r in rows)
    ids = [llmfoundry.record_id(r) for r in rows]
    assert len(set(ids)) == len(ids)


def test_shapes_reproduce_the_tables_parameter_counts(rows):
    """NumParams = n (12 d^2 + 13 d) + (vocabulary + sequence) d + 2 d: MPT's biases and layer
    norms as the 2023 benchmarks built them, and a learned position table of max_seq_len rows."""
    for r in rows:
        d, _, n = llmfoundry.SHAPES[r["model"]]
        expected = n * (12 * d * d + 13 * d) + (llmfoundry.VOCAB + int(r["seq_len"])) * d + 2 * d
        assert int(r["num_params"]) == expected, r
    d_heads = {size: d // heads for size, (d, heads, _) in llmfoundry.SHAPES.items()}
    assert d_heads == {"125m": 64, "350m": 64, "760m": 128, "1b": 128, "3b": 128, "7b": 128, "13b": 128, "30b": 128}


def test_every_row_is_evaluated_on_its_node():
    inputs = load_inputs()
    nodes = {"h100_80gb": "dgx-h100", "h100_80gb_fp8": "dgx-h100", "a100_80gb": "dgx-a100-80gb", "a100_40gb": "dgx-a100-40gb"}
    for record in llmfoundry.load_records():
        settings = record_settings(record, inputs)
        gpu_tag = record["id"].split("-")[1]
        assert settings["node"] == nodes[gpu_tag] and settings["stack"] == "pytorch-fsdp1-2023"
        assert settings["precision"] == ("fp8" if gpu_tag.endswith("_fp8") else "bf16")
        assert family_of(record["id"], inputs) == "llmfoundry-1node"
    sample = [r for r in llmfoundry.load_records() if r["id"] == "llmfoundry1n-h100_80gb-mpt3b-seq65536-mb1"]
    result = evaluate_record(sample[0], inputs)
    assert result.metric == "tokens_per_sec_per_gpu" and result.measured == 3262.0 and result.predicted > 0
    shape = sample[0]["model"]
    assert shape["params_b"] == pytest.approx(2.81436672)
    model = _model_for(sample[0], record_settings(sample[0], inputs))
    assert total_parameter_count(model) == 2_814_366_720


def test_mpt_trains_without_dropout_and_every_row_that_ran_fits():
    """MPT's configs set no dropout (MPTConfig's resid_pdrop, emb_pdrop and attn_pdrop default 0.0),
    and its dropouts are eager nn.Dropout modules, which keep no mask at p = 0: with the masks
    charged, eight rows that ran (MPT-3B at 8K tokens, micro-batch 3, on 80 GB; MPT-760M on 40 GB)
    were called infeasible."""
    inputs = load_inputs()
    records = llmfoundry.load_records()
    for record in records:
        model = _model_for(record, record_settings(record, inputs))
        assert (model.hidden_dropout, model.attention_dropout) == (0.0, 0.0), record["id"]
    results = [evaluate_record(record, inputs) for record in records]
    assert [r.run_id for r in results if "INFEASIBLE" in r.filled] == []
    assert all(r.predicted and r.predicted > 0 for r in results)

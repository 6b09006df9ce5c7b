"""llm-foundry's single-node MPT throughput tables as bench records: the held-out family
``llmfoundry-1node``.

bench/data/llmfoundry_single_node.csv holds every 8-GPU row of the four tables of
mosaicml/llm-foundry's ``scripts/train/benchmarking/README.md`` at b2a43a147 (2023-10-19, the
commit that added the H100 tables): "H100 80GB BF16", "H100 80GB FP8", "A100 80GB with 1600 Gbps
node-node interconnect (RoCE)" and "A100 40GB with ...", 145 rows of MPT models from 125M to 30B
parameters at sequence lengths of 512 to 65,536 tokens, less the four rows
``published_runs.json`` already holds (the family ``llmfoundry``). One node each, so no traffic
leaves it: these rows test the compute side (GEMMs, the fused attention kernel, FSDP's gathers
over NVLink, FP8's casts at small hidden sizes) across sequence length, which no other family
spans. The FP8 rows ran Transformer Engine v0.10's linear layers (the same commit's
``submit_benchmarks.py`` sets ``fc_type: te`` for H100 FP8 and installs TransformerEngine@v0.10).

Model shapes come from ``scripts/train/yamls/pretrain/mpt-<size>.yaml`` at the same commit
(``d_model``, ``n_heads``, ``n_layers``; ``expansion_ratio`` 4, ``vocab_size`` 50368); the
table's NumParams column includes a learned position table of ``max_seq_len`` x ``d_model``
(3B: 2,651,837,440 at 2,048 tokens, 2,814,366,720 at 65,536), which the records keep.
"""

from __future__ import annotations

import csv
from pathlib import Path

DATA = Path(__file__).parent / "data"
CSV_PATH = DATA / "llmfoundry_single_node.csv"
COMMIT = "b2a43a1477a45f40f4086a1c72f851b0ab42d0ac"
SOURCE = f"mosaicml/llm-foundry at {COMMIT[:9]}, scripts/train/benchmarking/README.md (MFU/HFU tables, 8-GPU rows)"

# (d_model, n_heads, n_layers) of scripts/train/yamls/pretrain/mpt-<size>.yaml at b2a43a147.
SHAPES = {
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
}
VOCAB = 50368
# The table's GPU column as the record id's tag and the catalog GPU it names.
GPUS = {"h100_80gb": "H100-80GB", "a100_80gb": "A100-80GB", "a100_40gb": "A100-40GB"}


def load_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def gpu_tag(row: dict[str, str]) -> str:
    """The table's GPU column, with ``_fp8`` for the FP8 table's rows (their own run-input source)."""
    return row["gpu"] + ("_fp8" if row["precision"] == "amp_fp8" else "")


def record_id(row: dict[str, str]) -> str:
    # The micro-batch keeps ids unique: the A100 80GB table measures 125M at 2,048 tokens twice.
    return f"llmfoundry1n-{gpu_tag(row)}-mpt{row['model']}-seq{row['seq_len']}-mb{row['micro_batch']}"


def row_record(row: dict[str, str]) -> dict:
    d_model, heads, layers = SHAPES[row["model"]]
    seq_len = int(row["seq_len"])
    return {
        "id": record_id(row),
        "category": "D",
        "source": SOURCE,
        "where_in_source": f"table '{row['table']}', row {row['model']} | {row['seq_len']} | 8 | {row['gpu']}",
        "model": {
            "params_b": int(row["num_params"]) / 1e9,
            "layers": layers,
            "hidden": d_model,
            "heads": heads,
            "seq_len": seq_len,
            "vocab": VOCAB,
            "ffn_hidden": 4 * d_model,
        },
        "cluster": {"gpu": GPUS[row["gpu"]], "gpus": int(row["gpus"]), "gpus_per_node": 8},
        "parallel": {
            "tp": 1,
            "pp": 1,
            "dp": int(row["gpus"]),
            "zero_stage": 3 if row["sharding"] == "FULL_SHARD" else 2,
            "micro_batch": int(row["micro_batch"]),
            "global_batch": int(row["global_batch"]),
            "gradient_accumulation": int(row["grad_accum"]),
            "interleave": None,
            "recompute": "full" if row["activation_checkpointing"] == "True" else "none",
            "sequence_parallel": None,
            "fsdp": True,
        },
        "measured": {
            "tokens_per_sec_per_gpu": float(row["tokens_per_s_per_gpu"]),
            "mfu": float(row["mfu_pct"]) / 100,
            "hfu": float(row["hfu_pct"]) / 100,
            "iteration_time_s": None,
            "tflops_per_gpu": None,
            "time_to_train_min": None,
        },
        "notes": (
            f"Composer / PyTorch FSDP {row['sharding']}, precision {row['precision']}, MP mode {row['mp_mode']}, "
            f"activation checkpointing {row['activation_checkpointing']}, no CPU offload; benchmark runs of about "
            "12 steps on one node of 8 GPUs. Transcribed unchanged from the table."
        ),
    }


def load_records(path: Path = CSV_PATH) -> list[dict]:
    return [row_record(row) for row in load_rows(path)]

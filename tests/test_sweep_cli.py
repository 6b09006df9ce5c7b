"""``partitura sweep``: the same body as POST /v1/sweeps, a table (or the JSON document) out, and
the charts written on request."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest

from app import cli

SWEEP = {
    "model": "gpt3-125m",
    "cluster": "dgx-h100-x1",
    "num_gpus": [2, 4, 16],
    "training": {"global_batch_size": 32, "seq_length": 1024, "train_tokens": 1e9},
}


def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, env={}, out=out, err=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_sweep_prints_a_table_with_every_point_the_fit_and_the_prices(tmp_path):
    code, out, err = run(["sweep", "-", "--charts", str(tmp_path / "charts")], stdin=json.dumps(SWEEP))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == [
        "cluster", "GPUs", "batch", "status", "dp", "x", "tp", "x", "pp", "x", "cp", "step", "s", "tokens/s", "MFU", "train", "h",
        "cost", "USD", "eff.", "front",
    ]
    rows = [line.split() for line in lines[1:4]]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("dgx-h100-x1", "2", "32", "succeeded"), ("dgx-h100-x1", "4", "32", "succeeded"), ("dgx-h100-x1", "16", "32", "infeasible"),
    ]
    assert rows[0][-2:] == ["100%", "*"]
    assert rows[2][4:] == ["-"] * 7  # split, step, tokens/s, MFU, hours, cost, efficiency; not on the front
    assert "dgx-h100-x1, 16 GPUs, batch 32: the cluster 'dgx-h100-x1' has 8 GPUs" in out
    assert "dgx-h100-x1, batch 32: time to train = " in out and "(R^2 1.0000, 2 points)" in out
    assert "dgx-h100-x1: $12.29 per GPU-hour (the catalog cluster dgx-h100-x1)" in out
    for name in ("scaling.svg", "pareto.svg"):
        root = ET.parse(tmp_path / "charts" / name).getroot()
        assert root.find(".//{http://www.w3.org/2000/svg}g[@id='x-axis']") is not None


def test_sweep_json_matches_the_table(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(SWEEP))
    code, out, _ = run(["sweep", str(path), "--json"])
    assert code == 0
    document = json.loads(out)
    two, four = document["points"][0], document["points"][1]
    assert four["scaling_efficiency"] == pytest.approx((four["tokens_per_s"] / 4) / (two["tokens_per_s"] / 2))
    fit = document["series"][0]["fit"]
    assert fit["num_points"] == 2 and fit["r_squared"] == 1.0
    assert two["time_to_train_s"] * 2 ** fit["b"] == pytest.approx(four["time_to_train_s"] * 4 ** fit["b"])


def test_sweep_with_bad_input_is_a_problem_naming_the_field():
    code, out, err = run(["sweep", "-"], stdin=json.dumps({**SWEEP, "num_gpus": {"min": 1, "max": 4096, "step": 1}}))
    assert (code, out) == (2, "")
    problem = json.loads(err)
    assert problem["status"] == 422 and problem["errors"][0]["field"] == "body.num_gpus"


def test_the_readme_sweep_and_sizing_examples_are_valid_requests():
    import re
    from pathlib import Path

    from app.sizing.schemas import SizingRequest
    from app.sweeps.schemas import SweepRequest
    from app.sweeps.service import grid_axis
    from solver.sweep.grid import expand

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    pattern = r"curl -s http://127\.0\.0\.1:8000/v1/(sweeps|sizing) -H 'content-type: application/json' -d '(\{.*?\})'"
    examples = dict(re.findall(pattern, text, flags=re.DOTALL))
    assert set(examples) == {"sweeps", "sizing"}
    sweep = SweepRequest.model_validate_json(examples["sweeps"])
    clusters = sweep.cluster if isinstance(sweep.cluster, list) else [sweep.cluster]
    assert len(expand(clusters, grid_axis(sweep.num_gpus), grid_axis(sweep.training.global_batch_size))) == 12
    sizing = SizingRequest.model_validate_json(examples["sizing"])
    assert sizing.budget is not None and sizing.budget.deadline_s == 30 * 86400


def test_a_larger_sweep_plans_in_solver_processes_with_the_same_results():
    assert cli.SWEEP_POOL_MIN_POINTS == 8
    body = {**SWEEP, "cluster": ["dgx-h100-x1", "dgx-a100-80gb"], "num_gpus": [1, 2, 4, 8]}
    code, out, err = run(["sweep", "-", "--json"], stdin=json.dumps(body))
    assert (code, err) == (0, "")
    pooled = json.loads(out)["points"]
    assert len(pooled) == 8 and all(p["status"] == "succeeded" for p in pooled)
    # The first cluster's four points alone stay under the threshold: planned in this process.
    code, out, _ = run(["sweep", "-", "--json"], stdin=json.dumps({**body, "cluster": "dgx-h100-x1"}))
    inline = json.loads(out)["points"]
    assert [(p["num_gpus"], p["parallel"], p["step_time_s"]) for p in inline] == [
        (p["num_gpus"], p["parallel"], p["step_time_s"]) for p in pooled[:4]
    ]

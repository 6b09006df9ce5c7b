"""``partitura sizing``: a POST /v1/sizing body in, the same document out, without a server."""

from __future__ import annotations

import io
import json

import pytest

from app import cli


def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, env={}, out=out, err=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_sizing_a_deadline_on_a_node_type():
    body = {
        "family": "gpt3-1.3b", "cluster": "dgx-h100", "num_gpus": 8,
        "training": {"global_batch_size": 256, "seq_length": 2048}, "budget": {"deadline_s": 86400},
    }
    code, out, err = run(["sizing", "-"], stdin=json.dumps(body))
    assert (code, err) == (0, "")
    sizing = json.loads(out)
    assert sizing["budget_gpu_hours"] == 8 * 24
    assert sizing["time_to_train_s"] == pytest.approx(86400, rel=1e-6) and sizing["time_to_train_s"] <= 86400
    assert sizing["gpu_hour_price_usd"] == 12.29  # dgx-h100-x1, the first catalog cluster of the node type
    assert sizing["cost_usd"] == pytest.approx(8 * 24 * 12.29, rel=1e-6)


def test_sizing_with_neither_budget_nor_model_names_the_field():
    body = {"cluster": "dgx-h100", "num_gpus": 8, "training": {"global_batch_size": 256, "seq_length": 2048}}
    code, out, err = run(["sizing", "-"], stdin=json.dumps(body))
    assert (code, out) == (2, "")
    assert json.loads(err)["errors"][0]["field"] == "body.budget"

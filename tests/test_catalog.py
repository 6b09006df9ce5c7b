"""The catalog package: calibration overrides from the environment."""

from __future__ import annotations

import json
import os

import catalog
from catalog.loader import OVERRIDES_ENV


def _override(path, saturation_dim: float) -> str:
    document = {"gpus": [{"name": "h100-sxm5-80gb", "gemm_saturation_dim": saturation_dim,
                          "sources": {"gemm_saturation_dim": f"test override {saturation_dim}"}}]}
    path.write_text(json.dumps(document))
    return str(path)


def test_changing_the_overrides_variable_in_a_process_takes_effect(tmp_path, monkeypatch):
    monkeypatch.delenv(OVERRIDES_ENV, raising=False)
    builtin = catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim
    first = _override(tmp_path / "first.json", 96.0)
    second = _override(tmp_path / "second.json", 48.0)

    monkeypatch.setenv(OVERRIDES_ENV, first)
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == 96.0
    assert catalog.get_entry("gpus", "h100-sxm5-80gb")["sources"]["gemm_saturation_dim"] == "test override 96.0"

    monkeypatch.setenv(OVERRIDES_ENV, second)
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == 48.0

    monkeypatch.setenv(OVERRIDES_ENV, os.pathsep.join([second, first]))  # later files win
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == 96.0

    monkeypatch.delenv(OVERRIDES_ENV)
    assert catalog.get_gpu("h100-sxm5-80gb").gemm_saturation_dim == builtin
    h100 = {e["name"]: e for e in catalog.list_entries("gpus")}["h100-sxm5-80gb"]
    assert "test override" not in h100["sources"].get("gemm_saturation_dim", "")

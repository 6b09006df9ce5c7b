"""bench/gemm_shapes.py: the catalog's GEMM efficiencies against the measurements they come from,
and the cost model's GEMM formula evaluated at the shapes those measurements were taken at."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import catalog
from bench import gemm_shapes
from solver.spec.training import Precision

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def results():
    return gemm_shapes.checks()


def test_every_row_is_a_catalog_gpus_own_measurement():
    rows = gemm_shapes.load_rows()
    assert len(rows) == 14
    assert len({(r["gpu"], r["precision"]) for r in rows}) == len(rows)
    for row in rows:
        entry = catalog.get_entry("gpus", row["gpu"])
        # The catalog cites this table (stas00's maximum achievable matmul) or the row's own source.
        assert ("AMD ROCm blogs" if row.get("source") else "stas00") in (row.get("source") or entry["sources"]["gemm_efficiency"])
        assert "stas00" in entry["sources"]["gemm_efficiency"], row["gpu"]
        assert f"{row['mamf_tflops']:g}" in entry["sources"]["gemm_efficiency"], row
        assert all(isinstance(d, int) and d > 0 for d in row["best_shape"])


def test_the_catalog_efficiency_is_the_measured_mamf_over_the_peak(results):
    """gemm_efficiency x peak gives the table's MAMF back, to its three-digit rounding."""
    for r in results:
        assert r.catalog_tflops == pytest.approx(r.mamf_tflops, rel=1e-3), (r.gpu, r.precision)


def test_the_shape_factors_are_the_formulas_own(results):
    """At the best shape the formula's rate over the MAMF is the two shape factors (the efficiency
    cancels): H200 fp8 at 1280 x 4096 x 12032 is 5 x 32 = 160 output tiles of 256 x 128 on 132 SMs,
    1.21 waves of which the second is 21% full, and k / (k + 192) = 12032 / 12224."""
    for r in results:
        assert r.ratio == pytest.approx(r.wave_factor * r.k_factor * r.catalog_tflops / r.mamf_tflops, rel=1e-9)
    h200 = next(r for r in results if r.gpu == "h200-sxm-141gb" and r.precision is Precision.FP8)
    assert h200.wave_factor == pytest.approx((160 / 132) / 2)
    assert h200.k_factor == pytest.approx(12032 / 12224)
    assert h200.ratio == pytest.approx(0.5965, abs=5e-4)
    # A shape of whole waves and long k keeps nearly all of it: MI355X, 48 x 64 = 3072 tiles on 256 CUs.
    mi355x = next(r for r in results if r.gpu == "mi355x")
    assert mi355x.wave_factor == 1.0 and mi355x.ratio == pytest.approx(8192 / (8192 + 192), rel=2e-3)


def test_the_cli_prints_the_table_and_names_the_measurements_it_cannot_reproduce():
    out = subprocess.run(
        [sys.executable, "bench/gemm_shapes.py"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["gpu", "prec", "best"]
    assert sum(line.startswith(("a100", "h100", "h200", "b200", "b300", "gb200", "mi3")) for line in lines) == 14
    assert "h200-sxm-141gb fp8 0.596" in lines[-1]

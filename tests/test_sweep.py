"""The sweep library (solver/sweep): grid expansion and its bound, the power-law fit, scaling
efficiency, the knee, the Pareto front, the SVG charts, and a point planned through the search."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

import catalog
from solver.search.loop import search
from solver.search.request import SearchRequest
from solver.spec.errors import SpecError
from solver.spec.training import TrainingSpec
from solver.sweep.analysis import PointResult, analyse, fit_power_law, knee, pareto_front, scaling_efficiency
from solver.sweep.chart import pareto_chart, scaling_chart
from solver.sweep.grid import MAX_SWEEP_POINTS, GridPoint, GridRange, axis_values, expand
from solver.sweep.run import plan_point

SVG = "{http://www.w3.org/2000/svg}"
# The seeds' MLPerf BERT law: 228.3 * p^-0.7392 minutes.
SEED_A_S = 228.3 * 60
SEED_B = 0.7392


# ----------------------------------------------------------------------------- grid


def test_a_geometric_range_from_8_to_32768_is_the_13_powers_of_two():
    assert axis_values(GridRange(8, 32768, factor=2), "num_gpus") == [2**k for k in range(3, 16)]


def test_an_arithmetic_range_and_a_list_are_sorted_and_deduplicated():
    assert axis_values(GridRange(256, 1024, step=256), "b") == [256, 512, 768, 1024]
    assert axis_values([64, 8, 8, 16], "b") == [8, 16, 64]
    assert axis_values(32, "b") == [32]


def test_expansion_orders_by_cluster_then_batch_then_gpus():
    points = expand(["a", "b"], [16, 8], [512, 256])
    assert points[:3] == [GridPoint("a", 8, 256), GridPoint("a", 16, 256), GridPoint("a", 8, 512)]
    assert len(points) == 8 and points[-1] == GridPoint("b", 16, 512)


@pytest.mark.parametrize(
    ("axis", "field", "reason"),
    [
        (GridRange(8, 4, factor=2), "num_gpus.max", "below min"),
        (GridRange(8, 64), "num_gpus", "exactly one of step"),
        (GridRange(8, 64, step=8, factor=2), "num_gpus", "exactly one of step"),
        (GridRange(8, 64, factor=1), "num_gpus.factor", "at least 2"),
        (GridRange(0, 64, step=1), "num_gpus.min", "at least 1"),
        ([], "num_gpus", "empty"),
        ([8, 0], "num_gpus", "positive integers"),
    ],
)
def test_a_malformed_axis_names_its_field(axis, field, reason):
    with pytest.raises(SpecError) as error:
        expand(["a"], axis, 512)
    assert error.value.field == field and reason in error.value.reason


def test_a_sweep_larger_than_the_bound_is_refused_without_being_built():
    assert len(expand(["a"], GridRange(1, MAX_SWEEP_POINTS, step=1), 512)) == MAX_SWEEP_POINTS
    with pytest.raises(SpecError) as error:
        expand(["a"], GridRange(1, 10**12, step=1), 512)
    assert error.value.field == "num_gpus" and "1000000000000 points" in error.value.reason
    with pytest.raises(SpecError) as error:
        expand(["a", "b", "c"], GridRange(8, 32768, factor=2), GridRange(256, 1024, step=256))
    assert error.value.field == "num_gpus" and "156 points (3 clusters x 13 GPU counts x 4 batch sizes)" in error.value.reason


# ----------------------------------------------------------------------------- analysis


def test_the_power_law_fit_recovers_exact_data():
    counts = [8, 16, 32, 64, 128, 256, 512, 1024]
    times = [SEED_A_S * p**-SEED_B for p in counts]
    fit = fit_power_law(counts, times)
    assert fit is not None
    assert fit.a_s == pytest.approx(SEED_A_S, rel=1e-12)
    assert fit.b == pytest.approx(SEED_B, rel=1e-12)
    assert fit.r_squared == pytest.approx(1.0, abs=1e-12)
    assert fit.num_points == 8
    assert fit.time_s(64) == pytest.approx(SEED_A_S * 64**-SEED_B, rel=1e-12)


def test_the_power_law_fit_of_scattered_data_has_the_least_squares_slope_and_r_squared():
    # ln t = [ln 100, ln 60, ln 30] at ln p = [0, ln 2, ln 4]: slope by hand.
    counts, times = [1, 2, 4], [100.0, 60.0, 30.0]
    xs, ys = [math.log(p) for p in counts], [math.log(t) for t in times]
    mx, my = sum(xs) / 3, sum(ys) / 3
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    residual = sum((y - (my + slope * (x - mx))) ** 2 for x, y in zip(xs, ys))
    total = sum((y - my) ** 2 for y in ys)
    fit = fit_power_law(counts, times)
    assert fit is not None
    assert fit.b == pytest.approx(-slope, rel=1e-12) and fit.b == pytest.approx(0.8685, abs=1e-4)
    assert fit.r_squared == pytest.approx(1 - residual / total, rel=1e-12) and fit.r_squared < 1


def test_no_fit_from_a_single_gpu_count():
    assert fit_power_law([8], [10.0]) is None
    assert fit_power_law([8, 8], [10.0, 11.0]) is None


def test_scaling_efficiency_is_throughput_per_gpu_against_the_smallest_point():
    assert scaling_efficiency([8, 16, 32], [800.0, 1520.0, 2400.0]) == pytest.approx([1.0, 0.95, 0.75])


def test_the_knee_is_the_first_count_below_the_threshold():
    counts = [8, 16, 32, 64, 128]
    efficiency = [1.0, 0.95, 0.85, 0.79, 0.9]
    assert knee(counts, efficiency, 0.8) == 64
    assert knee(counts, efficiency, 0.5) is None
    assert knee(counts, efficiency, 0.96) == 16


def test_the_pareto_front_keeps_only_undominated_points_fastest_first():
    times = [1.0, 2.0, 3.0, 4.0, 2.0, 5.0]
    costs = [10.0, 5.0, 6.0, 1.0, 5.0, 1.0]
    # 2 is beaten by 1 (faster and cheaper); 4 duplicates 1; 5 ties 3 on cost but is slower.
    assert pareto_front(times, costs) == [0, 1, 3]


def _point(cluster: str, num_gpus: int, tokens_per_s: float | None, price: float | None = 2.0, batch: int = 512) -> PointResult:
    if tokens_per_s is None:
        return PointResult(cluster, num_gpus, batch, feasible=False)
    tokens = 1e9
    return PointResult(
        cluster, num_gpus, batch, feasible=True, step_time_s=batch * 1024 / tokens_per_s, tokens_per_s=tokens_per_s,
        mfu=0.4, time_to_train_s=tokens / tokens_per_s, gpu_hour_price_usd=price,
    )


def test_analyse_groups_series_and_ranks_the_front_over_gpu_types():
    points = [
        _point("slow", 8, None),  # infeasible: not in any series
        _point("slow", 16, 1600.0),
        _point("slow", 32, 3040.0),
        _point("slow", 64, 4480.0),
        _point("fast", 8, 2000.0, price=4.0),
        _point("fast", 16, 3600.0, price=4.0),
        _point("unpriced", 8, 5000.0, price=None),
    ]
    analysis = analyse(points, efficiency_threshold=0.8)
    assert analysis.fitted_quantity == "time_to_train_s"
    by_cluster = {s.cluster: s for s in analysis.series}
    assert [s.cluster for s in analysis.series] == ["slow", "fast", "unpriced"]
    slow = by_cluster["slow"]
    assert [p.num_gpus for p in slow.points] == [16, 32, 64]
    assert [p.efficiency for p in slow.points] == pytest.approx([1.0, 0.95, 0.7])
    assert slow.knee_num_gpus == 64
    assert by_cluster["fast"].knee_num_gpus is None
    assert by_cluster["unpriced"].fit is None
    # time (s) and cost (USD) of each priced point: 1e9 tokens / tps, GPUs x hours x price.
    costs = {i: p.cost_usd for i, p in enumerate(points) if p.cost_usd is not None}
    assert costs[1] == pytest.approx(16 * (1e9 / 1600) / 3600 * 2.0)
    assert costs[4] == pytest.approx(8 * (1e9 / 2000) / 3600 * 4.0)
    # slow@16: 625000 s, 5556 USD; slow@32: 328947 s, 5848 USD; slow@64: 223214 s, 7937 USD;
    # fast@8: 500000 s, 4444 USD (beats slow@16 on both); fast@16: 277778 s, 4938 USD (beats slow@32).
    assert analysis.pareto == (3, 5, 4)


def test_a_sweep_without_a_token_budget_fits_the_step_time():
    points = [PointResult("a", p, 512, True, step_time_s=8.0 / p**0.9, tokens_per_s=p**0.9) for p in (8, 16, 32)]
    analysis = analyse(points)
    assert analysis.fitted_quantity == "step_time_s" and analysis.pareto == ()
    fit = analysis.series[0].fit
    assert fit is not None and fit.b == pytest.approx(0.9, rel=1e-12) and fit.a_s == pytest.approx(8.0, rel=1e-12)


# ----------------------------------------------------------------------------- charts


def _svg(text: str) -> ET.Element:
    assert "<script" not in text
    return ET.fromstring(text)


def _texts(element: ET.Element) -> list[str]:
    return [t.text or "" for t in element.iter(f"{SVG}text")]


def _exact_seed_points() -> list[PointResult]:
    tokens = 1e9
    points = []
    for p in (8, 16, 32, 64, 128):
        time_s = SEED_A_S * p**-SEED_B
        points.append(PointResult("dgx-a100", p, 512, True, step_time_s=1.0, tokens_per_s=tokens / time_s, mfu=0.4,
                                  time_to_train_s=time_s, gpu_hour_price_usd=5.0))
    return points


def test_the_scaling_chart_has_axes_units_series_fit_and_efficiency_labels():
    points = _exact_seed_points()
    root = _svg(scaling_chart(analyse(points), "bert-large"))
    assert root.tag == f"{SVG}svg"
    assert "bert-large" in (root.findtext(f"{SVG}title") or "")
    x_axis, y_axis = root.find(f".//{SVG}g[@id='x-axis']"), root.find(f".//{SVG}g[@id='y-axis']")
    assert x_axis is not None and y_axis is not None
    assert _texts(x_axis) == ["8", "16", "32", "64", "128"]  # powers of two over the counts
    # hours: 45.6 min at 8 GPUs down to 6.3 min at 128, one decade with its 2x and 5x marks
    assert _texts(y_axis) == ["0.1", "0.2", "0.5", "1"]
    assert root.findtext(f".//{SVG}text[@id='x-label']") == "GPUs (log scale)"
    assert root.findtext(f".//{SVG}text[@id='y-label']") == "time to train (hours, log scale)"
    series = root.findall(f".//{SVG}g[@class='series']")
    assert [s.get("data-name") for s in series] == ["dgx-a100", "fit: b = 0.739, R\u00b2 = 1.000"]
    assert len(series[0].findall(f"{SVG}circle")) == 5
    labels = _texts(series[0])
    # efficiency (T_8 x 8) / (T_p x p) = (8 / p)^(1 - b); below 80% first at 32 GPUs
    assert labels == ["100%", "83%", "70% knee", "58%", "49%"]
    assert _texts(root.find(f".//{SVG}g[@id='legend']")) == ["dgx-a100", "fit: b = 0.739, R\u00b2 = 1.000"]


def test_the_pareto_chart_shows_each_priced_point_by_cluster_and_the_front():
    points = [_point("slow", 16, 1600.0), _point("slow", 32, 3040.0), _point("fast", 8, 2000.0, price=4.0), _point("none", 8, None)]
    analysis = analyse(points)
    root = _svg(pareto_chart(points, analysis.pareto, "gpt3-1.3b"))
    assert root.findtext(f".//{SVG}text[@id='x-label']") == "time to train (hours, log scale)"
    assert root.findtext(f".//{SVG}text[@id='y-label']") == "cost (USD, log scale)"
    series = {s.get("data-name"): s for s in root.findall(f".//{SVG}g[@class='series']")}
    assert list(series) == ["slow", "fast", "none", "Pareto front"]
    assert _texts(series["slow"]) == ["16", "32"] and _texts(series["fast"]) == ["8"] and _texts(series["none"]) == []
    front_line = series["Pareto front"].find(f"{SVG}polyline")
    assert front_line is not None and len((front_line.get("points") or "").split()) == len(analysis.pareto) == 2
    assert _texts(root.find(f".//{SVG}g[@id='x-axis']")) == ["10", "100", "1,000"]
    assert _texts(root.find(f".//{SVG}g[@id='y-axis']")) == ["1,000", "2,000", "5,000", "10,000"]


# ----------------------------------------------------------------------------- planning a point


def test_a_point_is_planned_as_the_search_plans_it():
    entry = catalog.get_entry("nodes", "dgx-a100-80gb")
    cluster = catalog.cluster_spec_from_dict({**entry, "num_nodes": 1, "gpu_hour_price_usd": 5.12})
    request = SearchRequest(catalog.get_model("gpt3-125m"), cluster, TrainingSpec(32, 1024, train_tokens=1e9), num_gpus=4)
    planned = plan_point(GridPoint("dgx-a100-80gb", 4, 32), request)
    best = search(request).best
    assert best is not None and planned.parallel == best.parallel
    result = planned.result
    assert result.feasible and result.num_gpus == 4
    assert result.step_time_s == best.evaluation.prediction.step_time_s
    assert result.time_to_train_s == pytest.approx(1e9 / result.tokens_per_s)
    assert result.cost_usd == pytest.approx(4 * result.time_to_train_s / 3600 * 5.12)


def test_the_sweep_library_imports_only_the_standard_library_and_the_solver():
    import ast
    import pathlib
    import sys

    paths = sorted(pathlib.Path("solver/sweep").glob("*.py"))
    assert len(paths) >= 5
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in sys.stdlib_module_names or root in {"solver", "__future__"}, (path, root)

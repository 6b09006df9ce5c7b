"""The sweep's charts as standalone SVG 1.1 text: no script, no external font or style sheet, so
a browser, an image viewer or ``xml.etree`` reads them as they are.

Both charts are log-log: GPU counts double along a scaling curve and a power law is a straight
line there. Every chart has an x and a y axis with ticks and unit labels (``id="x-axis"``,
``id="y-axis"``, ``id="x-label"``, ``id="y-label"``), a title, one ``<g class="series">`` per
series (``data-name`` is its legend text) and a legend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from solver.cost.price import SECONDS_PER_HOUR
from solver.sweep.analysis import PointResult, SweepAnalysis

WIDTH_PX, HEIGHT_PX = 760, 460
MARGIN_LEFT_PX, MARGIN_RIGHT_PX, MARGIN_TOP_PX, MARGIN_BOTTOM_PX = 80, 230, 40, 56
# Colour-blind-safe qualitative palette (Okabe and Ito 2008, "Color Universal Design").
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True)
class ChartSeries:
    name: str
    points: tuple[tuple[float, float], ...]  # (x, y), both positive
    labels: tuple[str, ...] = ()  # one per point, or none
    line: bool = True
    markers: bool = True
    dashed: bool = False


class _LogAxis:
    """A log axis over [lo, hi] (extended to whole powers of ``base``) onto [start_px, end_px]."""

    def __init__(self, values: Sequence[float], base: int, start_px: float, end_px: float) -> None:
        lo, hi = min(values), max(values)
        self.base = base
        self.lo_exp = math.floor(math.log(lo, base) + 1e-9)
        self.hi_exp = max(math.ceil(math.log(hi, base) - 1e-9), self.lo_exp + 1)
        self.start_px, self.end_px = start_px, end_px

    def px(self, value: float) -> float:
        fraction = (math.log(value, self.base) - self.lo_exp) / (self.hi_exp - self.lo_exp)
        return self.start_px + fraction * (self.end_px - self.start_px)

    def ticks(self) -> list[float]:
        """Whole powers of the base (every other one past 10 ticks); a single decade also gets
        its 2x and 5x marks."""
        exponents = list(range(self.lo_exp, self.hi_exp + 1))
        stride = 1 if len(exponents) <= 10 else 2
        ticks = [float(self.base) ** e for e in exponents[::stride]]
        if self.base == 10 and self.hi_exp - self.lo_exp <= 1:
            ticks += [m * 10.0**e for e in exponents[:-1] for m in (2, 5)]
        return sorted(ticks)


def _number(value: float) -> str:
    if value >= 1e6 or value < 1e-3:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if value >= 1:
        return f"{value:,.0f}" if value == round(value) else f"{value:,.3g}"
    return f"{value:.3g}"


def _text(x: float, y: float, content: str, **attributes: str) -> str:
    extra = "".join(f" {name.replace('_', '-')}={quoteattr(value)}" for name, value in attributes.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" {FONT}{extra}>{escape(content)}</text>'


def log_log_chart(
    title: str, x_label: str, y_label: str, series: Sequence[ChartSeries], x_base: int = 10, y_base: int = 10
) -> str:
    """A standalone SVG document; ``series`` with no points are listed in the legend only."""
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    plot_right, plot_bottom = WIDTH_PX - MARGIN_RIGHT_PX, HEIGHT_PX - MARGIN_BOTTOM_PX
    x_axis = _LogAxis(xs or [1.0, x_base], x_base, MARGIN_LEFT_PX, plot_right)
    y_axis = _LogAxis(ys or [1.0, y_base], y_base, plot_bottom, MARGIN_TOP_PX)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH_PX}" height="{HEIGHT_PX}"'
        f' viewBox="0 0 {WIDTH_PX} {HEIGHT_PX}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH_PX}" height="{HEIGHT_PX}" fill="#ffffff"/>',
        _text(MARGIN_LEFT_PX, 22, title, id="chart-title", font_weight="bold"),
        f'<rect x="{MARGIN_LEFT_PX}" y="{MARGIN_TOP_PX}" width="{plot_right - MARGIN_LEFT_PX}"'
        f' height="{plot_bottom - MARGIN_TOP_PX}" fill="none" stroke="#cccccc"/>',
    ]
    out.append('<g id="x-axis" class="axis">')
    out.append(f'<line x1="{MARGIN_LEFT_PX}" y1="{plot_bottom}" x2="{plot_right}" y2="{plot_bottom}" stroke="#000000"/>')
    for tick in x_axis.ticks():
        x = x_axis.px(tick)
        out.append(
            f'<g class="tick"><line x1="{x:.1f}" y1="{plot_bottom}" x2="{x:.1f}" y2="{plot_bottom + 5}" stroke="#000000"/>'
            f'<line x1="{x:.1f}" y1="{MARGIN_TOP_PX}" x2="{x:.1f}" y2="{plot_bottom}" stroke="#eeeeee"/>'
            + _text(x, plot_bottom + 18, _number(tick), text_anchor="middle")
            + "</g>"
        )
    out.append("</g>")
    out.append(_text((MARGIN_LEFT_PX + plot_right) / 2, HEIGHT_PX - 12, x_label, id="x-label", text_anchor="middle"))
    out.append('<g id="y-axis" class="axis">')
    out.append(f'<line x1="{MARGIN_LEFT_PX}" y1="{MARGIN_TOP_PX}" x2="{MARGIN_LEFT_PX}" y2="{plot_bottom}" stroke="#000000"/>')
    for tick in y_axis.ticks():
        y = y_axis.px(tick)
        out.append(
            f'<g class="tick"><line x1="{MARGIN_LEFT_PX - 5}" y1="{y:.1f}" x2="{MARGIN_LEFT_PX}" y2="{y:.1f}" stroke="#000000"/>'
            f'<line x1="{MARGIN_LEFT_PX}" y1="{y:.1f}" x2="{plot_right}" y2="{y:.1f}" stroke="#eeeeee"/>'
            + _text(MARGIN_LEFT_PX - 8, y + 4, _number(tick), text_anchor="end")
            + "</g>"
        )
    out.append("</g>")
    middle_y = (MARGIN_TOP_PX + plot_bottom) / 2
    out.append(
        _text(18, middle_y, y_label, id="y-label", text_anchor="middle", transform=f"rotate(-90 18 {middle_y:.1f})")
    )
    for index, item in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        coords = [(x_axis.px(x), y_axis.px(y)) for x, y in item.points]
        out.append(f'<g class="series" id="series-{index}" data-name={quoteattr(item.name)}>')
        if item.line and len(coords) > 1:
            dash = ' stroke-dasharray="6 4"' if item.dashed else ""
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        if item.markers:
            out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>' for x, y in coords)
        for (x, y), label in zip(coords, item.labels):
            out.append(_text(x + 5, y - 6, label, **{"class": "point-label", "fill": colour}))
        out.append("</g>")
    out.append('<g id="legend">')
    for index, item in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        y = MARGIN_TOP_PX + 8 + 18 * index
        dash = ' stroke-dasharray="6 4"' if item.dashed else ""
        out.append(
            f'<line x1="{plot_right + 12}" y1="{y}" x2="{plot_right + 32}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>'
            + _text(plot_right + 38, y + 4, item.name, **{"class": "legend-entry"})
        )
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _series_name(cluster: str, global_batch_size: int, several_batches: bool) -> str:
    return f"{cluster}, batch {global_batch_size}" if several_batches else cluster


def scaling_chart(analysis: SweepAnalysis, model_name: str) -> str:
    """Time to train (hours; the step time in seconds when the request had no token budget)
    against GPUs, one observed series per cluster and batch (labelled with each point's scaling
    efficiency) and its fitted power law, dashed."""
    several = len({s.global_batch_size for s in analysis.series}) > 1
    to_train = analysis.fitted_quantity == "time_to_train_s"
    scale = 1 / SECONDS_PER_HOUR if to_train else 1.0
    series: list[ChartSeries] = []
    for item in analysis.series:
        name = _series_name(item.cluster, item.global_batch_size, several)
        labels = tuple(
            f"{p.efficiency:.0%}" + (" knee" if p.num_gpus == item.knee_num_gpus else "") for p in item.points
        )
        series.append(ChartSeries(name, tuple((p.num_gpus, p.time_s * scale) for p in item.points), labels))
        if item.fit is not None:
            ends = (item.points[0].num_gpus, item.points[-1].num_gpus)
            series.append(
                ChartSeries(
                    f"fit: b = {item.fit.b:.3f}, R\u00b2 = {item.fit.r_squared:.3f}",
                    tuple((p, item.fit.time_s(p) * scale) for p in ends),
                    markers=False,
                    dashed=True,
                )
            )
    y_label = "time to train (hours, log scale)" if to_train else "step time (s, log scale)"
    return log_log_chart(
        f"{model_name}: scaling (efficiency against the smallest point; knee below {analysis.efficiency_threshold:.0%})",
        "GPUs (log scale)", y_label, series, x_base=2,
    )


def pareto_chart(points: Sequence[PointResult], pareto: Sequence[int], model_name: str) -> str:
    """Cost (USD) against time to train (hours) of every priced point, by cluster, each labelled
    with its GPU count; the Pareto front joined by a line."""
    clusters: list[str] = []
    for p in points:
        if p.cluster not in clusters:
            clusters.append(p.cluster)
    series = []
    for cluster in clusters:
        members = [
            p for p in points
            if p.cluster == cluster and p.feasible and p.time_to_train_s is not None and p.cost_usd is not None
        ]
        series.append(
            ChartSeries(
                cluster,
                tuple(((p.time_to_train_s or 0.0) / SECONDS_PER_HOUR, p.cost_usd or 0.0) for p in members),
                tuple(f"{p.num_gpus}" for p in members),
                line=False,
            )
        )
    front = [points[i] for i in pareto]
    series.append(
        ChartSeries(
            "Pareto front",
            tuple(((p.time_to_train_s or 0.0) / SECONDS_PER_HOUR, p.cost_usd or 0.0) for p in front),
            markers=False,
        )
    )
    return log_log_chart(
        f"{model_name}: cost against time to train (labels: GPUs)",
        "time to train (hours, log scale)", "cost (USD, log scale)", series,
    )

"""A sweep as a plain-text table (what ``partitura sweep`` prints)."""

from __future__ import annotations

from app.sweeps import schemas
from solver.cost.price import SECONDS_PER_HOUR

HEADERS = ("cluster", "GPUs", "batch", "status", "dp x tp x pp x cp", "step s", "tokens/s", "MFU", "train h", "cost USD", "eff.", "front")


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(point: schemas.SweepPointOut) -> tuple[str, ...]:
    parallel = point.parallel
    split = "-" if parallel is None else f"{parallel.dp_size} x {parallel.tp_size} x {parallel.pp_size} x {parallel.cp_size}"
    hours = None if point.time_to_train_s is None else point.time_to_train_s / SECONDS_PER_HOUR
    return (
        point.cluster,
        str(point.num_gpus),
        str(point.global_batch_size),
        point.status,
        split,
        _number(point.step_time_s, ".3f"),
        _number(point.tokens_per_s, ",.0f"),
        _number(point.mfu, ".1%"),
        _number(hours, ",.1f"),
        _number(point.cost_usd, ",.0f"),
        _number(point.scaling_efficiency, ".0%"),
        "*" if point.on_pareto_front else "",
    )


def sweep_table(sweep: schemas.Sweep) -> str:
    """One row per point, then one line per series (its power law and knee), the prices and
    where the charts are."""
    rows = [HEADERS, *(_row(point) for point in sweep.points)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths))) for row in rows]
    lines.append("")
    for point in sweep.points:
        if point.note is not None:
            lines.append(f"{point.cluster}, {point.num_gpus} GPUs, batch {point.global_batch_size}: {point.note}")
    quantity = "time to train" if sweep.fitted_quantity == "time_to_train_s" else "step time"
    for series in sweep.series:
        fit = "no fit (fewer than two feasible GPU counts)" if series.fit is None else (
            f"{quantity} = {series.fit.a_s:.4g} s x p^-{series.fit.b:.4f} (R^2 {series.fit.r_squared:.4f}, {series.fit.num_points} points)"
        )
        knee = "none" if series.knee_num_gpus is None else f"{series.knee_num_gpus} GPUs"
        lines.append(
            f"{series.cluster}, batch {series.global_batch_size}: {fit}; knee (efficiency < {sweep.efficiency_threshold:.0%}): {knee}"
        )
    for price in sweep.prices:
        shown = "no price" if price.gpu_hour_price_usd is None else f"${price.gpu_hour_price_usd:.2f} per GPU-hour"
        lines.append(f"{price.cluster}: {shown} ({price.source})")
    lines.append(f"* on the Pareto front of time to train vs cost; sweep {sweep.id}")
    return "\n".join(lines) + "\n"

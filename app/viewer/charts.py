"""The plan page's charts as inline SVG, drawn from a stored plan's JSON (``app.plans.schemas``).

Every drawn mark carries the number it stands for (``data-*`` attributes, a ``<title>``), and
each chart has a text alternative (``role="img"`` with a title and a description; the page puts
a table of the same numbers beside it). Shapes differ by pattern and lightness as well as by
colour, so the charts read in greyscale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from app.evaluations.schemas import PipelineStage, StepBreakdownOut
from app.viewer.schedule import Pass, Schedule

WIDTH_PX = 960
# The most chunk passes the timeline draws one by one (a 16-stage pipeline of 128 micro-batches);
# a larger schedule is summarised in words (a browser slows past some ten thousand shapes).
MAX_DRAWN_PASSES = 4096

# Memory kinds in the order of ``solver.cost.result.MEMORY_KEYS``: label, fill, pattern.
MEMORY_KINDS: dict[str, tuple[str, str, str]] = {
    "weights": ("weights", "#4e79a7", "solid"),
    "gradients": ("gradients", "#f28e2b", "diagonal"),
    "optimizer_states": ("optimizer states", "#e15759", "cross"),
    "activations": ("activations", "#76b7b2", "dots"),
    "embedding_and_logits": ("embedding and logits", "#59a14f", "vertical"),
    "zero3_gather_buffers": ("ZeRO-3 gather buffers", "#edc948", "horizontal"),
    "optimizer_step_copy": ("gradients' copy after backward", "#b07aa1", "grid"),
    "reserve": ("reserve", "#bab0ac", "antidiagonal"),
}
# Step-time parts in the order of ``solver.cost.result.BREAKDOWN_KEYS``: label, fill, pattern.
STEP_PARTS: dict[str, tuple[str, str, str]] = {
    "compute_s": ("compute", "#4e79a7", "solid"),
    "recompute_s": ("recompute", "#a0cbe8", "diagonal"),
    "tp_comm_s": ("TP/CP communication", "#f28e2b", "cross"),
    "pp_comm_s": ("PP communication", "#ffbe7d", "dots"),
    "dp_comm_exposed_s": ("exposed DP communication", "#e15759", "vertical"),
    "grad_accumulation_s": ("gradient accumulation", "#76b7b2", "horizontal"),
    "bubble_s": ("pipeline bubble", "#eeeeee", "antidiagonal"),
    "optimizer_s": ("optimizer step", "#59a14f", "solid"),
}
FORWARD_FILL, BACKWARD_FILL = "#a0cbe8", "#1f4e79"


def _number(value: float) -> str:
    """A float as an attribute: exactly the JSON's value (repr round-trips)."""
    return repr(float(value))


def nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2 or 5 times a power of ten) that cuts ``span`` into about ``ticks``."""
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _pattern_defs(prefix: str, styles: dict[str, tuple[str, str, str]]) -> str:
    """One ``<pattern>`` per entry: its colour under black strokes of its own texture."""
    strokes = {
        "solid": "",
        "diagonal": '<path d="M0,8 L8,0" stroke="#000" stroke-opacity="0.45" stroke-width="1.2"/>',
        "antidiagonal": '<path d="M0,0 L8,8" stroke="#000" stroke-opacity="0.45" stroke-width="1.2"/>',
        "cross": '<path d="M0,8 L8,0 M0,0 L8,8" stroke="#000" stroke-opacity="0.35" stroke-width="1"/>',
        "dots": '<circle cx="4" cy="4" r="1.4" fill="#000" fill-opacity="0.5"/>',
        "vertical": '<path d="M4,0 L4,8" stroke="#000" stroke-opacity="0.45" stroke-width="1.2"/>',
        "horizontal": '<path d="M0,4 L8,4" stroke="#000" stroke-opacity="0.45" stroke-width="1.2"/>',
        "grid": '<path d="M0,4 L8,4 M4,0 L4,8" stroke="#000" stroke-opacity="0.35" stroke-width="1"/>',
    }
    out = []
    for key, (_label, fill, texture) in styles.items():
        out.append(
            f'<pattern id="{prefix}-{key}" width="8" height="8" patternUnits="userSpaceOnUse">'
            f'<rect width="8" height="8" fill="{fill}"/>{strokes[texture]}</pattern>'
        )
    return "".join(out)


def _legend(prefix: str, styles: dict[str, tuple[str, str, str]], keys: list[str], y: float) -> str:
    out, x = [], 0.0
    for key in keys:
        label = styles[key][0]
        if x + 30 + 7 * len(label) > WIDTH_PX:
            x, y = 0.0, y + 18
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="14" height="12" fill="url(#{prefix}-{key})" stroke="#333"/>'
            f'<text x="{x + 18:.1f}" y="{y + 10:.1f}" font-size="12">{escape(label)}</text>'
        )
        x += 30 + 7 * len(label)
    return "".join(out)


def _svg(chart: str, title: str, description: str, height: float, body: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{chart}" role="img"'
        f' aria-labelledby="{chart}-title {chart}-desc" width="{WIDTH_PX}" height="{height:.0f}"'
        f' viewBox="0 0 {WIDTH_PX} {height:.0f}" font-family="sans-serif">'
        f'<title id="{chart}-title">{escape(title)}</title><desc id="{chart}-desc">{escape(description)}</desc>'
        f"{body}</svg>"
    )


@dataclass(frozen=True)
class TimelineFacts:
    """What the timeline is drawn from, all read from the plan's JSON."""

    slot_s: float  # the slowest stage's time per micro-batch: the cost model's slot
    stage_times_s: list[float]  # each stage's own time per micro-batch
    bubble_s: float  # prediction.breakdown_s.bubble_s


def timeline_svg(schedule: Schedule, facts: TimelineFacts) -> str:
    """Stages as rows, time to the right: one bar per chunk pass (forward light, backward dark
    and hatched), placed in the schedule's slots of ``facts.slot_s``; a stage faster than the
    slowest fills only its share of each slot. Idle time (the bubble) is the hatched ground."""
    p = schedule.pp_size
    label_px = 70.0
    row_px = 26.0 if p <= 16 else max(8.0, 420.0 / p)
    plot_px = WIDTH_PX - label_px - 10
    total_s = schedule.total_slots * facts.slot_s
    scale = plot_px / total_s
    parts = [
        "<defs>",
        '<pattern id="tl-idle" width="6" height="6" patternUnits="userSpaceOnUse">'
        '<rect width="6" height="6" fill="#ffffff"/><path d="M0,6 L6,0" stroke="#c8c8c8" stroke-width="1"/></pattern>',
        f'<pattern id="tl-backward" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="{BACKWARD_FILL}"/>'
        '<path d="M0,6 L6,0" stroke="#ffffff" stroke-opacity="0.35" stroke-width="1"/></pattern>',
        "</defs>",
    ]
    for stage in range(p):
        y = stage * row_px
        parts.append(
            f'<text x="{label_px - 6:.1f}" y="{y + row_px * 0.65:.1f}" font-size="12" text-anchor="end">stage {stage}</text>'
            f'<rect class="idle" x="{label_px:.1f}" y="{y + 1:.1f}" width="{plot_px:.1f}" height="{row_px - 2:.1f}"'
            f' fill="url(#tl-idle)" stroke="#999" stroke-width="0.5"><title>stage {stage}: idle'
            f" {schedule.idle_slots(stage) * facts.slot_s * 1e3:.1f} ms of the step (bubble)</title></rect>"
        )
    v = schedule.virtual_stages
    for item in schedule.passes:
        share = facts.stage_times_s[item.stage] / facts.slot_s
        x = label_px + item.start_slot * facts.slot_s * scale
        width = max(item.length_slot * facts.slot_s * share * scale, 0.5)
        y = item.stage * row_px + 3
        forward = item.kind is Pass.FORWARD
        fill = FORWARD_FILL if forward else "url(#tl-backward)"
        chunk = f", chunk {item.chunk}" if v > 1 else ""
        duration_ms = item.length_slot * facts.stage_times_s[item.stage] * 1e3
        parts.append(
            f'<rect class="pass {item.kind.value}" data-stage="{item.stage}" data-micro-batch="{item.micro_batch}"'
            f' data-chunk="{item.chunk}" data-pass="{item.kind.value}" x="{x:.2f}" y="{y:.1f}" width="{width:.2f}"'
            f' height="{row_px - 6:.1f}" fill="{fill}" stroke="#0b2a45" stroke-width="0.5">'
            f"<title>stage {item.stage}, micro-batch {item.micro_batch}{chunk}: {item.kind.value}, {duration_ms:.2f} ms</title></rect>"
        )
        if width >= 14 and row_px >= 16:
            colour = "#000" if forward else "#fff"
            parts.append(
                f'<text x="{x + width / 2:.2f}" y="{y + (row_px - 6) * 0.72:.1f}" font-size="10" text-anchor="middle"'
                f' fill="{colour}" aria-hidden="true">{item.micro_batch}</text>'
            )
    axis_y = p * row_px + 4
    parts.append(f'<line x1="{label_px:.1f}" y1="{axis_y:.1f}" x2="{label_px + plot_px:.1f}" y2="{axis_y:.1f}" stroke="#333"/>')
    step_ms = nice_step(total_s * 1e3)
    for i in range(int(total_s * 1e3 / step_ms) + 1):
        x = label_px + i * step_ms / 1e3 * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{axis_y:.1f}" x2="{x:.1f}" y2="{axis_y + 4:.1f}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{axis_y + 16:.1f}" font-size="11" text-anchor="middle">{i * step_ms:g} ms</text>'
        )
    legend_y = axis_y + 22
    parts.append(
        f'<rect x="{label_px:.1f}" y="{legend_y:.1f}" width="14" height="12" fill="{FORWARD_FILL}" stroke="#0b2a45"/>'
        f'<text x="{label_px + 18:.1f}" y="{legend_y + 10:.1f}" font-size="12">forward</text>'
        f'<rect x="{label_px + 90:.1f}" y="{legend_y:.1f}" width="14" height="12" fill="url(#tl-backward)" stroke="#0b2a45"/>'
        f'<text x="{label_px + 108:.1f}" y="{legend_y + 10:.1f}" font-size="12">backward</text>'
        f'<rect x="{label_px + 190:.1f}" y="{legend_y:.1f}" width="14" height="12" fill="url(#tl-idle)" stroke="#999"/>'
        f'<text x="{label_px + 208:.1f}" y="{legend_y + 10:.1f}" font-size="12">idle (bubble)</text>'
    )
    kind = "interleaved 1F1B" if v > 1 else "1F1B"
    description = (
        f"{kind} schedule of {schedule.num_micro_batches} micro-batches over {p} stages"
        + (f" with {v} chunks each" if v > 1 else "")
        + f": {schedule.total_slots:g} slots of {facts.slot_s * 1e3:.1f} ms, {total_s * 1e3:.1f} ms in all,"
        f" of which {facts.bubble_s * 1e3:.1f} ms idle on each stage (the bubble)."
    )
    return _svg("timeline", f"Pipeline schedule ({kind})", description, legend_y + 18, "".join(parts))


def memory_svg(stages: list[PipelineStage], capacity_gib: float, usable_gib: float | None) -> str:
    """One stacked bar per stage, its parts the stage's ``breakdown_gib`` (they add up to its
    ``peak_gib``), against the GPU's capacity (and the usable part, when the request limits it)."""
    top_gib = max([capacity_gib] + [s.peak_gib for s in stages]) * 1.05
    plot_top, plot_px, left_px = 10.0, 260.0, 60.0
    slot_px = (WIDTH_PX - left_px - 10) / max(len(stages), 1)
    bar_px = min(60.0, slot_px * 0.7)
    scale = plot_px / top_gib
    base_y = plot_top + plot_px
    parts = ["<defs>", _pattern_defs("mem", MEMORY_KINDS), "</defs>"]
    step_gib = nice_step(top_gib, 6)
    for i in range(int(top_gib / step_gib) + 1):
        gib = i * step_gib
        y = base_y - gib * scale
        parts.append(
            f'<line x1="{left_px:.1f}" y1="{y:.1f}" x2="{WIDTH_PX - 10:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left_px - 6:.1f}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{gib:g} GiB</text>'
        )
    for index, stage in enumerate(stages):
        x = left_px + index * slot_px + (slot_px - bar_px) / 2
        y = base_y
        for key, value in stage.breakdown_gib.model_dump().items():
            if key not in MEMORY_KINDS:
                continue
            height = value * scale
            y -= height
            label = MEMORY_KINDS[key][0]
            parts.append(
                f'<rect class="memory-part" data-stage="{stage.stage}" data-kind="{key}" data-gib="{_number(value)}"'
                f' x="{x:.2f}" y="{y:.3f}" width="{bar_px:.2f}" height="{height:.3f}" fill="url(#mem-{key})"'
                f' stroke="#333" stroke-width="{0.5 if height > 1 else 0}"><title>stage {stage.stage}: {label} {value:.2f} GiB</title></rect>'
            )
        parts.append(
            f'<text x="{x + bar_px / 2:.2f}" y="{base_y - stage.peak_gib * scale - 4:.1f}" font-size="11" text-anchor="middle">'
            f"{stage.peak_gib:.1f}</text>"
        )
        if len(stages) <= 32 or index % max(1, len(stages) // 16) == 0:
            parts.append(f'<text x="{x + bar_px / 2:.2f}" y="{base_y + 14:.1f}" font-size="11" text-anchor="middle">{stage.stage}</text>')
    capacity_y = base_y - capacity_gib * scale
    parts.append(
        f'<line class="capacity" data-gib="{_number(capacity_gib)}" x1="{left_px:.1f}" y1="{capacity_y:.1f}" x2="{WIDTH_PX - 10:.1f}"'
        f' y2="{capacity_y:.1f}" stroke="#b00" stroke-width="2" stroke-dasharray="8 4"/>'
        f'<text x="{WIDTH_PX - 12:.1f}" y="{capacity_y - 4:.1f}" font-size="11" text-anchor="end" fill="#b00">GPU memory {capacity_gib:.0f} GiB</text>'
    )
    if usable_gib is not None and usable_gib < capacity_gib:
        usable_y = base_y - usable_gib * scale
        parts.append(
            f'<line class="usable" x1="{left_px:.1f}" y1="{usable_y:.1f}" x2="{WIDTH_PX - 10:.1f}" y2="{usable_y:.1f}"'
            f' stroke="#b00" stroke-dasharray="2 3"/><text x="{WIDTH_PX - 12:.1f}" y="{usable_y + 12:.1f}" font-size="11"'
            f' text-anchor="end" fill="#b00">usable {usable_gib:.1f} GiB</text>'
        )
    parts.append(f'<text x="{left_px:.1f}" y="{base_y + 30:.1f}" font-size="12">pipeline stage</text>')
    parts.append(_legend("mem", MEMORY_KINDS, list(MEMORY_KINDS), base_y + 40))
    peak = max(stages, key=lambda s: s.peak_gib)
    description = (
        f"Memory per GPU of each of {len(stages)} stages, by kind; the largest is stage {peak.stage} with"
        f" {peak.peak_gib:.2f} GiB of {capacity_gib:.0f} GiB."
    )
    return _svg("memory", "Memory per GPU by pipeline stage", description, base_y + 80, "".join(parts))


def breakdown_svg(breakdown: StepBreakdownOut, step_time_s: float) -> str:
    """The step time as one bar of its parts (they add up to ``step_time_s``)."""
    left_px, bar_y, bar_px = 0.0, 6.0, 34.0
    scale = (WIDTH_PX - 2) / step_time_s
    parts = ["<defs>", _pattern_defs("step", STEP_PARTS), "</defs>"]
    x = left_px
    values = breakdown.model_dump()
    for key, (label, _fill, _texture) in STEP_PARTS.items():
        value = values.get(key, 0.0)
        width = value * scale
        parts.append(
            f'<rect class="step-part" data-part="{key}" data-seconds="{_number(value)}" x="{x:.3f}" y="{bar_y:.1f}"'
            f' width="{width:.3f}" height="{bar_px:.1f}" fill="url(#step-{key})" stroke="#333" stroke-width="{0.5 if width > 1 else 0}">'
            f"<title>{label}: {value * 1e3:.1f} ms ({value / step_time_s:.1%})</title></rect>"
        )
        x += width
    parts.append(_legend("step", STEP_PARTS, [k for k in STEP_PARTS if values.get(k, 0.0) > 0], bar_y + bar_px + 10))
    largest = max(STEP_PARTS, key=lambda k: values.get(k, 0.0))
    description = (
        f"One step of {step_time_s * 1e3:.1f} ms by what it is made of; the largest part is"
        f" {STEP_PARTS[largest][0]} ({values.get(largest, 0.0) / step_time_s:.0%})."
    )
    return _svg("breakdown", "Step time breakdown", description, bar_y + bar_px + 50, "".join(parts))

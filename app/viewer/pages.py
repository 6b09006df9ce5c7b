"""The viewer's HTML: a stored plan's page and the list of recent plans.

Everything shown is read from the stored plan (``app.plans.schemas.Plan``), the document
``GET /v1/plans/{id}`` answers; nothing is evaluated again. The only derived figures are the
micro-batch count (``solver.spec.parallel.micro_batch_count``, as the cost model counts it) and
the timeline's layout (``app.viewer.schedule``), which takes exactly the cost model's slots.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from urllib.parse import urlencode

from app.plans.schemas import BatchChoiceOut, CandidateOut, ClusterComparisonOut, ExportFormatName, MemoryMissOut, Plan, PlanList
from app.viewer.charts import (
    MAX_DRAWN_PASSES,
    MEMORY_KINDS,
    STEP_PARTS,
    TimelineFacts,
    breakdown_svg,
    memory_svg,
    timeline_svg,
)
from app.viewer.schedule import pipeline_schedule
from solver.spec.parallel import micro_batch_count

EXPORT_FORMATS: tuple[ExportFormatName, ...] = ("megatron", "deepspeed", "torchtitan", "nemo")
# Backward is drawn twice as long as forward: its GEMMs compute gradients of both the inputs and
# the weights, twice the forward FLOPs (Narayanan et al. 2021, Sec 3.1); recomputation and
# gradient accumulation are drawn in backward. A drawing convention: the plan does not store the
# split, and neither the slots nor the bubble depend on it.
BACKWARD_OVER_FORWARD = 2.0

STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1000px;padding:0 16px 48px;color:#1b1b1b;background:#fff}
header{border-bottom:1px solid #ccc;margin-bottom:12px}nav a{margin-right:14px}
h1{font-size:1.5em;margin:14px 0 6px}h2{font-size:1.2em;margin:26px 0 8px;border-bottom:1px solid #eee}
table{border-collapse:collapse;margin:8px 0;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}tr[aria-current] td{background:#eef4fb;font-weight:600}
.status-infeasible{color:#a00}.status-succeeded{color:#060}.note{color:#555;font-size:0.9em}
details{margin:6px 0}summary{cursor:pointer}svg.chart{display:block;max-width:100%;height:auto;margin:8px 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px}dl.facts dt{font-weight:600}dl.facts dd{margin:0}
form.filters label{margin-right:10px}
"""


def page_html(title: str, body: str) -> str:
    """A whole page: the site's navigation, the inline style sheet and ``body``."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{escape(title)}</title><style>{STYLE}</style></head><body>'
        '<header><nav aria-label="site"><a href="/plans">Plans</a><a href="/docs">API docs</a></nav></header>'
        f"<main>{body}</main></body></html>"
    )


def seconds_words(seconds: float) -> str:
    """A time in ms, or in s from 10 s on."""
    return f"{seconds * 1e3:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def time_words(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds:,.2f} s"


def _name(entry: object) -> str:
    if isinstance(entry, list):  # a plan request naming several clusters (cluster_comparison)
        return " or ".join(_name(item) for item in entry)
    return entry if isinstance(entry, str) else getattr(entry, "name", "inline")


def parallel_words(parallel: dict) -> str:
    """``dp 2 · tp 1 · pp 4 (2 chunks each) · ZeRO-1 · micro-batch 4 · recompute none``: every
    dimension of the API's ``parallel`` object, in its order."""
    words = []
    for key, value in parallel.items():
        if value is None or key in ("stage_layers", "full_recompute_layers"):
            continue
        if key == "virtual_stages":
            if value > 1:
                words[-1] += f" ({value} chunks each)" if words and words[-1].startswith("pp") else ""
            continue
        if key == "zero_stage":
            words.append(f"ZeRO-{value}")
        elif key == "micro_batch_size":
            words.append(f"micro-batch {value}")
        elif key == "recompute":
            words.append(f"recompute {value}")
        elif key == "sequence_parallel":
            if value:
                words.append("sequence parallel")
        elif key == "offload":
            if value != "none":  # only where something is in host memory
                words.append(f"offload {value}")
        elif key == "nvme_offload":
            if value != "none":  # only where something is on NVMe
                words.append(f"NVMe {value}")
        elif key.endswith("_size"):
            if value != 1 or key in ("dp_size", "tp_size", "pp_size"):  # another dimension only where it splits
                words.append(f"{key.removesuffix('_size')} {value}")
        else:
            words.append(f"{key.replace('_', ' ')} {value}")
    return " · ".join(words)


def planned_global_batch_size(plan: Plan) -> int:
    """The global batch the candidates run: the batch chosen where the request let the planner
    choose it (``critical_batch``), else the request's."""
    choice = plan.batch_choice
    if isinstance(choice, BatchChoiceOut) and choice.chosen_global_batch_size is not None:
        return choice.chosen_global_batch_size
    return plan.request.training.global_batch_size


def request_words(plan: Plan) -> str:
    """The stored request as a sentence."""
    request = plan.request
    training = request.training
    num_gpus = request.num_gpus if isinstance(request.num_gpus, int) else None
    text = (
        f"Train {escape(_name(request.model))} on {escape(_name(request.cluster))}"
        + (f" using {num_gpus} GPUs" if num_gpus else "")
        + f", {training.global_batch_size} sequences of {training.seq_length} tokens per step"
        + (f" (the planner chose {planned_global_batch_size(plan)})" if planned_global_batch_size(plan) != training.global_batch_size else "")
        + f" in {training.precision}"
        f" with {training.optimizer}"
        + (f", {training.train_tokens:,.3g} tokens in all" if training.train_tokens else "")
        + (f", on the {escape(training.stack)} stack" if training.stack else "")
        + f"; objective {request.objective.replace('_', ' ')}, the best {request.top_k}."
    )
    constraints = request.constraints.model_dump(mode="json", exclude_none=True)
    if constraints:
        pins = "; ".join(f"{escape(k)} {escape(_rule(v))}" for k, v in constraints.items())
        text += f" Constraints: {pins}."
    return text


def _rule(value: object) -> str:
    if isinstance(value, dict):
        low, high = value.get("min"), value.get("max")
        return f"from {low if low is not None else '…'} to {high if high is not None else '…'}"
    if isinstance(value, list):
        return "one of " + ", ".join(str(v) for v in value)
    return f"= {value}"


def _links(plan: Plan, index: int) -> str:
    exports = " ".join(
        f'<a href="/v1/plans/{escape(plan.id)}/export?{urlencode({"format": f, "candidate": index})}">{f}</a>' for f in EXPORT_FORMATS
    )
    return (
        f'<p><a href="/v1/plans/{escape(plan.id)}">the plan as JSON</a>'
        + (f" · launch config of candidate {index}: {exports}" if plan.candidates else "")
        + "</p>"
    )


def _candidates_table(plan: Plan, chosen: int) -> str:
    rows = []
    for index, candidate in enumerate(plan.candidates):
        current = ' aria-current="true"' if index == chosen else ""
        link = (
            "shown" if index == chosen
            else f'<a href="/plans/{escape(plan.id)}?candidate={index}">show</a>'
        )
        prediction = candidate.prediction
        rows.append(
            f'<tr class="candidate" data-candidate="{index}"{current}><td class="num">{candidate.rank}</td><td>{link}</td>'
            f"<td>{escape(parallel_words(candidate.parallel.model_dump(mode='json')))}</td>"
            f'<td class="num">{seconds_words(prediction.step_time_s)}</td><td class="num">{prediction.tokens_per_s:,.0f}</td>'
            f'<td class="num">{prediction.mfu:.1%}</td><td class="num">{candidate.memory.peak_gib:.1f}</td>'
            f'<td class="num">{time_words(prediction.time_to_train_s)}</td><td>{escape(candidate.why)}</td></tr>'
        )
    return (
        "<table><caption>Candidates, best first</caption><thead><tr><th>rank</th><th></th><th>configuration</th>"
        '<th class="num">step time</th><th class="num">tokens/s</th><th class="num">MFU</th>'
        '<th class="num">peak GiB/GPU</th><th class="num">time to train</th><th>why</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _prediction(candidate: CandidateOut) -> str:
    prediction = candidate.prediction
    band = prediction.range
    step = seconds_words(prediction.step_time_s)
    tokens = f"{prediction.tokens_per_s:,.0f}"
    train = time_words(prediction.time_to_train_s)
    if band is not None:
        step += f" (expected {seconds_words(band.step_time_low_s)} to {seconds_words(band.step_time_high_s)})"
        tokens += f" (expected {band.tokens_per_s_low:,.0f} to {band.tokens_per_s_high:,.0f})"
        if band.time_to_train_low_s is not None and band.time_to_train_high_s is not None:
            train += f" (expected {time_words(band.time_to_train_low_s)} to {time_words(band.time_to_train_high_s)})"
    facts = [
        ("step time", step),
        ("tokens/s", tokens),
        ("samples/s", f"{prediction.samples_per_s:,.1f}"),
        ("model TFLOP/s per GPU", f"{prediction.model_tflops_per_gpu:,.1f} (MFU {prediction.mfu:.1%})"),
        ("hardware TFLOP/s per GPU", f"{prediction.hardware_tflops_per_gpu:,.1f} (HFU {prediction.hfu:.1%})"),
        ("time to train", train),
        ("peak memory per GPU", f"{candidate.memory.peak_gib:.2f} GiB of {candidate.memory.capacity_gib:.0f} GiB (stage {candidate.memory.peak_stage})"),
    ]
    if candidate.memory.host_gib_per_node > 0:
        facts.append(("host memory per node", f"{candidate.memory.host_gib_per_node:,.1f} GiB of offloaded states"))
    if candidate.memory.nvme_gbytes_per_node > 0:
        facts.append(("NVMe per node", f"{candidate.memory.nvme_gbytes_per_node:,.0f} GB of offloaded states"))
    if band is not None:
        facts.append(("error range", f"from {band.runs} measured runs ({escape(band.group)}): where the measured figures are expected to fall"))
    if candidate.violations:
        facts.append(("violations", escape("; ".join(candidate.violations))))
    items = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    return f'<dl class="facts" id="prediction">{items}</dl>'


def _breakdown_table(candidate: CandidateOut) -> str:
    values = candidate.prediction.breakdown_s.model_dump()
    step_s = candidate.prediction.step_time_s
    rows = "".join(
        f'<tr><td>{label}</td><td class="num">{seconds_words(values.get(key, 0.0))}</td><td class="num">{values.get(key, 0.0) / step_s:.1%}</td></tr>'
        for key, (label, _fill, _texture) in STEP_PARTS.items()
    )
    return (
        '<details><summary>The breakdown as a table</summary><table><thead><tr><th>part</th><th class="num">time</th>'
        f'<th class="num">share</th></tr></thead><tbody>{rows}<tr><td>step</td><td class="num">{seconds_words(step_s)}</td>'
        '<td class="num">100%</td></tr></tbody></table></details>'
    )


def _timeline(plan: Plan, candidate: CandidateOut) -> str:
    parallel = candidate.parallel.model_dump(mode="json")
    pp_size, virtual_stages = parallel["pp_size"], parallel["virtual_stages"]
    num_micro_batches = micro_batch_count(planned_global_batch_size(plan), parallel["dp_size"], parallel["micro_batch_size"])
    breakdown = candidate.prediction.breakdown_s
    stage_times_s = [stage.time_per_micro_batch_s for stage in candidate.stages]
    slot_s = max(stage_times_s)
    kind = "interleaved 1F1B" if virtual_stages > 1 else "1F1B"
    bubble_share = breakdown.bubble_s / candidate.prediction.step_time_s
    summary = (
        f"<p>{kind}: {num_micro_batches} micro-batches through {pp_size} stage{'s' if pp_size > 1 else ''}"
        + (f" of {virtual_stages} chunks" if virtual_stages > 1 else "")
        + f", every stage at the pace of the slowest ({seconds_words(slot_s)} per micro-batch)."
        f' The bubble is <strong id="bubble">{seconds_words(breakdown.bubble_s)}, {bubble_share:.1%} of the step</strong>'
        f" ({pp_size - 1}/{virtual_stages} of a slot on every stage).</p>"
    )
    passes = 2 * pp_size * virtual_stages * num_micro_batches
    if passes > MAX_DRAWN_PASSES:
        return summary + (
            f'<p class="note" id="timeline-too-large">{passes:,} forward and backward passes are too many to draw one by one'
            f" (at most {MAX_DRAWN_PASSES:,}).</p>"
        )
    busy_s = breakdown.compute_s + breakdown.recompute_s + breakdown.tp_comm_s + breakdown.grad_accumulation_s
    forward_s = (breakdown.compute_s + breakdown.tp_comm_s) / (1 + BACKWARD_OVER_FORWARD)
    forward_share = forward_s / busy_s if busy_s > 0 else 1 / (1 + BACKWARD_OVER_FORWARD)
    schedule = pipeline_schedule(pp_size, virtual_stages, num_micro_batches, forward_share)
    svg = timeline_svg(schedule, TimelineFacts(slot_s=slot_s, stage_times_s=stage_times_s, bubble_s=breakdown.bubble_s))
    return summary + svg + (
        '<p class="note">A bar is one micro-batch\'s forward or backward pass through one stage'
        + (" chunk" if virtual_stages > 1 else "")
        + " (its number inside); backward is drawn twice as long as forward, recomputation in it. Pipeline"
        " sends, the gradient sync and the optimizer step follow the schedule and are in the breakdown above.</p>"
    )


def _memory(plan: Plan, candidate: CandidateOut) -> str:
    memory = candidate.memory
    fraction = plan.request.constraints.model_dump(exclude_none=True).get("max_memory_fraction")
    usable = memory.capacity_gib * fraction if fraction is not None else None
    header = "".join(f'<th class="num">{label}</th>' for label, _fill, _texture in MEMORY_KINDS.values())
    rows = []
    for stage in candidate.stages:
        parts = stage.breakdown_gib.model_dump()
        cells = "".join(f'<td class="num">{parts.get(key, 0.0):.2f}</td>' for key in MEMORY_KINDS)
        rows.append(
            f'<tr><td class="num">{stage.stage}</td><td class="num">{stage.num_layers}</td>'
            f'<td class="num">{len(stage.full_recompute_layers)}</td><td class="num">{seconds_words(stage.time_per_micro_batch_s)}</td>'
            f'<td class="num">{stage.in_flight_micro_batches:g}</td>{cells}<td class="num">{stage.peak_gib:.2f}</td></tr>'
        )
    return memory_svg(candidate.stages, memory.capacity_gib, usable) + (
        "<details><summary>Stages as a table (GiB per GPU)</summary><table><thead><tr><th>stage</th><th>layers</th>"
        '<th>recomputed layers</th><th class="num">time per micro-batch</th><th class="num">micro-batches in flight</th>'
        f'{header}<th class="num">total</th></tr></thead><tbody>{"".join(rows)}</tbody></table></details>'
    )


def _explanation(plan: Plan) -> str:
    explanation = plan.explanation
    if explanation is None:
        return ""
    rejections = "".join(
        f'<tr><td>{escape(rule)}</td><td class="num">{count:,}</td></tr>'
        for rule, count in sorted(explanation.rejections.items(), key=lambda item: -item[1])
    )
    suggestions = "".join(
        f"<li>{escape(s.change)}: {escape(parallel_words(s.parallel.model_dump(mode='json')))} on {s.num_gpus} GPUs,"
        f" {seconds_words(s.step_time_s)} per step, {s.peak_gib:.1f} GiB per GPU{'' if s.checked else ' (not checked)'}</li>"
        for s in explanation.suggestions
    )
    miss = explanation.closest_miss
    closest = f"<p>Closest: {escape(miss.text)}</p>" if miss is not None else ""
    if isinstance(miss, MemoryMissOut):
        parts = miss.memory_gib.model_dump()
        cells = "".join(f'<tr><td>{label}</td><td class="num">{parts.get(key, 0.0):.2f}</td></tr>' for key, (label, _f, _t) in MEMORY_KINDS.items())
        closest += (
            f"<table><caption>Its memory per GPU, GiB ({escape(parallel_words(miss.parallel.model_dump(mode='json')))})</caption>"
            f'<tbody>{cells}<tr><td>total</td><td class="num">{miss.peak_gib:.2f}</td></tr>'
            f'<tr><td>usable</td><td class="num">{miss.usable_gib:.2f}</td></tr></tbody></table>'
        )
    return (
        f'<section id="explanation"><h2>Why nothing fits</h2><p><strong>{escape(explanation.summary)}</strong></p>'
        f"<p>Binding constraint: {escape(explanation.binding_constraint)}: {escape(explanation.binding_text)}.</p>{closest}"
        + (f"<h3>What would find a plan</h3><ul>{suggestions}</ul>" if suggestions else "")
        + '<table><caption>Configurations rejected, by rule</caption><thead><tr><th>rule</th><th class="num">rejected</th>'
        f"</tr></thead><tbody>{rejections}</tbody></table></section>"
    )


CURRENT = ' aria-current="true"'  # the row chosen, for screen readers and the tests


def _optional(value: float | None, words: Callable[[float], str]) -> str:
    """A table cell's text: a dash where there is no figure."""
    return "–" if value is None else words(value)


def _dollars(usd: float) -> str:
    return f"${usd:,.0f}"


def _choice_section(title: str, text_id: str, text: str, caption: str, headers: tuple[tuple[str, bool], ...], rows: list[str]) -> str:
    """A choice the planner made among alternatives: a heading, the choice in words, and a table
    of the alternatives (``headers``: each column's label and whether it holds numbers)."""
    head = "".join(f'<th class="num">{label}</th>' if numeric else f"<th>{label}</th>" for label, numeric in headers)
    return (
        f'<h2>{title}</h2><p id="{text_id}">{escape(text)}</p>'
        f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _batch_choice(plan: Plan) -> str:
    """How the global batch was chosen (requests with ``critical_batch``): per batch size the steps,
    the tokens, the step time and the time to train split into the work any batch does and what
    the batch's size adds."""
    choice = plan.batch_choice
    if not isinstance(choice, BatchChoiceOut):
        return ""
    rows = []
    for point in choice.points:
        chosen = point.global_batch_size == choice.chosen_global_batch_size
        rows.append(
            f'<tr class="batch"{CURRENT if chosen else ""}><td class="num">{point.global_batch_size:,}{" (chosen)" if chosen else ""}</td>'
            f'<td class="num">{point.steps:,.0f}</td><td class="num">{point.tokens:,.3g}</td>'
            f'<td class="num">{_optional(point.step_time_s, seconds_words)}</td>'
            f'<td class="num">{_optional(point.time_for_min_tokens_s, time_words)}</td>'
            f'<td class="num">{_optional(point.time_for_extra_tokens_s, time_words)}</td>'
            f'<td class="num">{_optional(point.time_to_train_s, time_words)}</td>'
            f'<td class="num">{_optional(point.cost_usd, _dollars)}</td></tr>'
        )
    headers = tuple((label, True) for label in (
        "sequences per step", "steps", "tokens", "step time", "time for E_min", "time for the extra tokens", "time to train", "cost",
    ))
    caption = "Batch sizes compared (tokens to the target grow with the batch: E = E_min (1 + B / B_noise))"
    return _choice_section("Global batch size", "batch-choice", choice.summary, caption, headers, rows)


def _cluster_comparison(plan: Plan) -> str:
    """Requests naming several clusters: each cluster's best plan side by side."""
    comparison = plan.cluster_comparison
    if not isinstance(comparison, ClusterComparisonOut):
        return ""
    rows = []
    for row in comparison.clusters:
        chosen = row.cluster == comparison.chosen_cluster
        rows.append(
            f'<tr class="cluster"{CURRENT if chosen else ""}><td>{escape(row.cluster)}{" (chosen)" if chosen else ""}</td>'
            f'<td class="num">{_optional(row.num_gpus, str)}</td><td class="num">{_optional(row.step_time_s, seconds_words)}</td>'
            f'<td class="num">{_optional(row.time_to_train_s, time_words)}</td>'
            f'<td class="num">{_optional(row.gpu_hour_price_usd, lambda usd: f"${usd:,.2f}")}</td>'
            f'<td class="num">{_optional(row.cost_usd, _dollars)}</td><td>{escape(row.summary)}</td></tr>'
        )
    headers = (
        ("cluster", False), ("GPUs", True), ("step time", True), ("time to train", True), ("per GPU-hour", True),
        ("cost", True), ("best plan", False),
    )
    return _choice_section("Clusters compared", "cluster-choice", comparison.reason, "Each cluster's best plan", headers, rows)


def plan_page(plan: Plan, chosen: int) -> str:
    """The page of a stored plan, showing candidate ``chosen`` (0: the best) in full."""
    status = f'<span class="status-{plan.status}">{plan.status}</span>' + (" (the search timed out: best found so far)" if plan.timed_out else "")
    head = (
        f"<h1>Plan {escape(plan.id)}</h1><p>{status}, stored {plan.created_at:%Y-%m-%d %H:%M} UTC,"
        f" solver {escape(plan.versions.solver)}</p><p id=\"request\">{request_words(plan)}</p>"
    )
    choices = _cluster_comparison(plan) + _batch_choice(plan)
    if not plan.candidates:
        return page_html(f"Plan {plan.id}", head + _links(plan, 0) + choices + _explanation(plan))
    candidate = plan.candidates[chosen]
    body = (
        head + _links(plan, chosen) + choices
        + f"<h2>Candidates</h2>{_candidates_table(plan, chosen)}"
        + f"<h2>Candidate {chosen}: {escape(parallel_words(candidate.parallel.model_dump(mode='json')))}</h2>"
        + _prediction(candidate)
        + f"<h2>Step time</h2>{breakdown_svg(candidate.prediction.breakdown_s, candidate.prediction.step_time_s)}{_breakdown_table(candidate)}"
        + f"<h2>Pipeline schedule</h2>{_timeline(plan, candidate)}"
        + f"<h2>Memory per GPU</h2>{_memory(plan, candidate)}"
    )
    return page_html(f"Plan {plan.id}", body)


def list_page(plans: PlanList, model: str | None, cluster: str | None, status: str | None) -> str:
    """Recent plans, newest first, with the filters of ``GET /v1/plans``."""
    rows = "".join(
        f'<tr class="plan"><td><a href="/plans/{escape(item.id)}">{escape(item.id[:8])}</a></td>'
        f"<td>{item.created_at:%Y-%m-%d %H:%M}</td><td>{escape(item.model)}</td><td>{escape(item.cluster)}</td>"
        f'<td class="num">{item.num_gpus}</td><td>{escape(item.objective.replace("_", " "))}</td>'
        f'<td class="status-{item.status}">{item.status}</td>'
        f"<td>{escape(parallel_words(item.best_parallel.model_dump(mode='json'))) if item.best_parallel else ''}</td>"
        f'<td class="num">{f"{item.best_tokens_per_s:,.0f}" if item.best_tokens_per_s is not None else ""}</td></tr>'
        for item in plans.items
    )
    filters = {"model": model, "cluster": cluster, "status": status}
    status_options = "".join(
        f'<option value="{value}"{" selected" if status == value else ""}>{value or "any"}</option>'
        for value in ("", "succeeded", "infeasible")
    )
    form = (
        '<form class="filters" method="get" action="/plans">'
        f'<label>model <input name="model" value="{escape(model or "")}"></label>'
        f'<label>cluster <input name="cluster" value="{escape(cluster or "")}"></label>'
        f'<label>status <select name="status">{status_options}</select></label><button type="submit">Filter</button></form>'
    )
    more = ""
    if plans.next_cursor:
        query = urlencode({k: v for k, v in filters.items() if v} | {"cursor": plans.next_cursor})
        more = f'<p><a rel="next" href="/plans?{query}">older plans</a></p>'
    table = (
        "<table><thead><tr><th>plan</th><th>stored (UTC)</th><th>model</th><th>cluster</th><th class=\"num\">GPUs</th>"
        '<th>objective</th><th>status</th><th>best configuration</th><th class="num">tokens/s</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
        if plans.items else '<p id="no-plans">No plans match.</p>'
    )
    return page_html("Plans", f"<h1>Plans</h1>{form}{table}{more}")

"""The viewer's page of a stored sweep: its scaling and Pareto charts (the same SVG as
``/v1/sweeps/{id}/charts/*.svg``, inline), the fitted power laws, and every point with a link to
its plan's page. Read from the stored sweep (``app.sweeps.schemas.Sweep``) only."""

from __future__ import annotations

import re
from html import escape

from app.sweeps.schemas import Sweep
from app.viewer.pages import page_html, parallel_words, seconds_words, time_words


def inline_svg(svg: str, prefix: str) -> str:
    """A standalone SVG document made fit to sit in a page beside another: no XML declaration,
    its ids prefixed (two charts both have ``x-axis``), scaled to the page's width."""
    svg = re.sub(r"^<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})", svg)
    return svg.replace("<svg ", f'<svg class="chart" data-chart="{prefix}" ', 1)


def _request_words(sweep: Sweep) -> str:
    request = sweep.request
    model = request.model if isinstance(request.model, str) else request.model.name
    clusters = request.cluster if isinstance(request.cluster, list) else [request.cluster]
    counts = sorted({p.num_gpus for p in sweep.points})
    batches = sorted({p.global_batch_size for p in sweep.points})
    return (
        f"{escape(model)} on {escape(', '.join(clusters))}: {len(sweep.points)} points over"
        f" {', '.join(str(c) for c in counts)} GPUs and global batches of {', '.join(str(b) for b in batches)};"
        f" objective {request.objective.replace('_', ' ')}, scaling efficiency threshold {sweep.efficiency_threshold:.0%}."
    )


def sweep_page(sweep: Sweep, scaling_svg: str, pareto_svg: str) -> str:
    fits = "".join(
        f"<tr><td>{escape(s.cluster)}</td><td class=\"num\">{s.global_batch_size}</td>"
        + (
            f'<td class="num">{s.fit.a_s:,.4g}</td><td class="num">{s.fit.b:.3f}</td><td class="num">{s.fit.r_squared:.3f}</td>'
            if s.fit is not None else '<td colspan="3">too few feasible points</td>'
        )
        + f'<td class="num">{s.knee_num_gpus if s.knee_num_gpus is not None else "none"}</td></tr>'
        for s in sweep.series
    )
    points = "".join(
        f'<tr class="point" data-point="{p.index}"><td class="num">{p.index}</td><td>{escape(p.cluster)}</td>'
        f'<td class="num">{p.num_gpus}</td><td class="num">{p.global_batch_size}</td><td class="status-{p.status}">{p.status}</td>'
        f"<td>{escape(parallel_words(p.parallel.model_dump(mode='json'))) if p.parallel is not None else escape(p.note or '')}</td>"
        f'<td class="num">{seconds_words(p.step_time_s) if p.step_time_s is not None else ""}</td>'
        f'<td class="num">{f"{p.tokens_per_s:,.0f}" if p.tokens_per_s is not None else ""}</td>'
        f'<td class="num">{time_words(p.time_to_train_s)}</td>'
        f'<td class="num">{f"{p.cost_usd:,.0f}" if p.cost_usd is not None else ""}</td>'
        f'<td class="num">{f"{p.scaling_efficiency:.0%}" if p.scaling_efficiency is not None else ""}</td>'
        f'<td>{"on the front" if p.on_pareto_front else ""}</td>'
        f'<td>{f"""<a href="/plans/{escape(p.plan_id)}">plan</a>""" if p.plan_id else ""}</td></tr>'
        for p in sweep.points
    )
    body = (
        f"<h1>Sweep {escape(sweep.id)}</h1><p>stored {sweep.created_at:%Y-%m-%d %H:%M} UTC ·"
        f' <a href="/v1/sweeps/{escape(sweep.id)}">the sweep as JSON</a></p><p id="request">{_request_words(sweep)}</p>'
        f"<h2>Scaling</h2>{inline_svg(scaling_svg, 'scaling')}"
        '<table><caption>Fitted power laws: time = a × GPUs<sup>−b</sup></caption><thead><tr><th>cluster</th>'
        '<th class="num">global batch</th><th class="num">a (s)</th><th class="num">b</th><th class="num">R²</th>'
        f'<th class="num">knee (GPUs)</th></tr></thead><tbody>{fits}</tbody></table>'
        f"<h2>Time to train against cost</h2>{inline_svg(pareto_svg, 'pareto')}"
        '<h2>Points</h2><table><thead><tr><th class="num">#</th><th>cluster</th><th class="num">GPUs</th>'
        '<th class="num">global batch</th><th>status</th><th>best configuration</th><th class="num">step time</th>'
        '<th class="num">tokens/s</th><th class="num">time to train</th><th class="num">cost (USD)</th>'
        f'<th class="num">efficiency</th><th>Pareto</th><th></th></tr></thead><tbody>{points}</tbody></table>'
    )
    return page_html(f"Sweep {sweep.id}", body)

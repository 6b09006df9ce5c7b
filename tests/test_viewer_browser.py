"""The plan viewer in a real headless Chromium (issue 14, part 2): Debian's ``chromium`` driven by
Playwright (the ``viewer-test`` extra) through its ``executable_path``. Every page loads with no
console error and no failed request; the timeline has one bar per micro-batch, chunk and pass
on every stage, laid out left to right inside its chart; the memory bars, as drawn, stack to
the JSON's per-stage numbers; a full-page screenshot of each page is written under the test's
temporary directory and checked for size and content.

Without a Chromium (or Playwright) the tests are skipped locally; in CI (``CI`` set), where
``.ci/run`` installs Chromium, they fail instead. ``PARTITURA_CHROMIUM`` names another binary;
``PARTITURA_VIEWER_SCREENSHOT=docs/plan-viewer.png`` keeps the interleaved plan's screenshot
(the README's picture).
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_viewer import INFEASIBLE_BODY, INTERLEAVED_BODY, ONE_F_ONE_B_BODY, SWEEP_BODY, create_plan, micro_batches

from app.core.migrate import upgrade
from conftest import LiveServer, server_settings, start_server


def _chromium() -> str:
    path = os.environ.get("PARTITURA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    reason = None if path else "no Chromium installed (apt-get install chromium; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "Playwright is not installed (make install-dev installs the viewer-test extra)"
    if reason is None and path is not None:
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests")
    pytest.skip(str(reason))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The app on a SQLite database built by the migrations (the pages are the same HTML on
    Postgres; tests/test_viewer.py reads them on both)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('viewer') / 'viewer.db'}"
    upgrade(url)
    live = start_server(server_settings(url))
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def plans(server: LiveServer) -> dict[str, dict]:
    with httpx.Client(base_url=server.base_url, timeout=120.0) as client:
        return {
            "interleaved": create_plan(client, INTERLEAVED_BODY),
            "1f1b": create_plan(client, ONE_F_ONE_B_BODY),
            "infeasible": create_plan(client, INFEASIBLE_BODY),
        }


@pytest.fixture(scope="module")
def sweep(server: LiveServer) -> dict:
    with httpx.Client(base_url=server.base_url, timeout=120.0) as client:
        response = client.post("/v1/sweeps", json=SWEEP_BODY)
        assert response.status_code == 201, response.text
        return response.json()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


class Visit:
    """A page loaded in a fresh browser context, with every console error, page error, failed
    request and error response it produced."""

    def __init__(self, browser, url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1040, "height": 900})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed request: {r.url} {r.failure}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("response", lambda r: self.problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
        response = self.page.goto(url, wait_until="networkidle")
        assert response is not None and response.status == 200, url

    def close(self) -> None:
        self.context.close()


def check_loads_cleanly(visit: Visit, base_url: str) -> None:
    assert visit.problems == []
    assert visit.requests and all(u.startswith(base_url) or u.startswith("data:") for u in visit.requests), visit.requests


def check_screenshot(browser, visit: Visit, path: Path) -> None:
    """A full-page PNG of at least 20 kB whose pixels, decoded by Chromium, are not one colour:
    at least 2% of them differ from the page's white and they take more than 16 colours."""
    visit.page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, len(data)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1000 and height >= 600
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_content("<canvas></canvas>")
        stats = page.evaluate(
            """async (png) => {
                const image = new Image();
                image.src = 'data:image/png;base64,' + png;
                await image.decode();
                const canvas = document.querySelector('canvas');
                canvas.width = image.width; canvas.height = image.height;
                const context = canvas.getContext('2d');
                context.drawImage(image, 0, 0);
                const pixels = context.getImageData(0, 0, image.width, image.height).data;
                const colours = new Set();
                let inked = 0;
                for (let i = 0; i < pixels.length; i += 4) {
                    if (pixels[i] < 250 || pixels[i + 1] < 250 || pixels[i + 2] < 250) inked++;
                    if (colours.size < 10000) colours.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
                }
                return {inked: inked / (pixels.length / 4), colours: colours.size, width: image.width, height: image.height};
            }""",
            base64.b64encode(data).decode(),
        )
    finally:
        context.close()
    assert (stats["width"], stats["height"]) == (width, height)
    assert stats["inked"] > 0.02 and stats["colours"] > 16, stats


def test_plan_pages_in_chromium(browser, server, plans, tmp_path):
    for name in ("interleaved", "1f1b"):
        plan = plans[name]
        for index, candidate in enumerate(plan["candidates"]):
            visit = Visit(browser, f"{server.base_url}/plans/{plan['id']}?candidate={index}")
            try:
                check_loads_cleanly(visit, server.base_url)
                parallel = candidate["parallel"]
                p, v, m = parallel["pp_size"], parallel["virtual_stages"], micro_batches(plan, candidate)
                drawn = visit.page.evaluate(
                    """() => {
                        const chart = document.querySelector('svg[data-chart=timeline]').getBoundingClientRect();
                        return [...document.querySelectorAll('svg[data-chart=timeline] rect.pass')].map(r => {
                            const box = r.getBoundingClientRect();
                            return {stage: +r.dataset.stage, micro_batch: +r.dataset.microBatch, chunk: +r.dataset.chunk,
                                    pass: r.dataset.pass, left: box.left, right: box.right, width: box.width,
                                    inside: box.left >= chart.left && box.right <= chart.right + 0.5 && box.top >= chart.top
                                            && box.bottom <= chart.bottom};
                        });
                    }"""
                )
                keys = sorted((b["stage"], b["micro_batch"], b["chunk"], b["pass"]) for b in drawn)
                assert keys == sorted(
                    (s, mb, c, kind) for s in range(p) for mb in range(m) for c in range(v) for kind in ("forward", "backward")
                )
                assert all(b["inside"] and b["width"] > 0 for b in drawn)
                for stage in range(p):
                    # A stage's bars never overlap: one GPU runs one pass at a time.
                    row = sorted((b["left"], b["right"]) for b in drawn if b["stage"] == stage)
                    assert all(right <= next_left + 0.05 for (_l, right), (next_left, _r) in zip(row, row[1:]))
                    # Micro-batch k's backward follows its forward on every stage.
                    for mb in range(m):
                        for c in range(v):
                            forward = next(b for b in drawn if (b["stage"], b["micro_batch"], b["chunk"], b["pass"]) == (stage, mb, c, "forward"))
                            backward = next(b for b in drawn if (b["stage"], b["micro_batch"], b["chunk"], b["pass"]) == (stage, mb, c, "backward"))
                            assert forward["right"] <= backward["left"] + 0.05

                stacks = visit.page.evaluate(
                    """() => {
                        const stages = {};
                        for (const r of document.querySelectorAll('svg[data-chart=memory] rect.memory-part')) {
                            const box = r.getBoundingClientRect();
                            (stages[r.dataset.stage] ??= []).push({gib: +r.dataset.gib, top: box.top, bottom: box.bottom, height: box.height});
                        }
                        return stages;
                    }"""
                )
                assert sorted(int(s) for s in stacks) == list(range(p))
                px_per_gib = None
                for stage in candidate["stages"]:
                    parts = stacks[str(stage["stage"])]
                    assert sum(part["gib"] for part in parts) == pytest.approx(stage["peak_gib"], rel=1e-12)
                    drawn_px = max(part["bottom"] for part in parts) - min(part["top"] for part in parts)
                    assert sum(part["height"] for part in parts) == pytest.approx(drawn_px, abs=0.05)  # stacked, no gaps
                    px_per_gib = px_per_gib or drawn_px / stage["peak_gib"]
                    assert drawn_px / stage["peak_gib"] == pytest.approx(px_per_gib, rel=0.01)
                bubble = visit.page.text_content("#bubble")
                assert bubble is not None and f"{candidate['prediction']['breakdown_s']['bubble_s'] * 1e3:,.1f} ms" in bubble
                if index == 0:
                    check_screenshot(browser, visit, tmp_path / f"plan-{name}.png")
                    if name == "interleaved" and os.environ.get("PARTITURA_VIEWER_SCREENSHOT"):
                        # README's picture: PARTITURA_VIEWER_SCREENSHOT=docs/plan-viewer.png
                        shutil.copyfile(tmp_path / f"plan-{name}.png", os.environ["PARTITURA_VIEWER_SCREENSHOT"])
            finally:
                visit.close()


def test_switching_candidates_by_link(browser, server, plans):
    plan = plans["1f1b"]
    visit = Visit(browser, f"{server.base_url}/plans/{plan['id']}")
    try:
        visit.page.click("tr[data-candidate='1'] a")
        visit.page.wait_for_load_state("networkidle")
        assert visit.page.url.endswith(f"/plans/{plan['id']}?candidate=1")
        assert visit.page.get_attribute("tr[aria-current]", "data-candidate") == "1"
        check_loads_cleanly(visit, server.base_url)
    finally:
        visit.close()


def test_infeasible_list_and_sweep_pages_in_chromium(browser, server, plans, sweep, tmp_path):
    plan = plans["infeasible"]
    pages = {"infeasible": f"/plans/{plan['id']}", "list": "/plans", "sweep": f"/sweeps/{sweep['id']}"}
    for name, path in pages.items():
        visit = Visit(browser, server.base_url + path)
        try:
            check_loads_cleanly(visit, server.base_url)
            if name == "infeasible":
                assert plan["explanation"]["summary"] in (visit.page.text_content("#explanation") or "")
            elif name == "list":
                assert visit.page.locator("tr.plan").count() == 3 + len([p for p in sweep["points"] if p["plan_id"]])
            else:
                sizes = visit.page.evaluate(
                    "() => [...document.querySelectorAll('svg.chart')].map(c => [c.dataset.chart, c.getBoundingClientRect().width,"
                    " c.getBoundingClientRect().height, c.querySelectorAll('circle').length])"
                )
                assert [chart for chart, *_ in sizes] == ["scaling", "pareto"]
                assert all(width > 300 and height > 200 and circles > 0 for _chart, width, height, circles in sizes)
                assert visit.page.locator("tr.point").count() == len(sweep["points"])
            check_screenshot(browser, visit, tmp_path / f"{name}.png")
        finally:
            visit.close()


def test_docs_renders_offline_in_chromium(browser, server, tmp_path):
    visit = Visit(browser, server.base_url + "/docs")
    try:
        check_loads_cleanly(visit, server.base_url)
        visit.page.wait_for_selector(".opblock", timeout=15_000)  # Swagger UI drew the operations
        check_screenshot(browser, visit, tmp_path / "docs.png")
    finally:
        visit.close()

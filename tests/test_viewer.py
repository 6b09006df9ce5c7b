"""The plan viewer (issue 14, part 2) without a browser: the HTML of a stored plan, parsed, shows
what the stored JSON says (one timeline bar per micro-batch, chunk and pass on every stage;
memory parts and step-time parts equal to the JSON's numbers), the schedule it draws takes the
cost model's slots, and unknown plans are problem documents. tests/test_viewer_browser.py loads
the same pages in Chromium."""

from __future__ import annotations

import copy
import re
from collections import Counter
from html.parser import HTMLParser

import httpx
import pytest

from app.plans.schemas import Plan
from app.viewer.charts import MAX_DRAWN_PASSES
from app.viewer.pages import plan_page
from app.viewer.schedule import Pass, pipeline_schedule
from conftest import LiveServer, assert_problem, error_fields
from solver.cost.memory import in_flight_micro_batches
from solver.cost.result import MEMORY_KEYS
from solver.cost.schedule import pipeline_bubble_fraction, pipeline_slots

# Interleaved: 64 sequences, dp x mbs = 8 -> 8 micro-batches through 4 stages of 2 chunks.
INTERLEAVED_BODY = {
    "model": "gpt3-1.3b", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
    "training": {"global_batch_size": 64, "seq_length": 2048, "train_tokens": 3e11},
    "constraints": {"tp_size": 1, "pp_size": 4, "virtual_stages": 2, "dp_size": 2, "micro_batch_size": 4},
    "top_k": 3,
}
# 1F1B over 2 stages with tp 4; several micro-batch sizes, so the candidates differ.
ONE_F_ONE_B_BODY = {
    "model": "gpt3-1.3b", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
    "training": {"global_batch_size": 32, "seq_length": 2048, "train_tokens": 3e11},
    "constraints": {"tp_size": 4, "pp_size": 2, "virtual_stages": 1, "max_memory_fraction": 0.9},
    "top_k": 3,
}
# A small sweep: the whole of it plans in about a second (as tests/test_sweep_api.py's).
SWEEP_BODY = {
    "model": "gpt3-125m", "cluster": ["dgx-a100-80gb", "dgx-h100-x1"], "num_gpus": [2, 4, 8],
    "training": {"global_batch_size": 32, "seq_length": 1024, "train_tokens": 1e9}, "objective": "min_time_to_train",
}
INFEASIBLE_BODY = {
    "model": "gpt3-175b", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
    "training": {"global_batch_size": 64, "seq_length": 2048}, "top_k": 3,
}


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, and its text."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def with_class(self, name: str) -> list[dict[str, str]]:
        return [attrs for _tag, attrs in self.tags if name in attrs.get("class", "").split()]


def create_plan(client: httpx.Client, body: dict) -> dict:
    response = client.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


def micro_batches(plan: dict, candidate: dict) -> int:
    parallel = candidate["parallel"]
    return plan["request"]["training"]["global_batch_size"] // (parallel["dp_size"] * parallel["micro_batch_size"])


@pytest.fixture(scope="module")
def plans(live_server: LiveServer) -> dict[str, dict]:
    with httpx.Client(base_url=live_server.base_url, timeout=120.0) as client:
        return {
            "interleaved": create_plan(client, INTERLEAVED_BODY),
            "1f1b": create_plan(client, ONE_F_ONE_B_BODY),
            "infeasible": create_plan(client, INFEASIBLE_BODY),
        }


def page(api: httpx.Client, path: str, **params) -> Elements:
    response = api.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    urls = re.findall(r'(?:src|href|action)="([^"]*)"', response.text)
    assert not [u for u in urls if re.match(r"^(https?:)?//", u)], urls  # nothing from another host
    return Elements(response.text)


def check_candidate_page(api: httpx.Client, plan: dict, index: int) -> Elements:
    """The page of candidate ``index`` against the stored JSON."""
    candidate = plan["candidates"][index]
    parsed = page(api, f"/plans/{plan['id']}", candidate=index)
    parallel = candidate["parallel"]
    p, v, m = parallel["pp_size"], parallel["virtual_stages"], micro_batches(plan, candidate)

    # Timeline: exactly one bar per (stage, micro-batch, chunk, pass).
    bars = Counter(
        (int(a["data-stage"]), int(a["data-micro-batch"]), int(a["data-chunk"]), a["data-pass"]) for a in parsed.with_class("pass")
    )
    expected = {(s, mb, c, kind) for s in range(p) for mb in range(m) for c in range(v) for kind in ("forward", "backward")}
    assert set(bars) == expected and set(bars.values()) == {1}
    assert len(parsed.with_class("idle")) == p

    # Memory: the parts of every stage are the JSON's numbers and add up to its peak.
    parts = parsed.with_class("memory-part")
    assert len(parts) == len(MEMORY_KEYS) * p  # one part per kind of memory
    for stage in candidate["stages"]:
        mine = {a["data-kind"]: float(a["data-gib"]) for a in parts if int(a["data-stage"]) == stage["stage"]}
        assert mine == stage["breakdown_gib"]
        assert sum(mine.values()) == pytest.approx(stage["peak_gib"], rel=1e-12)
        heights = sum(float(a["height"]) for a in parts if int(a["data-stage"]) == stage["stage"])
        assert heights / stage["peak_gib"] == pytest.approx(
            sum(float(a["height"]) for a in parts if int(a["data-stage"]) == 0) / candidate["stages"][0]["peak_gib"], rel=1e-3
        )
    peak = candidate["memory"]
    assert {a["data-kind"]: float(a["data-gib"]) for a in parts if int(a["data-stage"]) == peak["peak_stage"]} == peak["breakdown_gib"]
    assert [float(a["data-gib"]) for a in parsed.with_class("capacity")] == [peak["capacity_gib"]]

    # Step time: the parts are the JSON's breakdown and add up to the step time.
    steps = {a["data-part"]: float(a["data-seconds"]) for a in parsed.with_class("step-part")}
    assert steps == candidate["prediction"]["breakdown_s"]
    assert sum(steps.values()) == pytest.approx(candidate["prediction"]["step_time_s"], rel=1e-9)

    text = " ".join(parsed.text)
    prediction = candidate["prediction"]
    bubble = prediction["breakdown_s"]["bubble_s"]
    assert f"{bubble * 1e3:,.1f} ms, {bubble / prediction['step_time_s']:.1%} of the step" in text
    band = prediction["range"]
    assert f"expected {band['step_time_low_s'] * 1e3:,.1f} ms to {band['step_time_high_s'] * 1e3:,.1f} ms" in text
    assert f"expected {band['tokens_per_s_low']:,.0f} to {band['tokens_per_s_high']:,.0f}" in text

    # Every chart is an image with a title and a description, and a table of its numbers follows.
    charts = [a for tag, a in parsed.tags if tag == "svg"]
    assert [a["data-chart"] for a in charts] == ["breakdown", "timeline", "memory"]
    ids = {a["id"]: tag for tag, a in parsed.tags if "id" in a}
    for chart in charts:
        assert chart["role"] == "img"
        assert [ids.get(i) for i in chart["aria-labelledby"].split()] == ["title", "desc"]
    assert sum(1 for tag, _a in parsed.tags if tag == "table") == 3  # candidates, step time, stages

    # Candidates side by side; the shown one marked, the others one link away.
    rows = parsed.with_class("candidate")
    assert [int(r["data-candidate"]) for r in rows] == list(range(len(plan["candidates"])))
    assert [int(r["data-candidate"]) for r in rows if "aria-current" in r] == [index]
    links = {a["href"] for tag, a in parsed.tags if tag == "a"}
    assert {f"/plans/{plan['id']}?candidate={i}" for i in range(len(plan["candidates"])) if i != index} <= links
    assert f"/v1/plans/{plan['id']}" in links
    assert {f"/v1/plans/{plan['id']}/export?format={f}&candidate={index}" for f in ("megatron", "deepspeed", "torchtitan", "nemo")} <= links
    return parsed


def test_interleaved_plan_page_shows_the_stored_json(api, plans):
    plan = plans["interleaved"]
    assert plan["status"] == "succeeded" and len(plan["candidates"]) >= 2
    best = plan["best"]["parallel"]
    assert (best["pp_size"], best["virtual_stages"]) == (4, 2)
    for index in range(len(plan["candidates"])):
        check_candidate_page(api, plan, index)
    parsed = check_candidate_page(api, plan, 0)
    assert len(parsed.with_class("pass")) == 2 * 4 * 2 * 8  # passes x stages x chunks x micro-batches
    text = " ".join(parsed.text)
    assert "interleaved 1F1B: 8 micro-batches through 4 stages of 2 chunks" in text
    assert "Train gpt3-1.3b on dgx-a100-80gb-x1 using 8 GPUs, 64 sequences of 2048 tokens" in text


def test_1f1b_plan_page_and_its_candidates(api, plans):
    plan = plans["1f1b"]
    assert plan["status"] == "succeeded" and len(plan["candidates"]) >= 2
    for index in range(len(plan["candidates"])):
        check_candidate_page(api, plan, index)
    parsed = page(api, f"/plans/{plan['id']}")
    assert "1F1B: " in " ".join(parsed.text)
    usable = [a for a in parsed.with_class("usable")]
    assert len(usable) == 1  # max_memory_fraction 0.9 draws the usable line under the capacity


def test_the_drawn_schedule_takes_the_cost_models_slots(plans):
    """The timeline's layout against solver.cost: m + (p - 1)/v slots in all, (p - 1)/v of
    them idle on every stage, and as many chunk activations in flight at once as the memory
    model counts; for the stored plan, the drawn bubble is the JSON's bubble_s."""
    for p, v, m in [(1, 1, 4), (2, 1, 1), (4, 1, 2), (4, 1, 8), (4, 2, 4), (4, 2, 12), (2, 3, 6), (8, 4, 16), (16, 1, 64)]:
        schedule = pipeline_schedule(p, v, m, forward_share=1 / 3)
        assert schedule.total_slots == pytest.approx(pipeline_slots(p, v, m), rel=1e-12)
        busy = m
        for stage in range(p):
            assert schedule.idle_slots(stage) == pytest.approx(busy * pipeline_bubble_fraction(p, v, m), rel=1e-9, abs=1e-12)
            events = sorted(
                (x.start_slot, 0 if x.kind is Pass.BACKWARD else 1, 1 if x.kind is Pass.FORWARD else -1)
                for x in schedule.passes if x.stage == stage
            )
            held = peak = 0
            for _time, _order, delta in events:
                held += delta
                peak = max(peak, held)
            assert peak == in_flight_micro_batches(stage, p, v, m) * v
    for name in ("interleaved", "1f1b"):
        plan = plans[name]
        candidate = plan["best"]
        parallel = candidate["parallel"]
        m = micro_batches(plan, candidate)
        slot_s = max(s["time_per_micro_batch_s"] for s in candidate["stages"])
        breakdown = candidate["prediction"]["breakdown_s"]
        busy_s = breakdown["compute_s"] + breakdown["recompute_s"] + breakdown["tp_comm_s"] + breakdown["grad_accumulation_s"]
        assert busy_s == pytest.approx(m * slot_s, rel=1e-9)
        schedule = pipeline_schedule(parallel["pp_size"], parallel["virtual_stages"], m, forward_share=1 / 3)
        assert (schedule.total_slots - m) * slot_s == pytest.approx(breakdown["bubble_s"], rel=1e-9)


def test_a_schedule_too_large_to_draw_is_told_in_words(plans):
    """Past MAX_DRAWN_PASSES chunk passes the timeline is a sentence, not thousands of bars; the
    bubble is still printed from the JSON."""
    document = copy.deepcopy(plans["interleaved"])
    document["request"]["training"]["global_batch_size"] = 64 * 1024  # 8,192 micro-batches of dp 2 x mbs 4
    html = plan_page(Plan.model_validate(document), 0)
    parsed = Elements(html)
    assert not parsed.with_class("pass") and 'id="timeline-too-large"' in html
    assert f"{2 * 4 * 2 * 8192:,} forward and backward passes are too many to draw" in " ".join(parsed.text)
    bubble = document["best"]["prediction"]["breakdown_s"]["bubble_s"]
    assert f"{bubble * 1e3:,.1f} ms" in " ".join(parsed.text)
    assert 2 * 4 * 2 * 8192 > MAX_DRAWN_PASSES


def test_an_infeasible_plan_renders_its_explanation(api, plans):
    plan = plans["infeasible"]
    assert plan["status"] == "infeasible"
    response = api.get(f"/plans/{plan['id']}")
    assert response.status_code == 200
    parsed = Elements(response.text)
    text = " ".join(parsed.text)
    explanation = plan["explanation"]
    assert explanation["summary"] in text and "Why nothing fits" in text
    for suggestion in explanation["suggestions"]:
        assert suggestion["change"] in text
    for rule in explanation["rejections"]:
        assert rule in text
    assert not parsed.with_class("pass") and not parsed.with_class("memory-part")
    # No candidate to show or export: the JSON link only.
    assert [a["href"] for tag, a in parsed.tags if tag == "a" and "/v1/" in a["href"]] == [f"/v1/plans/{plan['id']}"]


def test_unknown_plans_and_candidates_are_problem_documents(api, plans):
    assert_problem(api.get("/plans/no-such-plan"), 404)
    plan = plans["interleaved"]
    beyond = assert_problem(api.get(f"/plans/{plan['id']}", params={"candidate": len(plan["candidates"])}), 404)
    assert error_fields(beyond) == ["query.candidate"]
    assert error_fields(assert_problem(api.get(f"/plans/{plan['id']}", params={"candidate": -1}), 422)) == ["query.candidate"]


def test_the_list_page_filters_like_the_api(api, plans):
    interleaved, infeasible = plans["interleaved"], plans["infeasible"]
    listed = page(api, "/plans", model="gpt3-1.3b", status="succeeded")
    links = {a["href"] for tag, a in listed.tags if tag == "a"}
    assert f"/plans/{interleaved['id']}" in links and f"/plans/{infeasible['id']}" not in links
    assert len(listed.with_class("plan")) == len(api.get("/v1/plans", params={"model": "gpt3-1.3b", "status": "succeeded", "limit": 50}).json()["items"])
    infeasible_only = page(api, "/plans", model="gpt3-175b", status="infeasible", cluster="")
    assert f"/plans/{infeasible['id']}" in {a["href"] for tag, a in infeasible_only.tags if tag == "a"}
    assert page(api, "/plans", model="no-such-model").with_class("plan") == []


@pytest.fixture(scope="module")
def sweep(live_server: LiveServer) -> dict:
    with httpx.Client(base_url=live_server.base_url, timeout=120.0) as client:
        response = client.post("/v1/sweeps", json=SWEEP_BODY)
        assert response.status_code == 201, response.text
        return response.json()


def test_the_sweep_page_shows_its_charts_and_links_every_plan(api, sweep):
    parsed = page(api, f"/sweeps/{sweep['id']}")
    charts = [a["data-chart"] for tag, a in parsed.tags if tag == "svg"]
    assert charts == ["scaling", "pareto"]
    ids = [a["id"] for _tag, a in parsed.tags if "id" in a]
    assert len(ids) == len(set(ids))  # the two charts' ids do not collide
    # The charts are the API's own SVG, inline: the same series.
    scaling = api.get(sweep["charts"]["scaling_svg"]).text
    assert len(parsed.with_class("series")) == scaling.count('class="series"') + api.get(sweep["charts"]["pareto_svg"]).text.count('class="series"')
    rows = parsed.with_class("point")
    assert [int(r["data-point"]) for r in rows] == [p["index"] for p in sweep["points"]]
    links = {a["href"] for tag, a in parsed.tags if tag == "a"}
    planned = [p["plan_id"] for p in sweep["points"] if p["plan_id"]]
    assert planned and {f"/plans/{plan_id}" for plan_id in planned} <= links
    text = " ".join(parsed.text)
    for series in sweep["series"]:
        if series["fit"] is not None:
            assert f"{series['fit']['b']:.3f}" in text
    for plan_id in planned[:2]:
        assert api.get(f"/plans/{plan_id}").status_code == 200
    assert_problem(api.get("/sweeps/no-such-sweep"), 404)


def test_the_pages_are_not_api_operations(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith(("/plans", "/sweeps"))]

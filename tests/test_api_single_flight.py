"""Issue 17, defect 5, through HTTP on SQLite and Postgres: identical plan requests that arrive
while one of them is searching share its search. All get the same plan, none is refused for a
busy solver, and the service runs one search, not one per request."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from conftest import unique_name

CLIENTS = 8


def _searches(api) -> float:
    """Searches the service has finished, from its solve-time histogram (any outcome)."""
    text = api.get("/metrics").text
    return sum(float(v) for v in re.findall(r"^partitura_solve_duration_seconds_count\{[^}]*\} (\S+)$", text, re.M))


def _coalesced(api) -> float:
    match = re.search(r"^partitura_plan_requests_coalesced_total (\S+)$", api.get("/metrics").text, re.M)
    return float(match.group(1)) if match else 0.0


def test_identical_concurrent_requests_share_one_search(api):
    # A GPT-3-sized shape on 1,024 GPUs: a search long enough (about half a second) for the
    # requests to overlap; a fresh name so that nothing is stored for it yet.
    model = {"name": unique_name("flight"), "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
             "vocab_size": 51200, "seq_length": 2048}
    body = {"model": model, "cluster": "dgx-a100-80gb-x128", "training": {"global_batch_size": 1536, "seq_length": 2048},
            "top_k": 2}
    searches_before, coalesced_before = _searches(api), _coalesced(api)
    with ThreadPoolExecutor(CLIENTS) as clients:
        responses = list(clients.map(lambda _: api.post("/v1/plans", json=body), range(CLIENTS)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (CLIENTS - 1) + [201], [r.text[:200] for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    assert _searches(api) - searches_before == 1
    # Every request but the leader was answered either by waiting for it or from the store.
    assert 0 <= _coalesced(api) - coalesced_before <= CLIENTS - 1

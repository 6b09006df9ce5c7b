"""Issue 17, defect 4: bounded input, through HTTP on SQLite and Postgres. A body over the limit is
a 413 before it is read whole; every list and name a request may carry has a length; a problem
document never quotes back more than a clipped piece of what it was sent."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from app.core.config import DEFAULT_MAX_BODY_BYTES
from app.core.limits import DRAIN_MAX_BYTES, drain
from app.profiles.schemas import PROFILE_EXAMPLE
from conftest import assert_problem, error_fields, unique_name

TRAINING = {"global_batch_size": 64, "seq_length": 2048}
# The most a problem document may take however large the input: detail, fields and reasons are
# clipped (app.core.problems).
PROBLEM_MAX_BYTES = 8 * 1024


def test_a_body_over_the_limit_is_a_413_problem(api):
    body = {"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": TRAINING,
            "constraints": {"tp_size": [1] * (DEFAULT_MAX_BODY_BYTES // 2)}}
    response = api.post("/v1/plans", json=body)
    problem = assert_problem(response, 413)
    assert problem["title"] == "Request body too large" and str(DEFAULT_MAX_BODY_BYTES) in problem["detail"]
    assert len(response.content) < PROBLEM_MAX_BYTES


def _connect(live_server) -> socket.socket:
    address = urlsplit(live_server.base_url)
    return socket.create_connection((address.hostname, address.port), timeout=60)


def _read_response(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length, read off a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        assert chunk, f"the server closed the connection before answering: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = connection.recv(65536)
        assert chunk, "the server closed the connection inside its answer"
        body += chunk
    return int(status_line.split()[1]), headers, body


def _post_head(length: int) -> bytes:
    return (f"POST /v1/evaluations HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_a_refused_body_is_read_through_so_its_sender_gets_the_413(live_server):
    """A body over the limit (within the drain bound) is read and dropped before the 413 (RFC 9112
    Sec. 9.6: closing with the body unread resets the connection, and the client loses the answer),
    and the connection then carries the next request."""
    body = json.dumps({"model": "gpt3-350m", "filler": "x" * (DEFAULT_MAX_BODY_BYTES + 2**20)}).encode()
    with _connect(live_server) as connection:
        connection.sendall(_post_head(len(body)) + body)
        status, headers, answer = _read_response(connection)
        assert status == 413 and headers["content-type"].startswith("application/problem+json")
        assert json.loads(answer)["title"] == "Request body too large"
        assert headers.get("connection") != "close"
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        status, _, answer = _read_response(connection)
        assert status == 200 and json.loads(answer)["status"] == "ok"


def test_a_body_beyond_the_drain_bound_is_refused_at_once(live_server):
    """A length past the limit and the drain bound is answered before any of the body arrives, and
    the connection is closed: nothing of it is read."""
    with _connect(live_server) as connection:
        connection.sendall(_post_head(DEFAULT_MAX_BODY_BYTES + DRAIN_MAX_BYTES + 1))
        status, headers, answer = _read_response(connection)
        assert status == 413 and headers["connection"] == "close"
        assert str(DEFAULT_MAX_BODY_BYTES) in json.loads(answer)["detail"]


def test_a_client_that_waits_to_send_gets_the_413_instead_of_100_continue(live_server):
    """With ``Expect: 100-continue`` (curl sends it for bodies over 1 MB) the body is not asked for:
    the answer is the 413 at once, and the connection is closed."""
    head = _post_head(DEFAULT_MAX_BODY_BYTES + 1).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    with _connect(live_server) as connection:
        connection.sendall(head)
        status, headers, _ = _read_response(connection)
        assert status == 413 and headers["connection"] == "close"


def _receiver(messages: list[dict], then_wait: bool = False):
    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        if then_wait:
            await asyncio.Event().wait()
        return {"type": "http.disconnect"}
    return receive


@pytest.mark.parametrize("messages, max_bytes, then_wait, read_through", [
    ([{"type": "http.request", "body": b"a" * 10, "more_body": True}, {"type": "http.request", "body": b"b"}], 100, False, True),
    ([{"type": "http.request", "body": b"a" * 10, "more_body": True}] * 3, 15, False, False),  # past the bound
    ([{"type": "http.request", "body": b"a", "more_body": True}], 100, False, False),  # the client left
    ([{"type": "http.request", "body": b"a", "more_body": True}], 100, True, False),  # the client stalls
])
def test_drain_reads_a_body_to_its_end_or_gives_up(messages, max_bytes, then_wait, read_through):
    receive = _receiver(list(messages), then_wait)
    assert asyncio.run(drain(receive, max_bytes=max_bytes, max_s=0.2)) is read_through


def test_a_body_sent_without_a_length_is_cut_off_at_the_limit(live_server):
    def chunks():
        yield b'{"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": {"global_batch_size": 64, '
        filler = b" " * 65536
        for _ in range(DEFAULT_MAX_BODY_BYTES // len(filler) + 2):
            yield filler
        yield b'"seq_length": 2048}}'

    with httpx.Client(base_url=live_server.base_url, timeout=60) as client:
        response = client.post("/v1/evaluations", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert_problem(response, 413)


def test_a_long_model_name_is_a_small_422(api):
    name = "x" * 200_000
    response = api.post("/v1/plans", json={"model": name, "cluster": "dgx-a100-80gb-x1", "training": TRAINING})
    problem = assert_problem(response, 422)
    assert "body.model" in error_fields(problem)
    assert len(response.content) < PROBLEM_MAX_BYTES


@pytest.mark.parametrize("constraints, field", [
    ({"tp_size": [1] * 5000}, "body.constraints.tp_size"),
    ({"recompute": ["none"] * 5000}, "body.constraints.recompute"),
    ({"sequence_parallel": [True] * 5000}, "body.constraints.sequence_parallel"),
])
def test_a_long_list_of_allowed_values_is_a_422(api, constraints, field):
    body = {"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": TRAINING, "constraints": constraints}
    response = api.post("/v1/plans", json=body)
    problem = assert_problem(response, 422)
    assert field in error_fields(problem)
    assert len(response.content) < PROBLEM_MAX_BYTES


def test_a_long_per_chunk_list_is_a_422(api):
    body = {"model": "gpt3-350m", "cluster": "dgx-a100-80gb-x1", "training": TRAINING,
            "parallel": {"dp_size": 8, "stage_layers": [1] * 5000}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "body.parallel.stage_layers" in error_fields(problem)


def test_an_error_quotes_back_only_a_clipped_piece_of_a_huge_value(api):
    """The profile parser's reason quotes the bad value (``got '...'``); the answer clips it."""
    document = copy.deepcopy(PROFILE_EXAMPLE)
    document["model"]["name"] = unique_name("clip")
    document["layers"][1]["kind"] = "transformer" * 100_000  # 1.1 MB, under the body limit
    response = api.post("/v1/profiles", json=document)
    problem = assert_problem(response, 422)
    assert "body.layers[1].kind" in error_fields(problem) or "layers[1].kind" in problem["detail"]
    assert "…" in problem["detail"]
    assert len(response.content) < PROBLEM_MAX_BYTES


def test_a_catalog_entry_posted_with_an_unknown_long_gpu_name_is_a_small_answer(api):
    cluster = {"name": "long-gpu-name", "gpu": "g" * 100_000, "gpus_per_node": 8, "num_nodes": 1,
               "intra_node_gbytes_per_s": 300.0, "inter_node_gbytes_per_s": 25.0}
    response = api.post("/v1/catalog/clusters", json=cluster)
    assert response.status_code == 422, response.text
    assert len(response.content) < PROBLEM_MAX_BYTES


@pytest.mark.parametrize("field, value", [
    ("notes", ["measured on a quiet node"] * 10_000),
    ("measurement", {f"setting_{i}": i for i in range(10_000)}),
])
def test_a_profile_with_a_long_list_of_notes_or_settings_is_a_422(api, field, value):
    """A profile's free-form notes and measurement settings have lengths too: 10,000 of them
    (a few hundred kB, under the body limit) used to be stored whole."""
    document = copy.deepcopy(PROFILE_EXAMPLE)
    document["model"]["name"] = unique_name("long-profile")
    document[field] = value
    response = api.post("/v1/profiles", json=document)
    problem = assert_problem(response, 422)
    assert f"body.{field}" in error_fields(problem)
    assert len(response.content) < PROBLEM_MAX_BYTES

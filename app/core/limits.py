"""Bounded input: a request body larger than the service takes (``Settings.max_body_bytes``) is
answered 413 without being kept, so a huge value cannot fill the server's memory. (What a problem
document quotes back is clipped in ``app.core.problems``.)

The refused body is read and dropped before the answer, up to ``DRAIN_MAX_BYTES`` more and for at
most ``DRAIN_MAX_S``. A server that closes a connection while the client is still sending makes the
client's kernel receive a TCP reset, which discards the answer before the client reads it: the
client sees "connection reset by peer" instead of the 413 (RFC 9112 Sec. 9.6, "the TCP reset
problem"; nginx's ``lingering_close`` reads on for the same reason, up to ``lingering_time``, 30 s
by default). uvicorn closes the transport as soon as a ``connection: close`` answer is sent, and
hands the application no more of the body after it, so the reading has to come first. A body read
to its end leaves the connection usable for the next request; one larger than the bound is answered
at once, with the connection closed."""

from __future__ import annotations

import asyncio
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.problems import PROBLEM_MEDIA_TYPE, Problem


def too_large(limit_bytes: int) -> Problem:
    return Problem(
        status=413,
        title="Request body too large",
        detail=f"the request body is larger than {limit_bytes} bytes, the most this service takes",
        slug="body-too-large",
    )


async def send_problem(scope: Scope, send: Send, problem: Problem, close: bool = False) -> None:
    """Answer with ``problem`` from below the framework (its handlers are not reached here)."""
    body = json.dumps(problem.to_dict(instance=scope.get("path"))).encode()
    headers = [(b"content-type", PROBLEM_MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]
    if close:  # the rest of the body is not read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# How much of a refused body is read and dropped so that its sender gets the 413 (module docstring).
DRAIN_MAX_BYTES = 64 * 2**20
DRAIN_MAX_S = 10.0


async def drain(receive: Receive, max_bytes: int = DRAIN_MAX_BYTES, max_s: float = DRAIN_MAX_S) -> bool:
    """Read and drop the rest of a request body, up to ``max_bytes`` and ``max_s``; True when its
    end was reached (the connection can carry another request), False when the bound, the time or
    the client's disconnect came first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_s
    dropped = 0
    while dropped <= max_bytes:
        try:
            message = await asyncio.wait_for(receive(), timeout=max(deadline - loop.time(), 0.0))
        except TimeoutError:
            return False
        if message["type"] != "http.request":
            return False
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
    return False


class BodyLimitMiddleware:
    """Answer 413 when ``Content-Length`` says the body is over ``max_body_bytes``; a body sent
    without a length (chunked) is read first, up to the limit, and answered 413 once it passes it
    (the framework would otherwise swallow an error raised while it parses the body). Either way
    the rest of the body, where it is within the drain bound, is read and dropped before the answer
    (module docstring)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            length = int(declared) if declared.isdigit() else None
            if length is not None and length > self.max_body_bytes:
                # A client that waits for "100 Continue" before sending gets the 413 instead and sends
                # nothing (RFC 9110 Sec. 10.1.1; uvicorn says 100 only when the body is first read).
                waits = headers.get(b"expect", b"").lower() == b"100-continue"
                fits_drain = length <= self.max_body_bytes + DRAIN_MAX_BYTES
                drained = not waits and fits_drain and await drain(receive)
                await self._refuse(scope, send, drained)
                return
            await self.app(scope, receive, send)  # the server holds the body to its length
            return
        buffered: list[Message] = []
        size = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                drained = not message.get("more_body", False) or await drain(receive)
                await self._refuse(scope, send, drained)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, drained: bool) -> None:
        """The 413; the connection closes unless the whole body was read (``drained``)."""
        await send_problem(scope, send, too_large(self.max_body_bytes), close=not drained)


BODY_METHODS = {"POST", "PUT", "PATCH"}


def unsupported_media_type(content_type: str) -> Problem:
    return Problem(
        status=415,
        title="Unsupported media type",
        detail=f"request bodies are JSON (content-type application/json), got {content_type or 'none'!r}"[:300],
        slug="unsupported-media-type",
    )


class JsonOnlyMiddleware:
    """Answer 415 when a request with a body says it is not JSON (``application/json`` or a
    ``+json`` type), instead of failing to read it as JSON (a 422 that blames the fields)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in BODY_METHODS:
            headers = dict(scope.get("headers") or [])
            length = headers.get(b"content-length")
            has_body = length is None and b"transfer-encoding" in headers or (length is not None and length != b"0")
            media_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower().decode("latin-1")
            if has_body and not (media_type == "application/json" or media_type.endswith("+json")):
                await send_problem(scope, send, unsupported_media_type(media_type))
                return
        await self.app(scope, receive, send)

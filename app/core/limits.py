"""Bounded input: a request body larger than the service takes (``Settings.max_body_bytes``) is
answered 413 before it is read whole, so a huge value cannot fill the server's memory. (What a
problem document quotes back is clipped in ``app.core.problems``.)"""

from __future__ import annotations

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


class BodyLimitMiddleware:
    """Answer 413 when ``Content-Length`` says the body is over ``max_body_bytes``; a body sent
    without a length (chunked) is read first, up to the limit, and answered 413 once it passes it
    (the framework would otherwise swallow an error raised while it parses the body)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                await self._refuse(scope, send)
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
                await self._refuse(scope, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        await send_problem(scope, send, too_large(self.max_body_bytes), close=True)


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

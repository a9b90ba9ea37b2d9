"""The /v1 gate: the order in which a data-plane request is judged.

1. Authentication (``x-service-key``) first: a request without a valid key
   gets 401 whatever its body.
2. A body sent with a non-JSON content type gets 415; one over
   ``max_body_bytes`` gets 400.
3. Then the route: body parsing (400 malformed JSON / out-of-range values,
   422 wrong shape), the rate-limit bucket, the use case.
4. A request still running after ``timeout_s`` gets 504 ``timeout``.

Unauthenticated paths: ``/healthz`` and ``/openapi.json`` (not under /v1).
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from actors.facade import Memesh
from api.errors import error_response, memesh_error_response
from mesh.errors import ErrorCode, MemeshError

KEY_HEADER = "x-service-key"
_BODY_METHODS = {"POST", "PUT", "PATCH"}


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class _BodyTooLarge(Exception):
    """Raised from ``receive`` once a body (chunked or not) passes the cap."""


class V1Gate:
    def __init__(self, app: ASGIApp, memesh: Memesh, max_body_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.memesh = memesh
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            principal = await self.memesh.identity.authenticate(headers.get(KEY_HEADER))
        except MemeshError as exc:
            await memesh_error_response(exc)(scope, receive, send)
            return
        if scope["method"] in _BODY_METHODS:
            length = int(headers.get("content-length", "0") or 0) if headers.get("content-length", "0").isdigit() else -1
            has_body = length != 0 or "transfer-encoding" in headers
            if has_body and not _is_json(headers.get("content-type", "")):
                await error_response(415, ErrorCode.VALIDATION, "send the body as application/json")(scope, receive, send)
                return
            if length > self.max_body_bytes:
                await error_response(400, ErrorCode.VALIDATION, f"body exceeds {self.max_body_bytes} bytes")(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = principal
        started = False
        received = 0

        async def receive_capped() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _BodyTooLarge
            return message

        async def send_tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            async with asyncio.timeout(self.timeout_s):
                await self.app(scope, receive_capped, send_tracking)
        except TimeoutError:
            if not started:
                await error_response(504, ErrorCode.TIMEOUT, "the request took too long")(scope, receive, send)
        except _BodyTooLarge:
            if not started:
                await error_response(400, ErrorCode.VALIDATION, f"body exceeds {self.max_body_bytes} bytes")(scope, receive, send)


def principal_of(scope_state: dict[str, Any]) -> Any:
    return scope_state["principal"]

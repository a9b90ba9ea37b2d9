"""What the /v1 gate and the /admin/api gate share: header reading, the body
checks, the cross-origin check, refusals (HTTP or before a WebSocket upgrade),
and running the route under the body cap and the request timeout. (Who the
caller is, and what it is charged, is :mod:`api.admission`.)

Every refusal is the spec's envelope from :mod:`api.errors`; nothing here picks
a status for a domain error.
"""

from __future__ import annotations

import asyncio
import json

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from mesh.errors import ErrorCode

_DENIAL_EXTENSION = "websocket.http.response"


def header_pairs(scope: Scope) -> list[tuple[str, str]]:
    """Every header the request sent, in order, lower-cased names (a repeated header is there each time)."""
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]


def header_map(scope: Scope, pairs: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """The request's headers, lower-cased names; a repeated header keeps its last value (``pairs``: its
    :func:`header_pairs`, when the caller has them already)."""
    return dict(header_pairs(scope) if pairs is None else pairs)


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def body_refusal(scope: Scope, headers: dict[str, str], max_body_bytes: int) -> Response | None:
    """415 for a body sent with a non-JSON content type, 400 for a declared length over the cap; else None.
    Whatever the method: a GET or a DELETE that sends a body is held to the same rules."""
    if scope["type"] != "http":
        return None
    declared = headers.get("content-length", "0") or "0"
    length = int(declared) if declared.isdigit() else -1
    has_body = length != 0 or "transfer-encoding" in headers
    if has_body and not is_json(headers.get("content-type", "")):
        return error_response(415, ErrorCode.VALIDATION, "send the body as application/json")
    if length > max_body_bytes:
        return error_response(400, ErrorCode.VALIDATION, f"body exceeds {max_body_bytes} bytes")
    return None


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def own_origin(scope: Scope, headers: dict[str, str]) -> str:
    """This server's origin as the request reached it (``ws``/``wss`` counted as ``http``/``https``)."""
    scheme = {"ws": "http", "wss": "https"}.get(scope.get("scheme", "http"), scope.get("scheme", "http"))
    return f"{scheme}://{headers.get('host', '')}".lower()


def cross_origin(scope: Scope, headers: dict[str, str], also_allowed: frozenset[str]) -> bool:
    """True for a browser request from another origin that could change state: a non-safe method or a
    WebSocket handshake carrying an ``Origin`` that is neither this server's nor one of ``also_allowed``.
    Requests without ``Origin`` (scripts, the CLI) are not browser cross-origin requests."""
    origin = headers.get("origin")
    if origin is None or (scope["type"] == "http" and scope["method"] in SAFE_METHODS):
        return False
    origin = origin.lower().rstrip("/")
    return origin != own_origin(scope, headers) and origin not in also_allowed


async def refuse(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer with ``response``: as HTTP, or for a WebSocket as an HTTP denial before any upgrade.

    A server without the ASGI denial-response extension gets a plain close
    (its handshake answers 403); uvicorn has the extension.
    """
    if scope["type"] == "websocket" and _DENIAL_EXTENSION not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    await response(scope, receive, send)  # Starlette prefixes the messages with "websocket." for a WebSocket scope


class _BodyTooLarge(Exception):
    """Raised from ``receive`` once a body (chunked or not) passes the cap."""


async def run_guarded(app: ASGIApp, scope: Scope, receive: Receive, send: Send, max_body_bytes: int, timeout_s: float) -> None:
    """Run an HTTP request: a body growing past ``max_body_bytes`` gets 400, one running past
    ``timeout_s`` gets 504 ``timeout`` (when no response has started yet). The timeout is the
    request state's ``deadline`` (an :class:`asyncio.Timeout`): a route that turns into a stream
    bounded otherwise (an MCP listen stream) may reschedule it."""
    started = False
    received = 0

    async def receive_capped() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_body_bytes:
                raise _BodyTooLarge
        return message

    async def send_tracking(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        async with asyncio.timeout(timeout_s) as deadline:
            scope.setdefault("state", {})["deadline"] = deadline
            await app(scope, receive_capped, send_tracking)
    except TimeoutError:
        if not started:
            await error_response(504, ErrorCode.TIMEOUT, "the request took too long")(scope, receive, send)
    except _BodyTooLarge:
        if not started:
            await error_response(400, ErrorCode.VALIDATION, f"body exceeds {max_body_bytes} bytes")(scope, receive, send)


# ------------------------------------------- a protocol door's look at the body
async def read_body(receive: Receive) -> bytes | None:
    """The whole body (its size is capped by the ``receive`` of :func:`run_guarded`); None on a disconnect."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def json_document(body: bytes) -> object:
    """The body parsed as JSON; None when it is not JSON (or nests past the parser's depth)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


MAX_JSON_VALUES = 10_000  # values (objects, arrays, scalars) in one JSON-RPC message: ours take a few hundred
MAX_JSON_DEPTH = 32  # nesting of one JSON-RPC message: ours nest at most about ten deep


def json_shape_refusal(document: object) -> str | None:
    """Why a parsed JSON-RPC body is too large in shape to hand to a protocol SDK, or None.

    The SDKs turn every value of a message into objects of their own on the event loop every request
    shares: 400,000 values under the body cap held it for 9 s. Counting stops at the first value past
    :data:`MAX_JSON_VALUES` or :data:`MAX_JSON_DEPTH`, so the check costs at most that many steps (and one
    ``len`` of the container that breaks it).
    """
    seen = 0
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_JSON_DEPTH:
            return f"the message nests deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(value, dict | list):
            if seen + len(stack) + len(value) > MAX_JSON_VALUES:
                return f"the message holds more than {MAX_JSON_VALUES} JSON values"
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then waits on the real one (for the disconnect)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed

"""What the WebSocket streams (``/v1/inbox``, the observatory) share: refusal, error frames, close codes.

Guarantees:
- A handshake refused before the upgrade gets the HTTP answer with the error
  envelope of :mod:`api.errors` (:func:`deny`), never an accepted socket.
- An accepted socket closed for an error (:func:`close_with`) first gets the
  frame ``{"error": {"code", "message"}}``, then the close: 1008 for the
  client's fault (a 4xx code), 1011 for the server's (5xx), unless the caller
  names a code. Closed without an error, it gets no frame and 1001 (the server
  is going away). A socket no longer connected is left alone, and a failure
  to send (the peer is gone) is swallowed.
- A handshake to a path with no stream (:func:`websocket_not_found`) is 404 in
  the envelope, or under ``/v1`` 401 first when its key is missing or invalid
  (Starlette's router closed it unanswered, which uvicorn sends as 403 with no body).
- :func:`first_to_finish` runs a stream's tasks until one finishes, then
  cancels the others and waits for them, so no task outlives the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from fastapi import WebSocket
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketState

from api.admission import authenticate_at_gate
from api.errors import STATUS, envelope, memesh_error_response
from api.gate_common import header_pairs, refuse
from head.facade import Memesh
from mesh.errors import ErrorCode, MemeshError, NotFound

POLICY_VIOLATION = 1008
INTERNAL_ERROR = 1011
GOING_AWAY = 1001


def error_frame(code: ErrorCode | str, message: str) -> str:
    """The text frame ``{"error": {"code", "message"}}``."""
    return json.dumps(envelope(code, message))


async def deny(websocket: WebSocket, error: MemeshError) -> None:
    """Refuse the handshake with ``error``'s HTTP status and envelope (429 keeps Retry-After)."""
    await websocket.send_denial_response(memesh_error_response(error))


def websocket_not_found(memesh: Memesh, fallback: ASGIApp) -> ASGIApp:
    """The router's default for what no route takes: ``fallback`` for HTTP, and for a WebSocket handshake the
    envelope before the upgrade, as the /v1 gate answers HTTP (401 under ``/v1`` without a valid key, else 404)."""

    async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await fallback(scope, receive, send)
            return
        error: MemeshError = NotFound("no WebSocket stream at this path")
        if scope["path"].startswith("/v1/"):
            try:
                await authenticate_at_gate(memesh, scope, header_pairs(scope))  # the /v1 gate's own check
            except MemeshError as exc:
                error = exc
        await refuse(memesh_error_response(error), scope, receive, send)

    return not_found


def close_code(error: MemeshError) -> int:
    """1008 when the client is at fault (a 4xx status), 1011 when the server is (5xx)."""
    return POLICY_VIOLATION if STATUS[error.code][0] < 500 else INTERNAL_ERROR


async def close_with(websocket: WebSocket, error: MemeshError | None, code: int | None = None) -> None:
    """Send ``error``'s frame, then close (``code``, else :func:`close_code`); without ``error``, close 1001."""
    if websocket.application_state is not WebSocketState.CONNECTED:
        return
    with contextlib.suppress(Exception):
        if error is None:
            await websocket.close(code=GOING_AWAY)
            return
        await websocket.send_text(error_frame(error.code, error.message))
        await websocket.close(code=code or close_code(error))


async def first_to_finish(*tasks: asyncio.Task[Any]) -> set[asyncio.Task[Any]]:
    """Wait until one of ``tasks`` finishes; cancel the others and wait for them. The finished ones."""
    done, pending = await asyncio.wait(set(tasks), return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    return done

"""The observatory under ``/admin/api/observatory`` (snapshot and WebSocket stream).

Both routes sit behind the admin session gate (:mod:`api.console.gate`), which
puts the operator's principal in the scope state before anything here runs. A
ServiceAdmin sees every tenant; a ProjectAdmin only events whose
``tenant_id`` is its own (spec rule 11, section 6).

Stream protocol (``GET /admin/api/observatory/stream``, docs/observatory.md):
- refused before the upgrade, as HTTP with the error envelope: a malformed
  ``since`` (400), more than ``max_concurrent_streams`` streams (429);
- server -> client, one JSON text frame each: the retained window's events
  oldest first (received at or after ``since``), then live events as they are
  recorded, with no gap and no duplicate between the two; ``{"resync":true}``
  where this consumer fell behind and events were dropped;
  ``{"error": {...}}`` before closing with 1011 when the observatory is gone;
- client -> server: nothing is expected; frames are ignored.

The operator's session is checked again before every page and batch sent, and
at once when the operator's agent is revoked, suspended or rotated, or a
session of it logs out, on this head: a failed check closes the stream (1008)
before anything else is sent (frames and close codes: :mod:`api.websocket`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketState

from api.data.schemas import QueryInt
from api.deps import Core, Operator, operator_of
from api.websocket import close_with, deny, first_to_finish
from head.observatory_hub import ObservatoryHub, Resync, Subscription
from mesh.errors import MemeshError, ValidationFailed
from mesh.identity import Principal
from mesh.times import parse_rfc3339

log = logging.getLogger(__name__)

router = APIRouter(prefix="/admin/api/observatory")

DEFAULT_LIMIT = 1_000
MAX_LIMIT = 10_000
STREAM_WAIT_S = 5.0
RESYNC_FRAME = '{"resync":true}'


def parse_since(value: str | None) -> float | None:
    """``since`` as epoch seconds (None when absent); ValidationFailed unless an RFC 3339 date-time."""
    if value is None:
        return None
    if len(value) > 6 and value[-6] == " ":  # an unencoded "+00:00" that the query string decoded to " 00:00"
        value = f"{value[:-6]}+{value[-5:]}"
    try:
        return parse_rfc3339(value).timestamp()
    except ValueError as exc:
        raise ValidationFailed("since must be an RFC 3339 date-time such as 2026-01-02T03:04:05Z") from exc


def tenant_filter(principal: Principal) -> str | None:
    """The one tenant an operator may watch, or None for a ServiceAdmin (every tenant)."""
    return None if principal.is_service_admin else principal.tenant_id


@router.get("/events", include_in_schema=False)
async def events(operator: Operator, core: Core, since: str | None = None, limit: QueryInt = DEFAULT_LIMIT) -> JSONResponse:
    """The newest ``limit`` retained events (at most MAX_LIMIT) received at or after ``since``; newest last."""
    if limit < 1:
        raise ValidationFailed("limit must be at least 1")
    found = await core.observatory.snapshot(parse_since(since), min(limit, MAX_LIMIT), tenant_filter(operator))
    return JSONResponse(found)


@router.websocket("/stream")
async def stream(websocket: WebSocket, core: Core) -> None:
    hub = core.observatory
    try:
        operator = operator_of(websocket)
        since = parse_since(websocket.query_params.get("since"))
        subscription = await hub.subscribe(tenant_filter(operator))
    except MemeshError as exc:
        await deny(websocket, exc)
        return
    readmit = _readmission(websocket)
    try:
        with _watch(websocket) as changed:
            await websocket.accept()
            sender = asyncio.create_task(_send(websocket, hub, subscription, since, readmit))
            receiver = asyncio.create_task(_until_disconnect(websocket))
            guard = asyncio.create_task(_until_refused(changed, readmit))
            done = await first_to_finish(sender, receiver, guard)
            ended = next((t for t in (guard, sender) if t in done and not t.cancelled()), None)
            if ended is not None:
                failure = ended.exception()
                if failure is not None and not isinstance(failure, MemeshError):
                    log.warning("observatory stream stopped: %r", failure)
                await close_with(websocket, failure if isinstance(failure, MemeshError) else None)
    finally:
        subscription.close()


async def _until_refused(changed: asyncio.Event, readmit: Readmit) -> None:
    """Raises (Unauthorized, Forbidden) as soon as a change to the operator (revoke, suspend, logout)
    fails the session check; never returns otherwise."""
    while True:
        await changed.wait()
        changed.clear()
        await readmit()


Readmit = Callable[[], Awaitable[object]]


def _watch(websocket: WebSocket) -> contextlib.AbstractContextManager[asyncio.Event]:
    """The gate's change watch for this socket's operator (an event never set where no gate set one)."""
    watch: Callable[[], contextlib.AbstractContextManager[asyncio.Event]] | None = websocket.scope.get("state", {}).get("watch")
    return watch() if watch is not None else contextlib.nullcontext(asyncio.Event())


def _readmission(websocket: WebSocket) -> Readmit:
    """The gate's session check for this socket (a no-op where no gate set one: in-process tests)."""
    readmit: Readmit | None = websocket.scope.get("state", {}).get("readmit")

    async def nothing() -> object:
        return None

    return readmit or nothing


async def _send(
    websocket: WebSocket, hub: ObservatoryHub, subscription: Subscription, since: float | None, readmit: Readmit
) -> None:
    """Replay, then live events until the hub ends the subscription (or the socket closes).

    The operator's session is checked again before every page and batch sent, and at least every
    ``STREAM_WAIT_S``: a revoked or suspended agent, or a logged-out session, gets an error frame and
    the close (1008) instead of the next event."""
    async for page in hub.replay(subscription, since):
        await readmit()
        for event in page:
            await websocket.send_text(_frame(event))
    while websocket.application_state is WebSocketState.CONNECTED:
        items = await subscription.take(STREAM_WAIT_S)
        await readmit()
        for item in items:
            await websocket.send_text(RESYNC_FRAME if isinstance(item, Resync) else _frame(item[1]))
        if subscription.ended and not items:
            if subscription.failure is not None:
                raise subscription.failure
            return


async def _until_disconnect(websocket: WebSocket) -> None:
    """Returns when the client goes away; whatever it sends is ignored."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return


def _frame(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))

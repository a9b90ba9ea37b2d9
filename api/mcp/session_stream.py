"""Inbox push for handshake-era hosts, without server-side sessions.

The handshake era pushes on a ``GET`` stream that belongs to a session id.
memesh stays stateless (any head answers any call), so its session id is a
marker with nothing behind it:

Guarantees:
- An ``initialize`` (handshake era) is answered with an ``Mcp-Session-Id``:
  a fresh random id that no head stores. Every later request is served
  statelessly whatever id it carries; identity always comes from the key.
- ``resources/subscribe`` is served for the caller's own inbox
  (``memesh://agents/{agent_id}/inbox``) and refused ``forbidden: ...`` for
  any other URI; it keeps no state.
- ``GET /mcp`` with a session id opens the caller's notification stream
  (SSE): ``notifications/resources/updated`` for the caller's own inbox each
  time a delivery for the agent commits, on any head. The inbox is the one
  resource memesh notifies about, and with no per-session state every
  notification stream of the agent carries it, on whichever head it lands.
- The stream holds one of the head's inbox stream slots (the WebSocket's caps;
  past one: 429 ``quota_exceeded`` before the stream opens), is not cut by the
  request timeout, and ends at once when its key fails on this head (within
  :data:`api.admission.RECHECK_S` on another). ``DELETE`` with a session id
  answers 204: there is nothing to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator

from mcp.server.subscriptions import ResourceUpdated, ServerEvent, SubscriptionBus
from sse_starlette import EventSourceResponse
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from api.admission import presented_key
from api.errors import memesh_error_response
from api.gate_common import header_map, header_pairs
from api.mcp.push import InboxWatches, held_stream, inbox_uri
from head.facade import Memesh
from mesh.errors import MemeshError
from mesh.identity import Principal

SESSION_HEADER = "mcp-session-id"
PROTOCOL_HEADER = "mcp-protocol-version"
PING_S = 15


def new_session_id() -> str:
    return uuid.uuid4().hex


def with_session_id(send: Send, session_id: str) -> Send:
    """``send`` that adds ``Mcp-Session-Id`` to a successful response's headers."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] < 400:
            headers = [*message.get("headers", []), (SESSION_HEADER.encode(), session_id.encode())]
            message = {**message, "headers": headers}
        await send(message)

    return sending


async def serve_stream(
    memesh: Memesh,
    bus: SubscriptionBus,
    watches: InboxWatches,
    principal: Principal,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """The caller's notification stream (``GET /mcp`` with a session id)."""
    key = presented_key(header_pairs(scope))  # the door admitted these headers: one key
    with contextlib.ExitStack() as held:
        try:
            credential = held.enter_context(held_stream(memesh, watches, principal, key, scope.get("state", {})))
        except MemeshError as exc:
            await memesh_error_response(exc)(scope, receive, send)
            return
        own = inbox_uri(principal.agent_id)
        updates: asyncio.Queue[None] = asyncio.Queue(maxsize=1)  # a level: one pending update says it all

        def deliver(event: ServerEvent) -> None:
            if isinstance(event, ResourceUpdated) and event.uri == own:
                with contextlib.suppress(asyncio.QueueFull):
                    updates.put_nowait(None)

        held.callback(bus.subscribe(deliver))

        async def events() -> AsyncIterator[dict[str, str]]:
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": own}})
            guard = asyncio.ensure_future(credential.until_refused())
            update: asyncio.Future[None] | None = None
            try:
                while not guard.done():
                    update = asyncio.ensure_future(updates.get())
                    await asyncio.wait({update, guard}, return_when=asyncio.FIRST_COMPLETED)
                    if update.done():
                        yield {"event": "message", "data": note}
                    else:
                        update.cancel()
                # the key failed: the stream ends
            finally:  # also when the client left: no wait is left pending (it was logged at ERROR when collected)
                if update is not None:
                    update.cancel()
                guard.cancel()
                with contextlib.suppress(asyncio.CancelledError, MemeshError):
                    await guard

        session = header_map(scope)[SESSION_HEADER]
        response: Response = EventSourceResponse(events(), ping=PING_S, headers={SESSION_HEADER: session})
        await response(scope, receive, send)

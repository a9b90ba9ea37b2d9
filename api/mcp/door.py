"""The door of ``/mcp``: admission before any MCP processing, then the SDK's Streamable HTTP app.

Guarantees:
- A request to ``/mcp`` or ``/mcp/`` (the same endpoint, no redirect) is
  admitted first: its key comes from ``x-service-key`` or, for hosts that can
  only send that, ``Authorization: Bearer <key>``; it is resolved by the same
  principal cache and auth-failure bucket as ``/v1`` (``Memesh.principal``),
  and a refusal is the spec's envelope (401, 429 with ``Retry-After``) with
  no MCP processing at all. Each tool then charges its own bucket.
- The SDK runs stateless (no session to stick to a head) with JSON answers,
  serving the handshake era and the 2026-07-28 era alike. Its session manager
  is started on the first request and stopped by :meth:`McpDoor.close`.
- Messages are POSTed, with the ``/v1`` body rules: a non-JSON body is
  415, one over ``max_body_bytes`` 400, a request still running after
  ``timeout_s`` 504; a message of more than ``MAX_JSON_VALUES`` values or
  nested deeper than ``MAX_JSON_DEPTH`` (:func:`api.gate_common.json_shape_refusal`),
  or a request whose ``id`` is neither a string nor an integer, 400
  ``validation`` before the SDK parses it. A handshake-era ``initialize`` is answered with a
  session id that no head stores (:mod:`api.mcp.session_stream`). GET (the
  notification stream) and DELETE (204, nothing to end) need a session id;
  without one, and for any other method, 405. A stream (GET, or a
  2026-07-28 listen) holds an inbox stream slot, so no admitted request
  holds a connection open without bound; a GET whose ``Accept`` takes no
  ``text/event-stream`` is 406 ``validation`` and holds nothing.
- Every other path goes to the wrapped application untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial

from mcp.server.streamable_http import check_accept_headers
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.admission import admit_at_door
from api.errors import error_response, memesh_error_response
from api.gate_common import header_map, json_document, json_shape_refusal, read_body, replay, run_guarded
from api.mcp.enveloped import enveloped
from api.mcp.push import InboxWatches
from api.mcp.session_stream import PROTOCOL_HEADER, SESSION_HEADER, new_session_id, serve_stream, with_session_id
from api.mcp.tools import build_mcp_server
from head.facade import Memesh
from mesh.errors import ErrorCode, Unavailable

PATHS = ("/mcp", "/mcp/")
METHODS = frozenset({"POST", "GET", "DELETE"})  # GET and DELETE only with a session id


class McpDoor:
    """``/mcp``: admitted, then served by the MCP SDK (``handle``); ``close`` at shutdown."""

    def __init__(self, memesh: Memesh, max_body_bytes: int, timeout_s: float = 30.0) -> None:
        self.memesh = memesh
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.bus = InMemorySubscriptionBus()
        self.watches = InboxWatches(memesh, self.bus)
        self.server = build_mcp_server(memesh, self.bus, self.watches)
        # Host and Origin are judged by the deployment's own proxy and the key, not by a loopback allow-list.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.mcp_app = self.server.streamable_http_app(
            stateless_http=True, json_response=True, transport_security=security, max_request_body_size=max_body_bytes
        )
        self._running: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = await admit_at_door(self.memesh, scope, receive, send, self.max_body_bytes, "MCP", METHODS)
        if principal is None:
            return
        headers = header_map(scope)
        session = headers.get(SESSION_HEADER)
        if scope["method"] != "POST" and session is None:  # no session id: no stream to GET, nothing to DELETE
            message = "send MCP messages with POST (a GET stream needs the Mcp-Session-Id of an initialize)"
            await error_response(405, ErrorCode.VALIDATION, message, {"Allow": "POST"})(scope, receive, send)
            return
        if scope["method"] == "DELETE":  # a session id names no state: there is nothing to end
            await Response(status_code=204)(scope, receive, send)
            return
        if not await self._started():
            await memesh_error_response(Unavailable("MCP is not being served"))(scope, receive, send)
            return
        scope = {**scope, "path": "/mcp", "raw_path": b"/mcp", "state": {**scope.get("state", {}), "principal": principal}}
        if scope["method"] == "GET":
            if not check_accept_headers(Request(scope))[1]:  # the SDK's reading of Accept, wildcards included
                message = "Not Acceptable: Client must accept text/event-stream"
                await error_response(406, ErrorCode.VALIDATION, message)(scope, receive, send)
                return
            stream = partial(serve_stream, self.memesh, self.bus, self.watches, principal)
            await run_guarded(stream, scope, receive, send, self.max_body_bytes, self.timeout_s)
            return
        opening = session is None and PROTOCOL_HEADER not in headers  # a handshake-era initialize, maybe
        await run_guarded(partial(self._post, opening), scope, receive, send, self.max_body_bytes, self.timeout_s)

    async def _post(self, opening: bool, scope: Scope, receive: Receive, send: Send) -> None:
        """One MCP message to the SDK, once its shape and id are ones the SDK serves (else 400 ``validation``);
        an ``initialize`` is answered with a fresh session id."""
        body = await read_body(receive)
        if body is None:
            return  # the client left
        message = json_document(body)
        refusal = json_shape_refusal(message) or _id_refusal(message)
        if refusal is not None:
            await error_response(400, ErrorCode.VALIDATION, refusal)(scope, receive, send)
            return
        if opening and isinstance(message, dict) and message.get("method") == "initialize":
            send = with_session_id(send, new_session_id())
        await self.mcp_app(scope, replay(body, receive), enveloped(send))  # the SDK's own HTTP refusals, as the envelope

    async def _started(self) -> bool:
        """True once the SDK's session manager runs; False when it failed or the door was closed."""
        if self._running is None:
            self._running = asyncio.get_running_loop().create_task(self._run())
        await self._ready.wait()
        return not self._running.done() and not self._stop.is_set()

    async def _run(self) -> None:
        try:
            async with self.server.session_manager.run():
                self._ready.set()
                await self._stop.wait()
        finally:
            self._ready.set()  # nobody waits forever on a manager that failed to start

    async def close(self) -> None:
        """Stop the SDK's session manager (at shutdown)."""
        self._stop.set()
        if self._running is not None:
            with contextlib.suppress(Exception):
                await self._running


def _id_refusal(message: object) -> str | None:
    """A request whose ``id`` is neither a string nor an integer: the SDK took it for a notification and
    answered 202 without running it, so its client waited for ever."""
    if not isinstance(message, dict) or "id" not in message or "method" not in message:
        return None
    request_id = message["id"]
    if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        return None
    return "a JSON-RPC request's id is a string or an integer"


class McpRoute:
    """ASGI middleware: ``/mcp`` and ``/mcp/`` to the door, every other request to ``app``."""

    def __init__(self, app: ASGIApp, door: McpDoor) -> None:
        self.app = app
        self.door = door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in PATHS:
            await self.door.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

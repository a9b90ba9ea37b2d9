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
- Only POST is served (stateless: there is no server stream to GET and no
  session to DELETE; anything else is 405), with the ``/v1`` body rules:
  a non-JSON body is 415, one over ``max_body_bytes`` 400, a request still
  running after ``timeout_s`` 504. So no admitted request holds a
  connection open without bound.
- Every other path goes to the wrapped application untouched.
"""

from __future__ import annotations

import asyncio
import contextlib

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from api.admission import admit_at_door
from api.errors import memesh_error_response
from api.gate_common import run_guarded
from api.mcp.tools import build_mcp_server
from head.facade import Memesh
from mesh.errors import Unavailable

PATHS = ("/mcp", "/mcp/")


class McpDoor:
    """``/mcp``: admitted, then served by the MCP SDK (``handle``); ``close`` at shutdown."""

    def __init__(self, memesh: Memesh, max_body_bytes: int, timeout_s: float = 30.0) -> None:
        self.memesh = memesh
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.server = build_mcp_server(memesh)
        # Host and Origin are judged by the deployment's own proxy and the key, not by a loopback allow-list.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.mcp_app = self.server.streamable_http_app(
            stateless_http=True, json_response=True, transport_security=security, max_request_body_size=max_body_bytes
        )
        self._running: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Stateless: no server stream to GET, no session to DELETE; only POST is served.
        principal = await admit_at_door(self.memesh, scope, receive, send, self.max_body_bytes, "MCP")
        if principal is None:
            return
        if not await self._started():
            await memesh_error_response(Unavailable("MCP is not being served"))(scope, receive, send)
            return
        scope = {**scope, "path": "/mcp", "raw_path": b"/mcp", "state": {**scope.get("state", {}), "principal": principal}}
        await run_guarded(self.mcp_app, scope, receive, send, self.max_body_bytes, self.timeout_s)

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

"""The control plane over REST (``/admin``), mounted only when ``admin.console_enabled`` is set.

``mount_admin`` adds, to an app built by :func:`api.app.create_app`:
- the console login and session routes (:mod:`api.admin_auth`);
- the operator API (:mod:`api.admin_api`) and the observatory
  (:mod:`api.observatory`), both under ``/admin/api``;
- the :class:`~api.admin_gate.AdminGate` in front of every ``/admin/api/*``
  request and WebSocket handshake (session first, then role, body checks and
  the Admin bucket).

Console sessions live in this process only (:mod:`api.console_sessions`):
restarting the head logs operators out.
"""

from __future__ import annotations

from fastapi import FastAPI, WebSocket

from api import admin_api, observatory
from api.admin_auth import Console, ConsoleConfig
from api.admin_auth import router as auth_router
from api.admin_gate import AdminGate
from api.errors import error_response
from head.facade import Memesh
from mesh.errors import ErrorCode

__all__ = ["ConsoleConfig", "mount_admin"]


async def _no_such_stream(websocket: WebSocket) -> None:
    """A WebSocket handshake to an /admin/api path that serves none: 404 in the envelope, before any upgrade."""
    await websocket.send_denial_response(error_response(404, ErrorCode.NOT_FOUND, "no WebSocket is served at this path"))


def mount_admin(
    app: FastAPI,
    memesh: Memesh,
    console_config: ConsoleConfig,
    max_body_bytes: int = 4 * 1024 * 1024,
    request_timeout_s: float = 30.0,
) -> Console:
    """Serve the console on ``app``; returns its login state (also at ``app.state.console``)."""
    console = Console(console_config, memesh)
    app.state.console = console
    app.include_router(auth_router)
    app.include_router(admin_api.router)
    app.include_router(observatory.router)
    app.add_api_websocket_route("/admin/api/{rest:path}", _no_such_stream)  # after every real WebSocket route
    app.add_middleware(
        AdminGate,
        memesh=memesh,
        sessions=console.sessions,
        max_body_bytes=max_body_bytes,
        timeout_s=request_timeout_s,
        allowed_origins=console.allowed_origins,
    )
    return console

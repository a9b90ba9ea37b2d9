"""The control plane over REST (``/admin``), mounted only when ``admin.console_enabled`` is set.

``mount_admin`` adds, to an app built by :func:`api.app.create_app`:
- the browser console at ``/admin`` (:mod:`api.console.page`);
- the console login and session routes (:mod:`api.console.login`, over the
  login state of :mod:`api.console.oidc`);
- the operator API (:mod:`api.console.operator_api`) and the observatory
  (:mod:`api.console.observatory`), both under ``/admin/api``;
- the :class:`~api.console.gate.AdminGate` in front of every ``/admin/api/*``
  request and WebSocket handshake (session first, then role, body checks and
  the Admin bucket).

Console sessions live in this process only (:mod:`mesh.console_sessions`):
restarting the head logs operators out.
"""

from __future__ import annotations

from fastapi import FastAPI, WebSocket

from api.console import observatory, operator_api, page
from api.console.gate import AdminGate
from api.console.login import router as auth_router
from api.console.oidc import Console, ConsoleConfig
from api.websocket import deny
from head.facade import Memesh
from mesh.errors import NotFound

__all__ = ["ConsoleConfig", "mount_admin"]


async def _no_such_stream(websocket: WebSocket) -> None:
    """A WebSocket handshake to an /admin/api path that serves none: 404 in the envelope, before any upgrade."""
    await deny(websocket, NotFound("no WebSocket is served at this path"))


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
    app.include_router(page.router)  # the console in the browser
    app.include_router(auth_router)
    app.include_router(operator_api.router)
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

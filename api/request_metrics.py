"""Every HTTP request counted and timed by surface, route template and status (:class:`head.request_log.RequestLog`).

The outermost middleware of the app, so refusals by the gates (401, 413, 429)
count too. The route is the template the request matched (``/v1/cells/{cell_id}``),
never the raw path, so labels stay bounded; a path no route matches is
``unmatched``. WebSocket connections are counted when they end, with the
status ``websocket``. The gRPC data plane records its calls itself
(:mod:`api.grpc_data.servicer`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from head.request_log import RequestLog

SURFACES = (("/v1", "rest"), ("/mcp", "mcp"), ("/a2a", "a2a"), ("/.well-known/agent", "a2a"), ("/admin", "console"))


def surface_of(path: str) -> str:
    return next((name for prefix, name in SURFACES if path.startswith(prefix)), "other")


class RequestMetrics:
    def __init__(self, app: ASGIApp, log: RequestLog) -> None:
        self.app = app
        self.log = log
        self._routes: list[Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = "websocket" if scope["type"] == "websocket" else "500"

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = scope.get("path", "")
            self.log.record(surface_of(path), self._route(scope), status, time.monotonic() - started)

    def _route(self, scope: Scope) -> str:
        route = scope.get("route")
        template = getattr(route, "path", None)
        if isinstance(template, str):
            return template
        if self._routes is None:  # a request refused before routing (by a gate): find the route it was for
            self._routes = list(_flat(getattr(getattr(scope.get("app"), "router", None), "routes", ())))
        partial = None
        for candidate in self._routes:
            match, _ = candidate.matches(scope)
            if match is Match.FULL:
                return str(candidate.path)
            if match is Match.PARTIAL and partial is None:  # the path, another method (405)
                partial = str(candidate.path)
        return partial or ("/mcp" if scope.get("path") == "/mcp" else "unmatched")


def _flat(routes: Any) -> Iterator[Any]:
    """The routes with a path template, through included routers (FastAPI nests them, without a prefix here)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _flat(inner.routes)
        elif isinstance(getattr(route, "path", None), str):
            yield route

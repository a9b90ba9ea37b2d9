"""Requests wait at the door while partitions move (an online resize, :mod:`head.partition_resizer`).

Each HTTP request is one *operation* of the head's partition gate
(:mod:`actors.partition_gate`): while the gate is held, a new request waits
here, before it routes anything by the old assignment, and is then served by
the partitions' new owners; a request already inside counts as in flight, and
the resize waits (bounded) for it before it stops the actors. A request held
longer than the gate's ``max_wait_s`` gets the spec's 503 ``unavailable``.

Not counted: WebSockets and event streams (``Accept: text/event-stream`` on a
GET), which last as long as their client likes; their calls re-route on their
own (a call held at the gate fails over, and their loops retry). Nor the
probes that touch no partition (``/healthz``, ``/metrics``, ``/.well-known``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import grpc_status, memesh_error_response
from mesh.deployment import Gate
from mesh.errors import MemeshError, Unavailable

UNGATED = ("/healthz", "/metrics", "/.well-known")


class PartitionHold:
    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _long_lived(scope) or str(scope.get("path", "")).startswith(UNGATED):
            await self.app(scope, receive, send)
            return
        operation = self.gate.operation()
        try:
            await operation.__aenter__()
        except MemeshError as exc:  # held past max_wait_s: the envelope, never a hang
            await memesh_error_response(exc)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            await operation.__aexit__(None, None, None)


def _long_lived(scope: Scope) -> bool:
    if scope.get("method") != "GET":
        return False
    accept = dict(scope.get("headers") or []).get(b"accept", b"")
    return b"text/event-stream" in accept


class GrpcPartitionHold(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The same door for the gRPC data plane: each unary call is one operation of the gate (a server
    stream, ``StreamInbox``, is long-lived and re-routes on its own, as a WebSocket does)."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary

        async def held(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                async with self.gate.operation():
                    return await behaviour(request, context)
            except MemeshError as exc:
                if isinstance(exc, Unavailable):
                    await context.abort(grpc_status(exc), f"{exc.code}: {exc.message}")
                raise

        return grpc.unary_unary_rpc_method_handler(held, handler.request_deserializer, handler.response_serializer)

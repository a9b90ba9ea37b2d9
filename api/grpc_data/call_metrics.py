"""Every gRPC data-plane call counted and timed in the head's :class:`head.request_log.RequestLog`.

A server interceptor: the surface is ``grpc``, the route the RPC's name
(``Query``; a name this server does not serve is never recorded, gRPC refuses
it first), the status the call's final code name (``OK``, ``NOT_FOUND``, ...).
The inbox stream is recorded when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import grpc

from api.grpc_data.handlers import rewrapped
from head.request_log import RequestLog


class CallMetrics(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, log: RequestLog) -> None:
        self._log = log

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        name = str(details.method).rsplit("/", 1)[-1]
        return rewrapped(handler, partial(self._timed, name))

    def _timed(self, name: str, behaviour: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.monotonic()
            try:
                return await behaviour(request, context)
            finally:
                code = context.code()
                status = code.name if isinstance(code, grpc.StatusCode) else "OK"
                self._log.record("grpc", name, status, time.monotonic() - started)

        return timed

"""The data plane's streams that take no key (health ``Watch``, reflection), held to a share of their own.

``grpc.health.v1.Health/Watch`` and ``ServerReflectionInfo`` need no key, never end by themselves, and
count against the listener's ``maximum_concurrent_rpcs`` like every call: without a bound of their own, a
client with no key could hold every slot and leave each tenant's calls RESOURCE_EXHAUSTED.

Guarantees of :class:`KeylessStreams` (a server interceptor):
- At most ``per_peer`` such streams from one address and ``total`` from all at once; past either, the
  call is refused at once with RESOURCE_EXHAUSTED (``quota_exceeded``), before its behaviour runs.
- A stream's slot is given back when it ends, however it ends (the client's cancel, a deadline, the
  server's shutdown).
- Every other call passes untouched; health ``Check`` (unary, answered at once) is not counted.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from api.admission import peer_address
from api.grpc_data.status import abort
from mesh.errors import QuotaExceeded

KEYLESS_STREAMS = frozenset(
    {
        "/grpc.health.v1.Health/Watch",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    }
)
TOTAL = 64  # keyless streams open at once on a listener
PER_PEER = 8  # of them from one address


class KeylessStreams(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, total: int = TOTAL, per_peer: int = PER_PEER) -> None:
        self.total = total
        self.per_peer = per_peer
        self.open: Counter[str] = Counter()  # address -> streams open now

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or str(details.method) not in KEYLESS_STREAMS:
            return handler
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._held(handler.unary_stream), handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._held(handler.stream_stream), handler.request_deserializer, handler.response_serializer
            )
        return handler

    async def _enter(self, context: grpc.aio.ServicerContext) -> str:
        peer = peer_address(context)
        if sum(self.open.values()) >= self.total:
            await abort(context, QuotaExceeded(f"at most {self.total} health and reflection streams at a time"))
        if self.open[peer] >= self.per_peer:
            await abort(context, QuotaExceeded(f"at most {self.per_peer} health and reflection streams from one address"))
        self.open[peer] += 1
        return peer

    def _leave(self, peer: str) -> None:
        self.open[peer] -= 1
        if self.open[peer] <= 0:
            del self.open[peer]

    def _held(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """``behaviour`` inside a slot, of the same kind (an async generator, or a coroutine that writes)."""
        if inspect.isasyncgenfunction(behaviour):

            async def streamed(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                peer = await self._enter(context)
                try:
                    async for response in behaviour(request, context):
                        yield response
                finally:
                    self._leave(peer)

            return streamed

        async def written(request: Any, context: grpc.aio.ServicerContext) -> Any:
            peer = await self._enter(context)
            try:
                return await behaviour(request, context)
            finally:
                self._leave(peer)

        return written

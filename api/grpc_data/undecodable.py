"""A gRPC request whose body is not its method's message: INVALID_ARGUMENT (``validation``), never UNKNOWN.

grpcio answers an exception of a method's request deserializer (protobuf's ``DecodeError``: truncated or
corrupt wire bytes, a string field that is not UTF-8) as UNKNOWN, with the exception's own text (the
message type, the decoder's words), and logs a traceback for every such call, with or without a key.

Guarantees of :class:`UndecodableRequests` (a server interceptor, on the data plane and the admin service):
- The body is decoded here; one that does not decode never reaches the servicer.
- Such a call to a memesh service is admitted as any call is (its key, the peer's ``AuthFailures``
  bucket, one token of the interceptor's bucket), so a caller without a valid key learns
  ``unauthorized`` as it would for a well-formed call, and a flood of bad bodies is throttled like any
  other; the admin service refuses a caller who is no admin first, as it does every call. (Health and
  reflection take no key: theirs is refused at once.)
- Then it is refused as ``validation`` (INVALID_ARGUMENT), as the service refuses any call (the data
  plane's rich status of :mod:`api.grpc_data.status`, the admin service's ``"<code>: <message>"``);
  nothing is logged above DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, NoReturn

import grpc

from api.admission import admit_grpc
from api.grpc_data.handlers import Behaviour, rewrapped
from api.grpc_data.status import InvalidRequest, abort
from head.facade import Bucket, Memesh
from mesh.errors import MemeshError
from mesh.identity import Principal

log = logging.getLogger(__name__)

MEMESH_SERVICES = "/memesh."
Refuse = Callable[[grpc.aio.ServicerContext, MemeshError], Awaitable[NoReturn]]


class _Undecodable:
    """What the tolerant deserializer hands on in place of a message it could not decode."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class UndecodableRequests(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(
        self,
        memesh: Memesh,
        bucket: Bucket,
        authorize: Callable[[Principal], Awaitable[None]] | None = None,
        refuse: Refuse = abort,
    ) -> None:
        """``authorize``: what the service checks of an admitted caller before anything else (its role);
        ``refuse``: how the service ends a call with an error (the data plane's rich status by default)."""
        self._memesh = memesh
        self._bucket = bucket
        self._authorize = authorize
        self._refuse = refuse

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer

        def tolerant(data: bytes) -> Any:
            try:
                return decode(data)
            except Exception as exc:  # noqa: BLE001 - every decoder failure is the caller's body
                return _Undecodable(exc)

        return rewrapped(handler, partial(self._checked, str(details.method)), tolerant)

    def _checked(self, method: str, behaviour: Behaviour) -> Behaviour:
        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not isinstance(request, _Undecodable):
                return await behaviour(request, context)
            log.debug("gRPC %s: an undecodable request body (%s)", method, request.error)
            if method.startswith(MEMESH_SERVICES):  # health and reflection take no key
                try:
                    principal = await admit_grpc(self._memesh, context, self._bucket)
                    if self._authorize is not None:
                        await self._authorize(principal)
                except MemeshError as exc:
                    await self._refuse(context, exc)
            await self._refuse(context, InvalidRequest("the request body is not a valid protobuf message for this method"))

        return checked

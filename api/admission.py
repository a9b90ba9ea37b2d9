"""Authenticate and charge: every transport's admission of an API-key caller, in that transport's shape.

Guarantees:
- The head decides; this module only carries. Every caller holding an API key
  is admitted by :meth:`head.facade.Memesh.admit` (its principal, charged to a
  rate-limit bucket), or, in the HTTP gate shape below, by its two halves
  ``principal`` and ``charge`` in that order. So the ``AuthFailures`` bucket
  per client address, the principal cache and the buckets are the same on
  every surface, and a refusal is the mesh error (``Unauthorized`` 401,
  ``RateLimited`` 429 with ``Retry-After``) that :mod:`api.errors` encodes.
- The key is read from ``x-service-key`` (an HTTP header, or gRPC metadata);
  on surfaces whose clients can only send a bearer token (``/mcp``, ``/a2a/v1``), and on
  gRPC (metadata ``authorization: Bearer``), also from ``Authorization:
  Bearer`` (:func:`presented_key`). Nowhere else: never from a body or an
  argument. The client address is the peer as this server
  sees it.
- The shapes:

  * HTTP gate and route (REST ``/v1``; the next HTTP surfaces reuse it): the
    gate calls :func:`authenticate_at_gate` before any body check (so a
    request without a valid key gets 401 whatever its body), and the route's
    dependency :func:`charge_route` charges the route's bucket once the
    route, and for a batch its size, is known.
  * A protocol door (``/mcp``, ``/a2a/v1``): :func:`admit_at_door` takes the
    key (header or bearer) and the ``/v1`` body rules before the protocol
    sees anything; each operation then charges its own bucket.
  * One connection or call, admitted at once (a WebSocket handshake, before
    the upgrade: :func:`admit_connection`; a gRPC call, before the use case:
    :func:`admit_grpc`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import grpc
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from api.errors import error_response, memesh_error_response
from api.gate_common import body_refusal, header_map, header_pairs
from head.facade import Bucket, Memesh
from mesh.errors import ErrorCode, MemeshError, Unauthorized
from mesh.identity import Principal

KEY_HEADER = "x-service-key"
_STATE_KEY = "principal"


def client_address(scope: Scope) -> str:
    """The peer's address as the server sees it (what unauthenticated charges are keyed by)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def peer_address(context: grpc.aio.ServicerContext) -> str:
    """The caller's address from gRPC's peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    peer = str(context.peer() or "")
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit("]", 1)[0].lstrip("[")
    return rest.rsplit(":", 1)[0] if kind == "ipv4" else peer or "unknown"


def presented_key(headers: Iterable[tuple[str, str]], bearer: bool = True) -> str | None:
    """``x-service-key``, else (``bearer``) the token of ``Authorization: Bearer <token>``, from every header
    the request sent (name, value). Unauthorized when the header it reads came more than once: which copy
    counts would differ between doors, proxies and clients, so no door picks one (a repeated
    ``Authorization`` beside an ``x-service-key`` is not read, so not judged)."""
    keys: list[str] = []
    authorizations: list[str] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == KEY_HEADER:
            keys.append(value)
        elif lowered == "authorization":
            authorizations.append(value)
    key = _only(keys, KEY_HEADER)
    if key or not bearer:
        return key
    scheme, _, token = (_only(authorizations, "Authorization") or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _only(values: list[str], header: str) -> str | None:
    if len(values) > 1:
        raise Unauthorized(f"send one {header} header, not {len(values)}")
    return values[0] if values else None


# ------------------------------------------------------------ HTTP gate and route
async def authenticate_at_gate(memesh: Memesh, scope: Scope, pairs: list[tuple[str, str]]) -> None:
    """The gate's half of ``admit``: the key's principal (no bucket charged yet), kept in the scope
    state for the route. ``pairs``: the request's :func:`api.gate_common.header_pairs`."""
    principal = await memesh.principal(presented_key(pairs, bearer=False), client_address(scope))
    scope.setdefault("state", {})[_STATE_KEY] = principal


def gate_principal(scope: Scope) -> Principal:
    """The principal :func:`authenticate_at_gate` admitted for this request."""
    principal: Principal = scope["state"][_STATE_KEY]
    return principal


def charge_route(memesh: Memesh, scope: Scope, bucket: Bucket, cost: float = 1.0) -> Principal:
    """The route's half of ``admit``: the gate's principal, charged ``cost`` tokens of ``bucket``."""
    principal = gate_principal(scope)
    memesh.charge(principal, bucket, cost)
    return principal


# ------------------------------------------- protocol doors on the REST listener
async def admit_at_door(
    memesh: Memesh,
    scope: Scope,
    receive: Receive,
    send: Send,
    max_body_bytes: int,
    protocol: str,
    methods: frozenset[str] = frozenset({"POST"}),
) -> Principal | None:
    """The front of a door that speaks its own protocol over ``POST`` (``/mcp``, ``/a2a/v1``): the
    caller's principal (:func:`presented_key`, so ``x-service-key`` or a bearer token), or None once
    this has answered the spec's envelope itself: 401/429 for the key, before anything of the
    protocol; then 405 for a method not in ``methods`` (POST unless the door says otherwise), 415 or
    400 for a body (``/v1``'s rules)."""
    pairs = header_pairs(scope)
    headers = header_map(scope, pairs)
    try:
        principal = await memesh.principal(presented_key(pairs), client_address(scope))
    except MemeshError as exc:
        await memesh_error_response(exc)(scope, receive, send)
        return None
    refusal: Response | None
    if scope["method"] not in methods:
        allowed = ", ".join(sorted(methods))
        refusal = error_response(405, ErrorCode.VALIDATION, f"send {protocol} requests with {allowed}", {"Allow": allowed})
    else:
        refusal = body_refusal(scope, headers, max_body_bytes)
    if refusal is not None:
        await refusal(scope, receive, send)
        return None
    return principal


# ------------------------------------------------------ one connection or call
def service_key(connection: HTTPConnection) -> str | None:
    """The connection's ``x-service-key`` header, if any (Unauthorized when it came more than once)."""
    return presented_key(connection.headers.items(), bearer=False)


async def admit_connection(memesh: Memesh, connection: HTTPConnection, bucket: Bucket) -> Principal:
    """``admit`` for an HTTP connection judged as a whole (a WebSocket handshake, before the upgrade)."""
    return await memesh.admit(service_key(connection), bucket, client_address(connection.scope))


def grpc_key(context: grpc.aio.ServicerContext) -> str | None:
    """The key a gRPC call presents (:func:`presented_key` over its text metadata)."""
    return presented_key((name, value) for name, value in context.invocation_metadata() or () if isinstance(value, str))


async def admit_grpc(memesh: Memesh, context: grpc.aio.ServicerContext, bucket: Bucket, cost: float = 1.0) -> Principal:
    """``admit`` for one gRPC call: its key (:func:`grpc_key`) and the peer's address, charged ``cost``
    tokens of ``bucket`` (a batch: its size)."""
    return await memesh.admit(grpc_key(context), bucket, peer_address(context), cost)


# ------------------------------------------------------------ an open stream's key
RECHECK_S = 10.0  # an open stream's key is checked again at least this often (a revoke on another head)


class Credential:
    """An open stream's key (the WebSocket inbox, the gRPC inbox stream, MCP's push streams), checked
    again before every item and ack, whenever the agent's credential changes on this head (revoke,
    suspend, rotate: :meth:`head.identity_service.IdentityService.watch`), and at least every
    :data:`RECHECK_S` while the stream is idle (a change made on another head; the principal cache
    bounds how stale that check may be). Unauthorized ends the stream."""

    def __init__(self, memesh: Memesh, key: str | None, principal: Principal, changed: asyncio.Event) -> None:
        self._memesh = memesh
        self._key = key
        self.principal = principal
        self._changed = changed

    async def check(self) -> Principal:
        self.principal = await self._memesh.identity.authenticate(self._key)
        return self.principal

    async def until_refused(self, recheck_s: float = RECHECK_S) -> None:
        """Returns never; raises Unauthorized as soon as the key fails."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(recheck_s):
                    await self._changed.wait()
            self._changed.clear()
            await self.check()

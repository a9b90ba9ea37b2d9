"""Inbox push over MCP: the caller's inbox as a resource, and ``subscriptions/listen`` on it.

Guarantees:
- Each agent's inbox is the resource ``memesh://agents/{agent_id}/inbox``.
  Reading it is a peek at the pull page (deliveries after the cursor, best
  first; embeddings left out; nothing acknowledged), charged to the Inbox
  bucket like ``POST /v1/inbox:pull``. Only the caller's own inbox can be read
  or subscribed to: any other URI in ``resources/read`` or in a listen
  request's ``resourceSubscriptions`` is refused with ``forbidden: ...``
  before the SDK sees the request, so nobody learns when another agent
  receives anything.
- A listen stream (the 2026-07-28 era's ``subscriptions/listen``, whose
  response is the stream) that names the caller's inbox gets
  ``notifications/resources/updated`` for that URI whenever a delivery for
  the agent commits (on any head: the watch waits on the inbox actor itself).
  Notifications carry no content; the client reads the resource or calls
  ``pull_inbox``. One watch runs per agent however many streams it holds,
  so each stream gets each change once.
- A listen stream holds one of the head's inbox stream slots (the caps the
  WebSocket inbox has: per agent, per tenant, per head; past one it is
  refused ``quota_exceeded: ...``). It is exempt from the request timeout, and
  ends as soon as its key fails: at once when the agent is revoked, suspended
  or rotated on this head, within :data:`api.admission.RECHECK_S` when that happens on
  another head. The refusal is the listen request's JSON-RPC error
  ``unauthorized: ...``.
- The handshake era has no listen: its hosts subscribe with
  ``resources/subscribe`` (refused the same way for a foreign URI) and are
  told on their session stream, :mod:`api.mcp.session_stream`, fed by the
  same per-agent watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
from mcp import MCPError
from mcp.server.context import HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from api.admission import Credential, presented_key
from api.errors import STATUS
from head.facade import Bucket, Memesh
from mesh.errors import ErrorCode, Forbidden, MemeshError
from mesh.identity import Principal
from mesh.inbox_wire import pull_page

log = logging.getLogger(__name__)

INBOX_TEMPLATE = "memesh://agents/{agent_id}/inbox"
_INBOX_URI = re.compile(r"^memesh://agents/(?P<agent_id>[^/]+)/inbox$")
RATE_LIMITED = -32029  # a JSON-RPC server error code: the message starts "rate_limited:" and says when to retry
UNAUTHORIZED = -32001  # the key failed while a request ran (a listen stream outlives its admission)
WAIT_S = 30.0  # one wait on the inbox actor; the watch then waits again
LISTEN = "subscriptions/listen"
NAMING_A_RESOURCE = ("resources/read", "resources/subscribe", "resources/unsubscribe")


def inbox_uri(agent_id: str) -> str:
    return INBOX_TEMPLATE.format(agent_id=agent_id)


def protocol_error(exc: MemeshError) -> MCPError:
    """A refusal outside a tool call, as the JSON-RPC error whose message starts with the spec code."""
    message = f"{exc.code.value}: {exc.message}"
    if exc.code in (ErrorCode.RATE_LIMITED, ErrorCode.QUOTA_EXCEEDED):
        retry = getattr(exc, "retry_after", None)
        return MCPError(RATE_LIMITED, f"{message}; retry in {retry} s" if retry is not None else message)
    if exc.code is ErrorCode.UNAUTHORIZED:
        return MCPError(UNAUTHORIZED, message)
    return MCPError(INVALID_PARAMS if STATUS[exc.code][0] < 500 else INTERNAL_ERROR, message)


def _caller(ctx: ServerRequestContext[Any, Any]) -> Principal | None:
    request = ctx.request
    principal = getattr(request.state, "principal", None) if request is not None else None
    return principal if isinstance(principal, Principal) else None


def _refuse_foreign(principal: Principal, uris: list[str]) -> None:
    own = inbox_uri(principal.agent_id)
    foreign = [uri for uri in uris if uri != own]
    if foreign:
        raise protocol_error(Forbidden(f"only your own inbox can be read or subscribed to ({own}); refused: {foreign[0][:200]}"))


class InboxWatches:
    """One watch per agent with open listen streams: publishes ``ResourceUpdated`` on the bus
    each time the agent's committed inbox top moves."""

    def __init__(self, memesh: Memesh, bus: SubscriptionBus) -> None:
        self.memesh = memesh
        self.bus = bus
        self._held: dict[str, tuple[asyncio.Task[None], int]] = {}

    @contextlib.contextmanager
    def hold(self, principal: Principal) -> Iterator[None]:
        agent = principal.agent_id
        task, count = self._held.get(agent) or (asyncio.get_running_loop().create_task(self._watch(principal)), 0)
        self._held[agent] = (task, count + 1)
        try:
            yield
        finally:
            task, count = self._held[agent]
            if count <= 1:
                del self._held[agent]
                task.cancel()
            else:
                self._held[agent] = (task, count - 1)

    @property
    def agents(self) -> int:
        return len(self._held)

    async def _watch(self, principal: Principal) -> None:
        uri = inbox_uri(principal.agent_id)
        seen: int | None = None
        failures = 0
        while True:
            try:
                top = await self.memesh.inbox.wait(principal, seen if seen is not None else 2**62, 0 if seen is None else WAIT_S)
                failures = 0
            except MemeshError as exc:  # the inbox actor restarting: wait, then watch again
                failures = min(failures + 1, 10)
                log.warning("inbox watch for %s: %s", principal.agent_id, exc.message)
                await asyncio.sleep(0.2 * failures)
                continue
            if seen is not None and top > seen:
                await self.bus.publish(ResourceUpdated(uri=uri))
            seen = top if seen is None else max(seen, top)


def push_middleware(memesh: Memesh, watches: InboxWatches) -> ServerMiddleware[Any]:
    """SDK middleware: refuses foreign inbox URIs, and runs each listen stream under a stream slot,
    the agent's inbox watch and its key's re-checks."""

    async def push(
        ctx: ServerRequestContext[Any, Any], call_next: Callable[[ServerRequestContext[Any, Any]], Awaitable[HandlerResult]]
    ) -> HandlerResult:
        principal = _caller(ctx)
        params = ctx.params or {}
        if principal is None or ctx.method not in (LISTEN, *NAMING_A_RESOURCE):
            return await call_next(ctx)
        if ctx.method in NAMING_A_RESOURCE:  # the caller's inbox is the only resource: any other URI is refused
            _refuse_foreign(principal, [str(params.get("uri", ""))])
            return await call_next(ctx)
        wanted = params.get("notifications") or {}
        uris = wanted.get("resourceSubscriptions") or [] if isinstance(wanted, dict) else []
        _refuse_foreign(principal, [str(u) for u in uris] if isinstance(uris, list) else [str(uris)])
        return await _listen(ctx, call_next, memesh, watches, principal, bool(uris))

    return push


@contextlib.contextmanager
def held_stream(
    memesh: Memesh, watches: InboxWatches, principal: Principal, key: str | None, state: Any, wants_inbox: bool = True
) -> Iterator[Credential]:
    """What an MCP push stream (a listen, a session stream) holds while it is open: one of the head's
    inbox stream slots (a MemeshError, ``quota_exceeded``, before anything when none is free), the
    agent's credential watch, and with ``wants_inbox`` the agent's inbox watch. The request timeout
    (``state.deadline``, see :func:`api.gate_common.run_guarded`) no longer applies: the slots and
    the key bound the stream instead."""
    with contextlib.ExitStack() as held:
        held.enter_context(memesh.inbox.stream_slot(principal))
        changed = held.enter_context(memesh.identity.watch(principal.agent_id))
        if wants_inbox:
            held.enter_context(watches.hold(principal))
        deadline = state.get("deadline") if isinstance(state, dict) else getattr(state, "deadline", None)
        if isinstance(deadline, asyncio.Timeout):
            deadline.reschedule(None)
        yield Credential(memesh, key, principal, changed)


async def _listen(
    ctx: ServerRequestContext[Any, Any],
    call_next: Callable[[ServerRequestContext[Any, Any]], Awaitable[HandlerResult]],
    memesh: Memesh,
    watches: InboxWatches,
    principal: Principal,
    wants_inbox: bool,
) -> HandlerResult:
    request = ctx.request
    assert request is not None  # _caller found the principal on it
    key = presented_key(request.headers.items())
    with contextlib.ExitStack() as held:
        try:
            credential = held.enter_context(held_stream(memesh, watches, principal, key, request.state, wants_inbox))
        except MemeshError as exc:
            raise protocol_error(exc) from None
        refusal: list[MemeshError] = []
        result: list[HandlerResult] = []
        failure: list[Exception] = []
        async with anyio.create_task_group() as streams:

            async def guard() -> None:
                try:
                    await credential.until_refused()
                except MemeshError as exc:
                    refusal.append(exc)
                    streams.cancel_scope.cancel()

            streams.start_soon(guard)
            try:
                result.append(await call_next(ctx))
            except Exception as exc:  # noqa: BLE001 - raised again past the group, not as its ExceptionGroup: the SDK's -32601 and
                failure.append(exc)  # -32602 (params it cannot read) stay what they are, never an internal error
            streams.cancel_scope.cancel()
        if refusal:
            raise protocol_error(refusal[0])
        if failure:
            raise failure[0]
        return result[0]


def add_inbox_resource(server: MCPServer, memesh: Memesh) -> None:
    """Registers ``memesh://agents/{agent_id}/inbox``: a peek at the caller's pull page; and, for the
    handshake era, ``resources/subscribe`` and ``resources/unsubscribe`` on it, which keep no state
    (the push middleware has refused any URI but the caller's own inbox; the updates ride the
    caller's notification stream, :mod:`api.mcp.session_stream`)."""

    async def acknowledge(ctx: ServerRequestContext[Any, Any], params: Any) -> EmptyResult:
        return EmptyResult()

    # MCPServer has no public hook for these handshake-era methods; the lowlevel server's is public.
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, acknowledge)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, acknowledge)

    @server.resource(
        INBOX_TEMPLATE,
        name="inbox",
        description="Your inbox: deliveries after your cursor, best first (a peek; nothing is acknowledged). "
        "Subscribe to it with subscriptions/listen to be told when a delivery arrives.",
        mime_type="application/json",
    )
    async def inbox(agent_id: str, ctx: Context) -> str:
        request = ctx.request_context.request
        principal = getattr(request.state, "principal", None) if request is not None else None
        if not isinstance(principal, Principal) or principal.agent_id != agent_id:
            raise protocol_error(Forbidden("only your own inbox can be read"))
        try:
            memesh.charge(principal, Bucket.INBOX)
            page = await memesh.inbox.pull(principal, None, None, None)
        except MemeshError as exc:
            raise protocol_error(exc) from None
        return json.dumps(pull_page(page, include_embeddings=False))

"""``StreamInbox``: the caller's inbox as a server stream, the gRPC twin of the ``/v1/inbox`` WebSocket.

Guarantees:
- Admitted like the WebSocket (one token of the ``Inbox`` bucket) and holding
  one of the head's inbox stream slots while open, shared with the WebSocket
  (``limits.max_inbox_streams_per_agent`` per agent, ``..._per_tenant`` and
  ``max_inbox_streams``): past any of them RESOURCE_EXHAUSTED
  (``QUOTA_EXCEEDED``) before anything is sent.
- Items go out in ascending ``delivery_seq``, starting after ``since`` when
  given, else after the acknowledged cursor; only commit-stable deliveries
  inside the caller's read scope. Nothing is acknowledged by sending: acks
  go through ``AckInbox`` or ``PullInbox``, and a reconnect resumes after the
  acknowledged cursor, so what was sent but not acknowledged comes again
  (at-least-once).
- A ``Progress`` frame (``window_high``, the acknowledged ``cursor``) goes out
  each time the stream has caught up: after the backlog, after each batch of
  new deliveries, and every :data:`PROGRESS_S` seconds while idle.
- A ``Resync`` frame goes out when the stream's position no longer matches
  the inbox: ``inbox_reset`` when the inbox does not reach the position (it
  was erased, or ``since`` came from elsewhere; the stream goes on after the
  acknowledged cursor), ``deliveries_dropped`` when the deliveries right
  after the position left before they were sent (retention trimmed them while
  the consumer was behind, or an erasure; the stream goes on after the gap).
- The key is checked again before every item and at once when the agent's
  credential changes on this head (revoke, suspend, rotate: the event of
  :meth:`head.identity_service.IdentityService.watch`): the stream then ends
  with UNAUTHENTICATED (``UNAUTHORIZED``) before anything else is sent, even
  while a write is waiting on a slow consumer.
- Flow control is HTTP/2's: an item is read from the inbox only once the
  previous one was handed to the transport, so a slow consumer holds no
  buffer on the server. A restarting inbox shard is retried (bounded); past
  that the stream ends UNAVAILABLE, never open and silent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import grpc

from api.admission import Credential, admit_grpc, grpc_key
from api.data.schemas import PullIn
from api.grpc_data import wire
from api.grpc_data.status import guarded
from api.websocket import first_to_finish
from head.facade import Bucket, Memesh
from memesh_proto import data_pb2 as pb
from mesh.errors import Unavailable
from mesh.inbox_wire import PullResult

T = TypeVar("T")
PROGRESS_S = 15.0
RETRIES = 10
INBOX_RESET = "inbox_reset"
DELIVERIES_DROPPED = "deliveries_dropped"


@dataclass(frozen=True, slots=True)
class Resync:
    reason: str
    resume_after: int


def resync_of(position: int, page: PullResult) -> Resync | None:
    """Whether a page pulled after ``position`` shows the stream out of step with the inbox, and where
    the stream goes on: after the page's cursor when the inbox does not reach ``position``, after the
    gap when deliveries after ``position`` left before they were sent."""
    if page.window_high < position:
        return Resync(INBOX_RESET, min(page.cursor, page.window_high))
    if page.window_low > position + 1:
        return Resync(DELIVERIES_DROPPED, page.window_low - 1)
    return None


class InboxStreams:
    """Serves ``StreamInbox`` calls over one facade."""

    def __init__(self, memesh: Memesh, progress_s: float = PROGRESS_S) -> None:
        self.memesh = memesh
        self.progress_s = progress_s

    async def serve(self, request: pb.StreamInboxRequest, context: grpc.aio.ServicerContext) -> None:
        async def run() -> None:
            principal = await admit_grpc(self.memesh, context, Bucket.INBOX)
            since = wire.validated(PullIn, wire.given(request, "since")).since
            with contextlib.ExitStack() as held:
                held.enter_context(self.memesh.inbox.stream_slot(principal))
                changed = held.enter_context(self.memesh.identity.watch(principal.agent_id))
                credential = Credential(self.memesh, grpc_key(context), principal, changed)
                await self._until_first_ends(context, credential, since, request.include_embedding)

        await guarded(context, run)

    async def _until_first_ends(
        self, context: grpc.aio.ServicerContext, credential: Credential, since: int | None, embed: bool
    ) -> None:
        """Send until the send loop ends or the credential is refused, whichever is first; re-raise its failure."""
        tasks = (
            asyncio.create_task(self._send(context, credential, since, embed)),
            asyncio.create_task(credential.until_refused()),
        )
        try:
            done = await first_to_finish(*tasks)
        finally:  # the call was cancelled (the client left): no task outlives it
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def _send(self, context: grpc.aio.ServicerContext, credential: Credential, since: int | None, embed: bool) -> None:
        inbox = self.memesh.inbox
        position = since if since is not None else await _retrying(partial(inbox.cursor, credential.principal))
        wait_s = 0.0
        while True:
            page = await _retrying(partial(self._page, credential, position, wait_s), credential)
            wait_s = 0.0
            resync = resync_of(position, page)
            if resync is not None:
                await context.write(pb.InboxEvent(resync=pb.Resync(reason=resync.reason, resume_after=resync.resume_after)))
                position = resync.resume_after
                if resync.reason == INBOX_RESET:
                    continue
            for rendered in page.items:  # ascending delivery_seq
                await credential.check()  # the key must still hold when each item goes out (a cache hit while it does)
                await context.write(pb.InboxEvent(item=wire.item_of(rendered, embed)))
            position = max(position, page.window_high)
            if page.has_more:
                continue
            await context.write(pb.InboxEvent(progress=pb.Progress(window_high=position, cursor=page.cursor)))
            wait_s = self.progress_s  # the next page waits in the shard for a delivery (one call, not two)

    async def _page(self, credential: Credential, position: int, wait_s: float) -> PullResult:
        """The next window after ``position``, items in ascending sequence, for the principal just checked;
        when nothing is committed after ``position``, it waits up to ``wait_s`` for a delivery first."""
        return await self.memesh.inbox.next_page(credential.principal, position, wait_s)


async def _retrying(call: Callable[[], Awaitable[T]], credential: Credential | None = None) -> T:
    """``call()`` (after checking ``credential`` again, when given), retried while the inbox shard is
    Unavailable (restarting), at most :data:`RETRIES` times with a growing pause; then its failure."""
    for attempt in range(RETRIES + 1):
        try:
            if credential is not None:
                await credential.check()
            return await call()
        except Unavailable:
            if attempt == RETRIES:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")

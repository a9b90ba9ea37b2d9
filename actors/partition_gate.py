"""The partition gate: one head's calls to the partitioned actors, held while their partitions move.

An online resize (:mod:`head.partition_resizer`) replaces the scene shards,
beacon sets and inbox shards. Before it stops them, every head *holds*: its
gate lets no new call through to a partitioned actor and waits for the calls
already on their way. Once the new actors run, each head routes by the new
assignment and *releases*. So no request is answered from a partition in
transit: it waits, and is answered by the partition's new owner.

Guarantees:
- While held, a call waits at most ``max_wait_s`` and then fails
  ``Unavailable`` (a retryable 503), never waits unbounded.
- ``hold`` returns True once no counted call or operation is in flight (long
  polls, ``IDLE_WAITS``, are not counted: they fail over when their actor
  goes, and their callers retry), or False after ``drain_s``; the gate stays
  held either way until ``release``.
- An *operation* (a request, an erase, a reembed: calls that must see one
  layout) cannot begin while held; one that began before the hold runs on
  (its calls pass), and the hold waits for it. A request enters one at the
  door (``api.partition_hold``), before it routes anything.
- A call outside any operation that meets a held gate fails ``Unavailable``
  when the gate opens (it was routed by the old assignment): stream loops and
  background tasks retry it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

from mesh.errors import Unavailable

# Inbox long polls: they may last many seconds and change nothing (``next_page`` ends in a read of the
# page, which a retired actor still answers; the stream's next call meets the new layout). The read may
# retry committing a cursor whose ack already failed: that ack was answered with an error, not lost.
IDLE_WAITS = frozenset({"wait", "next_page"})
_IN_OPERATION: ContextVar[bool] = ContextVar("memesh_partition_operation", default=False)


class PartitionGate:
    def __init__(self, max_wait_s: float = 60.0) -> None:
        self.max_wait_s = max_wait_s
        self._open = asyncio.Event()
        self._open.set()
        self._busy = 0  # counted calls and operations in flight
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def held(self) -> bool:
        return not self._open.is_set()

    async def _admitted(self) -> None:
        if self._open.is_set() or _IN_OPERATION.get():
            return
        try:
            async with asyncio.timeout(self.max_wait_s):
                await self._open.wait()
        except TimeoutError:
            raise Unavailable("partitions are moving between actors; retry shortly") from None

    def _enter(self) -> None:
        self._busy += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._busy -= 1
        if self._busy == 0:
            self._idle.set()

    @contextlib.asynccontextmanager
    async def call(self, method: str) -> AsyncIterator[None]:
        """One call to a partitioned actor. Outside an operation (a stream's loop, a background task) a call
        that meets a held gate fails ``Unavailable`` once the gate opens: its actor was chosen by the old
        assignment, so its caller routes it again (streams and background loops retry)."""
        if self.held and not _IN_OPERATION.get():
            await self._admitted()
            raise Unavailable("the partitions moved while this call waited; retry")
        if method in IDLE_WAITS or _IN_OPERATION.get():
            yield
            return
        self._enter()
        try:
            yield
        finally:
            self._leave()

    @contextlib.asynccontextmanager
    async def operation(self) -> AsyncIterator[None]:
        """Many calls that must all see one layout (an erase, a reembed)."""
        if _IN_OPERATION.get():
            yield
            return
        await self._admitted()
        self._enter()
        token = _IN_OPERATION.set(True)
        try:
            yield
        finally:
            _IN_OPERATION.reset(token)
            self._leave()

    @contextlib.contextmanager
    def passing(self) -> Iterator[None]:
        """Calls made in this block pass a held gate uncounted (the resize's own calls to the actors it stops)."""
        token = _IN_OPERATION.set(True)
        try:
            yield
        finally:
            _IN_OPERATION.reset(token)

    async def hold(self, drain_s: float) -> bool:
        """Let no new call through; True once nothing counted is in flight, False after ``drain_s``."""
        self._open.clear()
        deadline = time.monotonic() + drain_s
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self._idle.wait()
        return self._idle.is_set()

    def release(self) -> None:
        self._open.set()

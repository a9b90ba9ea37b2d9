"""ObservatoryHub: the head's one reader of the Observatory, fanning hop events out to streams.

One hub per process (``Memesh.observatory``). It runs no task while nobody
watches: the first stream starts ONE poll loop (``Observatory.events_after``,
a bounded long-poll), every stream gets its own bounded queue, and the loop
stops when the last stream closes.

Guarantees:
- At most ``max_streams`` subscriptions at a time, and at most
  ``max_streams_per_tenant`` of one tenant's ProjectAdmins (so one tenant
  cannot hold the slots ServiceAdmins need); the slot is taken by
  ``subscribe`` (before a WebSocket upgrade) and given back by
  ``Subscription.close``. Over a cap: :class:`~mesh.errors.QuotaExceeded`
  (429 without Retry-After: a slot frees when another stream ends, at no time
  the server could promise).
- A subscription receives exactly the events with a sequence number above its
  ``start_seq``, in order, filtered by tenant; :meth:`ObservatoryHub.replay`
  pages exactly the retained events up to ``start_seq``. Subscribing before
  reading the replay is what makes replay + live have no gap and no duplicate.
- A queue never holds more than ``channel_capacity`` events: on overflow the
  oldest is dropped (counted in ``lagged``) and a :data:`RESYNC` marker takes
  its place at the head, so the consumer sees the marker exactly where the
  gap is. Events the hub itself could not read before the Observatory evicted
  them (or an Observatory restart) put a marker in every queue.
- Every wait is bounded: actor calls carry a deadline, ``take`` a timeout; a
  poll loop that keeps failing ends every subscription with ``Unavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Final, TypeVar

from mesh.errors import MemeshError, QuotaExceeded, TimedOut, Unavailable
from mesh.observation import Event, Numbered
from mesh.seam import Directory

T = TypeVar("T")

log = logging.getLogger(__name__)

MAX_REPLAY_PAGES = 100_000  # a bound only: the window ends long before (max_events / page)


class Resync:
    """The marker a stream sends where events were lost: ``{"resync": true}``."""

    def __repr__(self) -> str:
        return "RESYNC"


RESYNC: Final = Resync()
Item = Numbered | Resync


@dataclass(frozen=True, slots=True)
class ObservatoryHubConfig:
    channel_capacity: int = 16_384  # observatory.stream_channel_capacity
    max_streams: int = 16  # observatory.max_concurrent_streams
    max_streams_per_tenant: int = 4  # observatory.max_streams_per_tenant (tenant-filtered streams)
    poll_wait_s: float = 10.0  # how long one events_after call may wait for news
    poll_batch: int = 2_000  # events fetched per call
    call_timeout_s: float = 10.0  # an actor call's deadline beyond its own wait
    max_failures: int = 10  # consecutive failed polls before every stream is ended
    replay_page: int = 500


@dataclass(frozen=True, slots=True)
class ObservatoryFigures:
    """What /metrics reports; ``recorded``, ``saturated`` and ``depth`` are the Observatory's, as last fetched."""

    recorded: int
    saturated: int
    depth: int
    lagged: int
    streams_active: int
    replayed: int


class Subscription:
    """One stream's view of the live events: a bounded queue, filtered by tenant."""

    def __init__(self, hub: ObservatoryHub, tenant_id: str | None, start_seq: int, capacity: int) -> None:
        self.tenant_id = tenant_id
        self.start_seq = start_seq
        self.floor = start_seq  # live events at or below this were (or will be) sent by the replay
        self.failure: MemeshError | None = None
        self.ended = False  # the hub shut down or failed: no more events will come
        self._hub = hub
        self._capacity = capacity
        self._queue: deque[Item] = deque()
        self._events = 0  # events in the queue (markers not counted)
        self._ready = asyncio.Event()
        self._released = False

    def _offer(self, seq: int, event: Event) -> int:
        """Queue one live event if it is this stream's; returns how many events overflow dropped."""
        if seq <= self.floor or (self.tenant_id is not None and event.get("tenant_id") != self.tenant_id):
            return 0
        dropped = 0
        while self._events >= self._capacity and self._queue:
            if not isinstance(self._queue.popleft(), Resync):
                self._events -= 1
                dropped += 1
        if dropped and not (self._queue and isinstance(self._queue[0], Resync)):
            self._queue.appendleft(RESYNC)
        self._queue.append((seq, event))
        self._events += 1
        self._ready.set()
        return dropped

    def _gap(self) -> None:
        """Events this stream might have wanted are lost: mark the spot."""
        if not (self._queue and isinstance(self._queue[-1], Resync)):
            self._queue.append(RESYNC)
            self._ready.set()

    def _end(self, failure: MemeshError | None) -> None:
        self.failure = failure
        self.ended = True
        self._ready.set()

    async def take(self, timeout_s: float, limit: int = 256) -> list[Item]:
        """Up to ``limit`` queued items, oldest first; waits at most ``timeout_s`` for one (then ``[]``)."""
        if not self._queue and not self.ended:
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._ready.wait()
        items: list[Item] = []
        while self._queue and len(items) < limit:
            item = self._queue.popleft()
            if not isinstance(item, Resync):
                self._events -= 1
            items.append(item)
        return items

    def close(self) -> None:
        """Give the slot back (idempotent); the hub's poll loop stops with the last stream."""
        if not self._released:
            self._released = True
            self._hub._release(self)


class ObservatoryHub:
    def __init__(self, directory: Directory, config: ObservatoryHubConfig = ObservatoryHubConfig()) -> None:
        self.config = config
        self._directory = directory
        self._subs: set[Subscription] = set()
        self._slots = 0
        self._by_tenant: dict[str, int] = {}  # "" holds the ServiceAdmins' (unfiltered) streams
        self._cursor = 0  # the newest sequence number the poll loop has fanned out
        self._task: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._start = asyncio.Lock()
        self._closed = False
        self._stats: dict[str, int] = {}
        self.lagged = 0
        self.replayed = 0

    async def _ask(self, call: Awaitable[T], wait_s: float = 0.0) -> T:
        """``call`` to the Observatory, given up (TimedOut) after its own wait plus ``call_timeout_s``."""
        try:
            async with asyncio.timeout(wait_s + self.config.call_timeout_s):
                return await call
        except TimeoutError as exc:
            raise TimedOut("the observatory did not answer in time") from exc

    @property
    def streams_active(self) -> int:
        return self._slots

    async def subscribe(self, tenant_id: str | None) -> Subscription:
        """Take a stream slot and start receiving live events (``tenant_id`` None: every tenant).

        QuotaExceeded over ``max_streams``; Unavailable / TimedOut when the
        Observatory cannot be reached (the slot is then given back).
        """
        if self._closed:
            raise Unavailable("the server is shutting down")
        if self._slots >= self.config.max_streams:
            raise QuotaExceeded(f"at most {self.config.max_streams} observatory streams at a time")
        if tenant_id is not None and self._by_tenant.get(tenant_id, 0) >= self.config.max_streams_per_tenant:
            raise QuotaExceeded(f"at most {self.config.max_streams_per_tenant} observatory streams per tenant")
        self._slots += 1
        self._by_tenant[tenant_id or ""] = self._by_tenant.get(tenant_id or "", 0) + 1
        try:
            async with self._start:
                if self._task is not None and self._task.done():
                    self._task = None  # ended on its own (failures): start afresh
                if self._task is None:
                    _, top, _ = await self._ask(self._directory.observatory().events_after(0, 0, 0.0))
                    self._cursor = top
                sub = Subscription(self, tenant_id, self._cursor, self.config.channel_capacity)
                self._subs.add(sub)
                if self._task is None:
                    self._task = asyncio.get_running_loop().create_task(self._poll())
        except BaseException:
            self._give_back(tenant_id)
            raise
        return sub

    def _give_back(self, tenant_id: str | None) -> None:
        self._slots -= 1
        left = self._by_tenant.get(tenant_id or "", 1) - 1
        if left > 0:
            self._by_tenant[tenant_id or ""] = left
        else:
            self._by_tenant.pop(tenant_id or "", None)

    def _release(self, sub: Subscription) -> None:
        self._give_back(sub.tenant_id)
        self._subs.discard(sub)
        if not self._subs:
            self._stop_polling()

    def _stop_polling(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def replay(self, sub: Subscription, since: float | None) -> AsyncIterator[list[Event]]:
        """The retained events up to ``sub.start_seq`` received at or after ``since``, oldest first, in pages."""
        cursor, upto = 0, sub.start_seq
        for _ in range(MAX_REPLAY_PAGES):
            page, through = await self._ask(
                self._directory.observatory().replay_page(cursor, upto, self.config.replay_page, since, sub.tenant_id)
            )
            if page:
                self.replayed += len(page)
                yield [event for _, event in page]
            if through >= upto or through <= cursor:
                break
            cursor = through
        sub.floor = max(sub.floor, upto)

    async def snapshot(self, since: float | None, limit: int, tenant_id: str | None) -> list[Event]:
        """The newest ``limit`` retained events received at or after ``since``, newest last."""
        return await self._ask(self._directory.observatory().snapshot(since, limit, tenant_id))

    async def _poll(self) -> None:
        """The one loop reading the Observatory while any stream is open."""
        failures = 0
        config = self.config
        while self._subs:
            try:
                events, top, evicted_before = await self._ask(
                    self._directory.observatory().events_after(self._cursor, config.poll_batch, config.poll_wait_s),
                    config.poll_wait_s,
                )
            except Exception:  # any failure counts; the loop must outlive a restarting actor
                failures += 1
                log.warning("observatory poll failed (%d in a row)", failures, exc_info=True)
                if failures >= config.max_failures:
                    self._fail_all(Unavailable("the observatory is unavailable"))
                    return
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            failures = 0
            self._fan_out(events, top, evicted_before)

    def _fan_out(self, events: list[Numbered], top: int, evicted_before: int) -> None:
        restarted = top < self._cursor  # a restarted Observatory whose sequence starts lower
        if restarted or evicted_before > self._cursor:
            if not restarted:
                self.lagged += evicted_before - self._cursor
            for sub in self._subs:
                sub._gap()
                if restarted:
                    sub.floor = min(sub.floor, evicted_before)
            self._cursor = evicted_before
            if restarted:
                return  # these events answered a cursor from the old sequence: ask again
        for seq, event in events:
            if seq <= self._cursor:
                continue
            for sub in self._subs:
                self.lagged += sub._offer(seq, event)
            self._cursor = seq

    def _fail_all(self, failure: MemeshError) -> None:
        for sub in self._subs:
            sub._end(failure)
        self._subs.clear()
        self._task = None

    async def refresh_stats(self, timeout_s: float) -> None:
        """Fetch the Observatory's counts for /metrics; on failure the last ones stay."""
        try:
            async with asyncio.timeout(timeout_s):
                stats = await self._directory.observatory().stats()
        except (TimeoutError, MemeshError) as exc:
            log.debug("observatory stats not refreshed: %s", exc)
            return
        self._stats = {k: int(v) for k, v in stats.items()}

    def figures(self) -> ObservatoryFigures:
        stats = self._stats
        return ObservatoryFigures(
            recorded=stats.get("recorded", 0),
            saturated=stats.get("dropped", 0),
            depth=stats.get("depth", 0),
            lagged=self.lagged,
            streams_active=self._slots,
            replayed=self.replayed,
        )

    async def close(self) -> None:
        """End every stream (they close with 1001) and stop the poll loop; waits at most a few seconds."""
        self._closed = True
        for sub in self._subs:
            sub._end(None)
        self._subs.clear()
        self._stop_polling()
        if self._stopping:
            await asyncio.wait(set(self._stopping), timeout=5.0)

"""Recall's access times on their way to the scene shards: soft state, sent in as few calls as load allows.

Guarantees:
- :meth:`AccessTimes.record` never waits and never fails the recall that
  calls it, nor :meth:`AccessTimes.send_now` the read that calls it; a failed
  send is logged and dropped (access times are soft state, as the scene
  shard's ``touch`` says).
- They ride on the shard's next search: :meth:`AccessTimes.take` hands what
  waits for a shard to the search call about to go there (the shard records
  them before it answers, so a query or recall after a recall sees its access
  times, as it did when each recall sent its own call). What no search takes
  within ``linger_s`` goes in a ``touch`` call of its own; at most one touch
  call per shard is in flight, and ids recorded meanwhile wait for the next.
  So a lone client's recalls cost no call of their own, and N concurrent
  recalls a few calls a second instead of N. A read by id or a listing sends
  what waits for its shards first (:meth:`AccessTimes.send_now`), so it too
  sees the access times of the recalls before it.
- A batch carries the latest time recorded into it for every id it holds (at
  most ``linger_s`` and a round trip later than the recall that named the id).
- Bounded: at most ``max_pending`` ids wait per shard; ids past that are
  dropped with a warning (soft state).
- :meth:`AccessTimes.close` sends what waits at once and waits (bounded) for
  what is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

from mesh.query import Touched

log = logging.getLogger(__name__)

Send = Callable[[int, list[str], datetime], Awaitable[None]]


class AccessTimes:
    def __init__(self, send: Send, max_pending: int = 10_000, linger_s: float = 0.2) -> None:
        self._send = send
        self._max_pending = max_pending
        self._linger_s = linger_s
        self._pending: dict[int, tuple[dict[str, None], datetime]] = {}
        self._running: dict[int, asyncio.Task[None]] = {}
        self._closing = asyncio.Event()
        self.calls = 0  # touch calls sent (for tests and figures)
        self.taken = 0  # batches that rode on a search call

    def take(self, shard: int) -> Touched | None:
        """What waits for ``shard``, for the search call about to go there (it records them before answering)."""
        held = self._pending.pop(shard, None)
        if held is None:
            return None
        self.taken += 1
        return list(held[0]), held[1]

    async def send_now(self, shards: Iterable[int]) -> None:
        """Send what waits for any of ``shards`` now, and wait for it (a read is about to go there)."""
        waiting = [(shard, batch) for shard in shards if (batch := self.take(shard)) is not None]
        await asyncio.gather(*(self._send_logged(shard, *batch) for shard, batch in waiting))

    async def _send_logged(self, shard: int, ids: list[str], latest: datetime) -> None:
        self.calls += 1
        try:
            await self._send(shard, ids, latest)
        except Exception:  # soft state: a failed send fails no recall and no read
            log.warning("recording access times failed", exc_info=True)

    def record(self, shard: int, ids: list[str], now: datetime) -> None:
        held, latest = self._pending.get(shard, ({}, now))
        for cell_id in ids:
            if len(held) >= self._max_pending and cell_id not in held:
                log.warning("access times: %d ids already wait for scene shard %d; dropping the rest", len(held), shard)
                break
            held[cell_id] = None
        self._pending[shard] = (held, max(latest, now))
        if shard not in self._running:
            task = asyncio.get_running_loop().create_task(self._drain(shard))
            self._running[shard] = task

    async def _drain(self, shard: int) -> None:
        try:
            while shard in self._pending:
                if not self._closing.is_set():  # a search may take them meanwhile
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._linger_s):
                            await self._closing.wait()
                if shard not in self._pending:
                    break
                held, latest = self._pending.pop(shard)
                await self._send_logged(shard, list(held), latest)
        finally:
            self._running.pop(shard, None)

    async def close(self, timeout_s: float = 10.0) -> None:
        self._closing.set()  # what lingers goes now
        running = list(self._running.values())
        if running:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await asyncio.gather(*running, return_exceptions=True)

"""Recall's access times on their way to the scene shards: soft state, sent in as few calls as load allows.

Guarantees:
- :meth:`AccessTimes.record` never waits and never fails the recall that
  calls it; a failed send is logged and dropped (access times are soft state,
  as the scene shard's ``touch`` says).
- Adaptive, with no added delay when alone: a shard with no touch in flight
  gets its ids in a call started at once (what a lone recall did before);
  ids recorded while a shard's call is in flight wait for it and then go
  together in the next call. So at most one touch call per shard is in flight,
  and under N concurrent recalls a shard gets about one call per round trip
  instead of N.
- A batch carries the latest time recorded into it for every id it holds (at
  most one round trip later than the recall that named the id).
- Bounded: at most ``max_pending`` ids wait per shard; ids past that are
  dropped with a warning (soft state).
- :meth:`AccessTimes.close` waits (bounded) for what is in flight and pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from mesh.errors import MemeshError

log = logging.getLogger(__name__)

Send = Callable[[int, list[str], datetime], Awaitable[None]]


class AccessTimes:
    def __init__(self, send: Send, max_pending: int = 10_000) -> None:
        self._send = send
        self._max_pending = max_pending
        self._pending: dict[int, tuple[dict[str, None], datetime]] = {}
        self._running: dict[int, asyncio.Task[None]] = {}
        self.calls = 0  # touch calls sent (for tests and figures)

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
                held, latest = self._pending.pop(shard)
                self.calls += 1
                try:
                    await self._send(shard, list(held), latest)
                except MemeshError:
                    log.warning("recording access times failed", exc_info=True)
        finally:
            self._running.pop(shard, None)

    async def close(self, timeout_s: float = 10.0) -> None:
        running = list(self._running.values())
        if running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), timeout_s)

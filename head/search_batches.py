"""Concurrent searches of one scene shard, sent in as few actor calls as load allows.

Every ``query`` and ``recall`` asks each scene shard that can hold a match for its candidates. One
actor call per request per shard made the Ray hop, not the search, the cost
of a request under concurrency. :class:`SearchBatches` coalesces them.

Guarantees:
- Adaptive, with no added delay when alone: a shard with no search in flight
  gets a request in a call started at once; requests that arrive while a
  shard's call is in flight wait for it and then go together in the next
  call (at most ``max_batch`` in one). So at most one search call per shard
  is in flight, and N concurrent requests cost a shard about one call per
  round trip instead of N.
- Each request gets exactly the answer a call of its own would have given
  (the shard answers every request of a batch independently, in order), or
  the error of the call that carried it.
- A request whose caller gave up (cancelled) is dropped from the batch if it
  has not been sent yet; once sent, its answer is discarded.
- With ``enabled`` false every request is its own call: the behaviour
  before batching, kept for comparison and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from mesh.errors import MemeshError
from mesh.query import SearchAnswer, SearchRequest

Call = Callable[[int, list[SearchRequest]], Awaitable[list[SearchAnswer | MemeshError]]]


class SearchBatches:
    def __init__(self, call: Call, max_batch: int = 64, enabled: bool = True) -> None:
        self._call = call
        self._max_batch = max_batch
        self._enabled = enabled
        self._waiting: dict[int, list[tuple[SearchRequest, asyncio.Future[SearchAnswer]]]] = {}
        self._running: dict[int, asyncio.Task[None]] = {}
        self.calls = 0  # search calls sent (for tests and figures)

    async def search(self, shard: int, request: SearchRequest) -> SearchAnswer:
        """The shard's answer to ``request``."""
        if not self._enabled:
            self.calls += 1
            (answer,) = await self._call(shard, [request])
            if isinstance(answer, MemeshError):
                raise answer
            return answer
        future: asyncio.Future[SearchAnswer] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(shard, []).append((request, future))
        if shard not in self._running:
            self._running[shard] = asyncio.get_running_loop().create_task(self._drain(shard))
        return await future

    async def _drain(self, shard: int) -> None:
        try:
            while True:
                waiting = [(r, f) for r, f in self._waiting.get(shard, []) if not f.done()]
                if not waiting:
                    break
                batch, rest = waiting[: self._max_batch], waiting[self._max_batch :]
                self._waiting[shard] = rest
                self.calls += 1
                try:
                    answers = await self._call(shard, [r for r, _ in batch])
                except asyncio.CancelledError:
                    for _, future in batch:
                        future.cancel()
                    raise
                except Exception as exc:  # noqa: BLE001 - the call failed: every request it carried gets its error, as its own call would
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():
                        continue
                    if isinstance(answer, MemeshError):  # the shard refused this request alone
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:  # a normal exit leaves nothing waiting; a cancelled one cancels who waits
            self._running.pop(shard, None)
            for _, future in self._waiting.pop(shard, []):
                future.cancel()

    async def close(self) -> None:
        """Cancel what is in flight (its callers get CancelledError)."""
        for task in list(self._running.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

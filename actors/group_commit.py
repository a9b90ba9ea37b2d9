"""Group commit: many small writes of an actor become one storage commit, each acknowledged only once durable."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mesh.errors import StorageUnavailable
from mesh.histogram import Histogram

T = TypeVar("T")


@dataclass
class _Batch(Generic[T]):
    items: list[T] = field(default_factory=list)
    done: asyncio.Future[None] | None = None


class GroupCommitter(Generic[T]):
    """Collects items for up to ``window_s`` (or until ``max_items``) and writes them with one ``flush``.

    Guarantees:
    - ``submit`` resolves when the flush holding its items has returned, or
      raises what that flush raised; it never hangs (a flush that is
      interrupted fails its batch).
    - One flush runs at a time, so batches reach storage in submission order;
      items submitted during a flush form the next batch.
    - ``flush`` is a barrier: it returns once everything submitted before it
      has been flushed (skipping the window), whatever the outcome. The worker
      is never cancelled: it ends by itself when nothing is pending, and the
      next ``submit`` starts a new one.
    - ``adaptive`` (the acknowledged writes' committers): a batch that starts while the
      committer is idle (no flush ended within the last window) flushes at once, so a lone
      write pays no window; under load the window gathers the writes that follow.
      Without it (soft state) every batch waits its window: fewer commits is the point.
    """

    def __init__(
        self,
        flush: Callable[[list[T]], Awaitable[None]],
        window_s: float,
        max_items: int,
        timing: Histogram | None = None,
        adaptive: bool = False,
    ) -> None:
        """``timing``, when given, observes how long each flush took (seconds), failed ones included."""
        self._flush = flush
        self._timing = timing
        self._window_s = window_s
        self._max_items = max_items
        self._adaptive = adaptive
        self._last_flush_end = float("-inf")
        self._pending: _Batch[T] = _Batch()
        self._hurry = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._inflight: asyncio.Future[None] | None = None
        self._urgent = 0

    async def submit(self, items: list[T]) -> None:
        if not items:
            return
        batch = self._pending
        if batch.done is None:
            batch.done = asyncio.get_running_loop().create_future()
        batch.items.extend(items)
        done = batch.done
        if len(batch.items) >= self._max_items:
            self._hurry.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())
        await asyncio.shield(done)

    async def _run(self) -> None:
        while self._pending.items:
            idle = self._adaptive and time.monotonic() - self._last_flush_end >= self._window_s
            if not self._hurry.is_set() and self._window_s > 0 and not self._urgent and not idle:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._window_s):
                        await self._hurry.wait()
            self._hurry.clear()
            batch, self._pending = self._pending, _Batch()
            assert batch.done is not None
            self._inflight = batch.done
            started = time.monotonic()
            try:
                await self._flush(batch.items)
            except Exception as exc:  # noqa: BLE001 - handed to every waiter, never swallowed
                batch.done.set_exception(exc)
            except BaseException:  # cancelled mid-flush (the loop is closing): nobody may wait forever
                batch.done.set_exception(StorageUnavailable("the commit was interrupted"))
                raise
            else:
                batch.done.set_result(None)
            finally:
                self._inflight = None
                self._last_flush_end = time.monotonic()
                if self._timing is not None:
                    self._timing.observe(self._last_flush_end - started)

    async def flush(self) -> None:
        """Wait until everything submitted so far is flushed (a barrier; failures stay with their submitters)."""
        waits = [f for f in (self._inflight, self._pending.done) if f is not None and not f.done()]
        if not waits:
            return
        self._hurry.set()
        await asyncio.gather(*(asyncio.shield(f) for f in waits), return_exceptions=True)

    @contextlib.asynccontextmanager
    async def urgent(self) -> AsyncIterator[None]:
        """Inside this block no batch waits for its window (one waiting now flushes at once): for an owner
        that drains its background submissions before it closes or erases, whatever the window."""
        self._urgent += 1
        self._hurry.set()
        try:
            yield
        finally:
            self._urgent -= 1

    async def close(self) -> None:
        """Flush what is pending; the committer stays usable (a later submit starts a new worker)."""
        await self.flush()

"""The walks a scene shard's writes start: queued, run in lockstep batches (by a walker, ``actors.walker``),
recorded once done.

Guarantees:
- Every committed live cell's walk runs once, in the background, after its
  write was acknowledged; its completion is recorded in
  ``scene_shard_<n>_propagated``, and a restarted shard replays the walks of
  cells without that record (deliveries are idempotent by id, and a replayed
  walk moves no agent node a second time). The records are soft state,
  committed at most once per ``soft_window_s`` (a LanceDB commit costs more CPU
  than a walk): a crash replays at most that much of walks already done.
- A batch that fails because an actor is unavailable (a killed walker, until Ray has noticed and restarted
  it: seconds, during which its calls fail at once) is retried with growing pauses for about 20 s; one
  that fails otherwise is retried twice. Then it is left for the next restart's replay.
- ``quiesce(ids)``: when it returns no walk of ``ids`` is queued or running,
  and none starts again (an erase can then count and remove what they made).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection, Iterable
from datetime import UTC, datetime

import pyarrow as pa

from actors.chores import Background
from actors.group_commit import GroupCommitter
from actors.schemas import PROPAGATED_SCHEMA
from actors.storage import RowTable
from mesh.errors import TimedOut, Unavailable
from mesh.model import Cell, Vector
from mesh.partition import MemoryPartition

log = logging.getLogger(__name__)

RETRY_PAUSES_S = (0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 8.0)  # between the attempts of a failed batch

WalkBatch = Callable[[list[tuple[Cell, Vector]], datetime, bool], Awaitable[object]]
"""Run these walks (cell, vector of the first wave), delivering what they reach; ``observe``: also move the
writers' agent nodes (a batch's first attempt)."""


class WalkQueue:
    """One shard's walk queue and its single background loop, one batch at a time (``walk`` None: no walks start)."""

    def __init__(
        self,
        walk: WalkBatch | None,
        batch: int,
        partition: Callable[[], MemoryPartition],
        background: Background,
        optimize_every: int,
        soft_window_s: float = 1.0,
    ) -> None:
        self._walk = walk
        self._batch = batch
        self._partition = partition
        self._background = background
        self._marks = Background("walk marks")  # their commits: what ``settle`` does not wait for
        self._optimize_every = optimize_every
        self._queue: deque[Cell] = deque()
        self._queued_by_tenant: Counter[str] = Counter()  # the queue's cells per tenant (what admission weighs)
        self._replayed: set[str] = set()
        self._walker: asyncio.Task[None] | None = None
        self._walking: frozenset[str] = frozenset()  # the cells of the batch being walked now
        self._turn = asyncio.Condition()
        self._doomed: set[str] = set()  # planned for erasure: no walk starts for them
        self._walked: set[str] = set()
        self._table: RowTable | None = None
        self._commit: GroupCommitter[str] = GroupCommitter(self._flush, soft_window_s, 1024)

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def share(self, tenant_id: str) -> tuple[int, int]:
        """(walks queued for ``tenant_id``, tenants with walks queued)."""
        return self._queued_by_tenant[tenant_id], len(self._queued_by_tenant)

    def _counted(self, cells: Iterable[Cell], sign: int) -> None:
        for cell in cells:
            self._queued_by_tenant[cell.tenant_id] += sign
            if self._queued_by_tenant[cell.tenant_id] <= 0:
                del self._queued_by_tenant[cell.tenant_id]

    async def load(self, table: RowTable, cells: list[Cell]) -> None:
        """Read which walks finished; queue the replay of the live ``cells`` whose walk did not."""
        self._table = table
        self._walked = set((await table.load()).column("cell_id").to_pylist())
        if self._walk is not None:
            pending = [c for c in sorted(cells, key=lambda c: c.id) if c.id not in self._walked and c.live]
            self._replayed.update(c.id for c in pending)  # their agent nodes were already moved before the crash
            self.enqueue(pending)

    def enqueue(self, cells: list[Cell]) -> None:
        if self._walk is None:  # walks are off: these cells count as walked, so turning walks on replays none
            self.mark_walked([c.id for c in cells])
            return
        cells = [c for c in cells if c.id not in self._doomed]
        if not cells:
            return
        self._queue.extend(cells)
        self._counted(cells, +1)
        if self._walker is None or self._walker.done():
            self._walker = asyncio.get_running_loop().create_task(self._walk_loop())

    def mark_walked(self, cell_ids: list[str]) -> None:
        """Record cells that start no walk of their own (a Pattern abstracts cells whose diffs already went)."""
        self._walked.update(cell_ids)
        if cell_ids:
            self._marks.spawn(self._commit.submit(cell_ids))

    async def settle(self, timeout_s: float) -> int:
        """Wait (at most ``timeout_s``) until every walk queued so far has finished (its deliveries
        committed; its soft record may still be pending); how many were queued."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = len(self._queue)
        while loop.time() < deadline:
            walker = self._walker
            if not self._queue and (walker is None or walker.done()) and not self._background.busy:
                break
            await asyncio.sleep(0.005)
        return pending

    def drop_queued(self) -> int:
        """Forget the walks not started (their cells stay unmarked, so the next owner replays them); how many."""
        dropped = list(self._queue)
        self._queue.clear()
        self._counted(dropped, -1)
        return len(dropped)

    async def quiesce(self, cell_ids: frozenset[str]) -> None:
        """No walk of ``cell_ids`` is queued or running when this returns (they start none again)."""
        self._doomed |= cell_ids
        dropped = [c for c in self._queue if c.id in cell_ids]
        self._queue = deque(c for c in self._queue if c.id not in cell_ids)
        self._counted(dropped, -1)
        async with self._turn:
            await self._turn.wait_for(lambda: not (self._walking & cell_ids))

    async def forget(self, cell_ids: Collection[str]) -> None:
        """Erase the walk records of ``cell_ids`` from memory and every data file."""
        assert self._table is not None
        await self._commit.flush()  # no record of theirs lands after the delete
        await self._table.delete_where_in("cell_id", cell_ids)
        await self._table.purge()
        self._walked.difference_update(cell_ids)
        self._doomed.difference_update(cell_ids)

    async def flush(self) -> None:
        await self._commit.flush()

    async def close(self) -> None:
        async with self._commit.urgent():
            await self._marks.drain()
        await self._commit.flush()

    async def _walk_loop(self) -> None:
        """Drain the queue in batches; a failed batch is retried, then left for the next restart's replay."""
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._batch))]
            self._counted(batch, -1)
            self._walking = frozenset(c.id for c in batch)
            try:
                await self._walk_batch(batch)
            finally:
                async with self._turn:
                    self._walking = frozenset()
                    self._turn.notify_all()

    async def _walk_batch(self, batch: list[Cell]) -> None:
        assert self._walk is not None
        jobs = [(cell, cell.embedding) for cell in batch]  # the first wave searches around the written cell
        replay = [job for job in jobs if job[0].id in self._replayed]
        fresh_jobs = [job for job in jobs if job[0].id not in self._replayed]
        pauses = iter(RETRY_PAUSES_S)
        for attempt in itertools.count():
            try:
                now = datetime.now(UTC)
                if fresh_jobs:
                    await self._walk(fresh_jobs, now, attempt == 0)
                if replay:
                    await self._walk(replay, now, False)
                break
            except Exception as exc:  # a walker or an owner restarting: retry, then leave it to the replay at restart
                log.warning("walk batch failed (attempt %d)", attempt + 1, exc_info=True)
                # An actor restarting (unavailable, or not answering) is waited for; any other failure is
                # retried twice, as it would most likely fail again, and the queue must not stall on it.
                waiting = isinstance(exc, (Unavailable, TimedOut)) or attempt < 2
                pause = next(pauses, None) if waiting else None
                if pause is None:
                    return
                await asyncio.sleep(pause)
        partition = self._partition()
        fresh = [cell.id for cell in batch if cell.id not in self._walked and cell.id in partition.cells]
        self._walked.update(fresh)
        if fresh:
            self._marks.spawn(self._commit.submit(fresh))

    async def _flush(self, cell_ids: list[str]) -> None:
        assert self._table is not None
        present = [c for c in cell_ids if c in self._partition().cells]
        await self._table.append(pa.Table.from_pylist([{"cell_id": c} for c in present], schema=PROPAGATED_SCHEMA))
        await self._table.optimize_if_due(self._optimize_every)

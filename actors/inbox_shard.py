"""InboxShard: the inboxes of a partition of agents (virtual actors by agent id).

Guarantees:
- ``deliver`` is idempotent by delivery id and answers after the deliveries
  are durable; a delivery is visible to ``pull`` only once durable, and
  sequences become visible as a gap-free prefix (rows that failed to land
  are retried, in order, with the next batch). Durable means journaled on a
  local database (``storage.write_journal``: ``actors.commit_behind`` commits
  them to the table behind, and a load replays what had not reached it),
  committed to the table otherwise.
- A pull that moves the cursor answers after the new cursor is committed, so
  an acknowledged cursor survives a crash; the cursor never rewinds.
- Bounded (``InboxRetention``): acknowledged deliveries older than
  ``acked_max_age_s`` leave the inbox at the next sweep, and an inbox never
  holds much more than ``max_deliveries`` (the oldest leave first,
  acknowledged ones before the rest); what was dropped unacknowledged is
  counted. Sequences and cursors are untouched by retention.
- On restart every committed delivery and cursor that can be decoded is reloaded.
- Erase steps are idempotent and leave no byte of an erased delivery in the
  data files or the journal (one whose flush failed and waits for the next is
  never written afterwards); retention's deletes, like the erase, settle the
  journal first, so a replay never brings back a delivery that left.
- After ``close`` deliveries are refused; a shard closed before it loaded
  refuses every call (it never replays a journal a successor writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from actors.chores import Background, LoadOnce, Periodic
from actors.codecs import deliveries_from_arrow, deliveries_to_arrow
from actors.commit_behind import CommitBehind
from actors.group_commit import GroupCommitter
from actors.schemas import CURSOR_SCHEMA, DELIVERY_SCHEMA
from actors.storage import KeyedTable, LanceStore, RowTable, StorageConfig
from actors.write_journal import DELIVERIES, replay_journal, shard_journal
from mesh.errors import MemeshError, StorageUnavailable
from mesh.histogram import LATENCY_S, Histogram
from mesh.inbox import AgentInbox, Budget, StoredDelivery
from mesh.inbox_wire import InboxDelivery, PullResult, is_close_match, render_item, with_withheld
from mesh.layout import table_prefix

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InboxRetention:
    """How long deliveries stay (settings section ``retention``)."""

    acked_max_age_s: float = 7 * 24 * 3600.0
    max_deliveries: int = 10_000
    sweep_interval_s: float = 60.0
    budget: Budget = field(default_factory=Budget)  # deliveries per reached node per window


@dataclass(frozen=True, slots=True)
class InboxShardConfig:
    storage: StorageConfig
    index: int
    retention: InboxRetention = InboxRetention()
    generation: int = 0  # of the partition layout (mesh.layout): which tables this shard owns


class InboxShard:
    def __init__(self, config: InboxShardConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._inboxes: dict[str, AgentInbox] = {}
        self._unflushed: list[tuple[str, StoredDelivery]] = []
        self._dirty_cursors: dict[str, int] = {}
        self._durable_cursors: dict[str, int] = {}
        self._signals: dict[str, asyncio.Event] = {}
        self._deliveries: RowTable | None = None
        self._cursors: KeyedTable | None = None
        self._ready_once = LoadOnce(self._load)
        window = config.storage.commit_window_s
        self._commit_timing = Histogram(LATENCY_S)  # every storage commit's duration, for /metrics
        self._delivery_commit: GroupCommitter[int] = GroupCommitter(
            self._flush_deliveries, window, 4096, self._commit_timing, adaptive=True
        )
        # With the journal: the deliveries' table commits, behind their visibility.
        self._table_commit: GroupCommitter[pa.Table] = GroupCommitter(
            self._commit_rows, window, 4096, self._commit_timing, adaptive=True
        )
        journal = shard_journal(config.storage, table_prefix("inbox_shard", config.index, config.generation) + DELIVERIES)
        self._behind_work = Background("inbox commit behind")
        self._behind = (
            CommitBehind(journal, self._table_commit, self._behind_work, f"inbox shard {config.index}", key="delivery_id")
            if journal
            else None
        )
        self._cursor_commit: GroupCommitter[int] = GroupCommitter(
            self._flush_cursors, window, 4096, self._commit_timing, adaptive=True
        )
        self._trim_commit: GroupCommitter[str] = GroupCommitter(self._flush_trims, config.storage.soft_commit_window_s, 100_000)
        self._sweeper = Periodic("inbox retention sweep", self.sweep, config.retention.sweep_interval_s)
        self._trims = Background("inbox trim")
        self.dropped_acked = 0
        self.dropped_unacked = 0
        self._skipped = 0  # stored rows the last load could not decode
        self._closed = False  # after close: deliveries are refused (a walk's retry, or the next owner, redoes them)
        self._untrimmed: set[str] = set()  # deliveries retention took out whose delete failed: retried
        self._budget = config.retention.budget
        self.delivered = 0  # new deliveries committed since this actor started
        self.displaced = 0  # deliveries taken out by a better one of the same node and window
        self.withheld = 0  # deliveries not enqueued: their node's window was full of better ones

    async def _ready(self) -> None:
        """Load on first use. A shard closed before it loaded refuses instead: its load would replay and
        clear the journal files its successor (the same prefix) may already be writing."""
        if self._closed and self._deliveries is None:
            raise StorageUnavailable(f"inbox shard {self.config.index} is closed")
        await self._ready_once()

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage)
        prefix = table_prefix("inbox_shard", self.config.index, self.config.generation)
        self._deliveries = await store.table(f"{prefix}_deliveries", DELIVERY_SCHEMA, identity="delivery_id")
        self._cursors = await store.keyed(f"{prefix}_cursors", CURSOR_SCHEMA, "id")
        rows = await self._deliveries.load()
        if self._behind is not None:  # deliveries made visible on the journal that had not reached the table
            rows = await replay_journal(self._behind.journal, self._deliveries, rows)
        decoded = deliveries_from_arrow(rows)
        self._skipped = rows.num_rows - len(decoded)
        for agent_id, stored in sorted(decoded, key=lambda pair: pair[1].seq):
            inbox = self._inbox(agent_id)
            inbox.restore(stored)
            inbox.track(stored, self._budget, is_close_match(stored.members))
        for inbox in self._inboxes.values():
            inbox.served = inbox.committed  # what was stored before the restart may have been seen
        for row in (await self._cursors.load()).to_pylist():
            inbox = self._inbox(row["id"])
            inbox.cursor = max(inbox.cursor, int(row["cursor"]))
            # every delivery up to the cursor may have left (erase, retention): new ones still number above it
            inbox.last_seq = max(inbox.last_seq, inbox.cursor)
            inbox.committed = max(inbox.committed, inbox.cursor)
            self._durable_cursors[row["id"]] = inbox.cursor
        if not self._closed:  # a close during the load: no sweep may start after it
            self._sweeper.start()

    def _inbox(self, agent_id: str) -> AgentInbox:
        inbox = self._inboxes.get(agent_id)
        if inbox is None:
            inbox = self._inboxes[agent_id] = AgentInbox()
        return inbox

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {
            "inboxes": len(self._inboxes),
            "deliveries": sum(len(i) for i in self._inboxes.values()),
            "dropped_acked": self.dropped_acked,
            "dropped_unacked": self.dropped_unacked,
            "budget_displaced": self.displaced,
            "budget_withheld": self.withheld,
            "skipped_rows": self._skipped,
            "delivered": self.delivered,
            "journal_pending": self._behind.outstanding if self._behind else 0,
            "unacked": sum(i.unacked for i in self._inboxes.values()),
            "unacked_max": max((i.unacked for i in self._inboxes.values()), default=0),
            "pid": os.getpid(),
            **self._commit_timing.fields("commit"),
        }

    async def deliver(self, deliveries: list[InboxDelivery]) -> int:
        """Enqueue under the node budget and commit; returns how many were new. A batch is taken best
        first (score, then delivery id), so when a node's budget binds inside one batch the best are
        kept. An inbox past 110% of its cap is trimmed at once in memory; the trim's commit (and the
        removal of displaced deliveries) does not hold the walk (one lost to a crash is redone by the
        sweep after the reload, or stays as a delivery the agent may see)."""
        if self._closed:
            raise StorageUnavailable(f"inbox shard {self.config.index} is closed")
        await self._ready()
        added = 0
        crowded: set[str] = set()
        gone: list[str] = []
        cap = self.config.retention.max_deliveries
        for d in sorted(deliveries, key=lambda d: (-d.score, d.delivery_id)):
            inbox = self._inbox(d.agent_id)
            stored, displaced = inbox.enqueue_within(
                self._budget, d.delivery_id, d.diff_id, d.project_id, d.score, d.members, d.delivered_at, d.close
            )
            if displaced is not None:
                gone.append(displaced.delivery_id)
                self.displaced += 1
            if stored is None:
                self.withheld += not inbox.has(d.delivery_id)
                continue
            self._unflushed.append((d.agent_id, stored))
            added += 1
            if len(inbox) > cap + cap // 10:
                crowded.add(d.agent_id)
        try:
            await self._delivery_commit.submit([added or 1])  # also waits for a replay's first attempt to commit
        except BaseException:  # the displaced left memory whatever this commit did: their rows go too
            if gone:
                self._trims.spawn(self._trim_commit.submit(gone))
            raise
        self.delivered += added
        gone += self._trim_in_memory(crowded)
        if gone:
            self._trims.spawn(self._trim_commit.submit(gone))
        return added

    async def sweep(self) -> int:
        """Apply the retention policy to every inbox here; returns how many deliveries left."""
        await self._ready()
        return await self._trim(set(self._inboxes))

    async def _trim(self, agent_ids: set[str]) -> int:
        gone = self._trim_in_memory(agent_ids)
        if gone or self._untrimmed:  # a sweep also retries the deletes that failed
            await self._trim_commit.submit(gone or sorted(self._untrimmed))
        return len(gone)

    def _trim_in_memory(self, agent_ids: set[str]) -> list[str]:
        """Apply the retention policy to these inboxes; the ids of the deliveries that left."""
        retention = self.config.retention
        now = self._clock()
        gone: list[str] = []
        for agent_id in agent_ids:
            inbox = self._inboxes.get(agent_id)
            if inbox is None:
                continue
            dropped, unacked = inbox.trim(now, retention.acked_max_age_s, retention.max_deliveries)
            self.dropped_acked += len(dropped) - unacked
            self.dropped_unacked += unacked
            gone += [d.delivery_id for d in dropped]
        return gone

    async def pull(
        self,
        agent_id: str,
        since: int | None,
        ack: int | None,
        limit: int | None,
        max_batch: int,
        read_scope: frozenset[str],
        by_seq: bool = False,
    ) -> PullResult:
        """One page under the spec's rules; ``by_seq`` orders items by sequence (the stream) instead of score."""
        await self._ready()
        inbox = self._inbox(agent_id)
        page = inbox.pull(since, ack, limit, max_batch, lambda project: not read_scope or project in read_scope)
        items = sorted(page.items, key=lambda d: d.seq) if by_seq else page.items
        await self._make_durable(agent_id, page.cursor)
        return PullResult(
            tuple(render_item(d.seq, with_withheld(d.members, inbox.withheld(d, self._budget))) for d in items),
            page.cursor,
            page.window_high,
            page.has_more,
            max((d.seq for d in page.items), default=0),
            page.window_low,
        )

    async def next_page(
        self, agent_id: str, since: int, max_batch: int, read_scope: frozenset[str], timeout_s: float
    ) -> PullResult:
        """A stream's step in one call: the page after ``since`` in sequence order as soon as a delivery
        above ``since`` is committed, or after ``timeout_s`` whatever there is (often nothing). Its
        ``window_high`` passes deliveries the read scope hides, so a stream moves past them."""
        await self.wait(agent_id, since, timeout_s)
        return await self.pull(agent_id, since, None, None, max_batch, read_scope, by_seq=True)

    async def ack(self, agent_id: str, ack: int) -> int:
        """Apply an acknowledgement alone (the stream's ack frames); returns the committed cursor."""
        await self._ready()
        inbox = self._inbox(agent_id)
        inbox.apply_ack(ack)
        await self._make_durable(agent_id, inbox.cursor)
        return inbox.cursor

    async def _make_durable(self, agent_id: str, cursor: int) -> None:
        """Answer only once ``cursor`` is committed: also after an earlier commit of it failed."""
        if cursor > self._durable_cursors.get(agent_id, 0):
            self._dirty_cursors[agent_id] = max(cursor, self._dirty_cursors.get(agent_id, 0))
            await self._cursor_commit.submit([1])

    async def cursor(self, agent_id: str) -> int:
        await self._ready()
        return self._inbox(agent_id).cursor

    async def wait(self, agent_id: str, after_seq: int, timeout_s: float) -> int:
        """Return once a delivery above ``after_seq`` is committed, or after ``timeout_s``; the committed top."""
        await self._ready()
        inbox = self._inbox(agent_id)
        if inbox.committed > after_seq:
            return inbox.committed
        signal = self._signals.setdefault(agent_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await signal.wait()
        return inbox.committed

    # ------------------------------------------------------------------- erase
    def _affected(self, wanted: frozenset[str], agent_id: str | None) -> tuple[AgentInbox | None, dict[str, AgentInbox]]:
        doomed = self._inboxes.get(agent_id) if agent_id is not None else None
        return doomed, {a: i for a, i in self._inboxes.items() if i is not doomed and i.count_of(wanted)}

    async def erase_count(self, diff_ids: list[str], agent_id: str | None) -> int:
        """How many deliveries an erase of ``diff_ids`` (and of ``agent_id``'s inbox) would remove here."""
        await self._ready()
        wanted = frozenset(diff_ids)
        doomed, affected = self._affected(wanted, agent_id)
        return (len(doomed.deliveries) if doomed is not None else 0) + sum(i.count_of(wanted) for i in affected.values())

    async def erase(self, diff_ids: list[str], agent_id: str | None) -> None:
        """Remove every delivery of ``diff_ids`` from every inbox here, and with ``agent_id`` that agent's
        whole inbox and cursor, from memory and every data file. Idempotent."""
        await self._ready()
        wanted = frozenset(diff_ids)
        _, affected = self._affected(wanted, agent_id)
        for inbox in affected.values():
            inbox.remove(wanted)
        if agent_id is not None:
            self._inboxes.pop(agent_id, None)
            self._durable_cursors.pop(agent_id, None)
            self._dirty_cursors.pop(agent_id, None)
        async with self._trim_commit.urgent():
            await self._trims.drain()
        for committer in (self._delivery_commit, self._cursor_commit, self._trim_commit):
            await committer.flush()  # pending appends land before the erase, never after
        await self._settled(purge=True)  # and the journal keeps no byte of them
        assert self._deliveries is not None and self._cursors is not None
        await self._deliveries.erase_rows("diff_id", wanted)
        if agent_id is not None:
            await self._deliveries.erase_rows("agent_id", [agent_id])
            await self._cursors.delete([agent_id])
            await self._cursors.rows.purge()

    async def close(self) -> None:
        """Finish the chores and commit everything pending; the shard is then safe to drop. Deliveries the
        table refuses stay journaled for the next load (logged). A deliver after this is refused."""
        self._closed = True
        await self._sweeper.stop()
        async with self._trim_commit.urgent():
            await self._trims.drain()
        for committer in (self._delivery_commit, self._cursor_commit, self._trim_commit):
            await committer.flush()
        if self._behind is not None:
            await self._behind_work.drain()
            try:
                await self._behind.settle()
            except MemeshError as exc:
                log.error("inbox shard %d closes with deliveries not committed to its table: %s", self.config.index, exc)
            finally:
                self._behind.close()  # no retry after this; the journal's file is closed
                await self._table_commit.flush()

    async def _settled(self, purge: bool = False) -> None:
        """Every delivery made visible so far is in the table, none is left in the journal (the barrier before
        rows are removed directly); raises StorageUnavailable when a commit fails (``purge``: or while a
        damaged journal segment may hold rows)."""
        await self._delivery_commit.flush()
        if self._behind is not None:
            await self._behind.settle(purge)

    async def _flush_deliveries(self, _: list[int]) -> None:
        assert self._deliveries is not None
        batch = list(self._unflushed)
        if not batch:
            return
        # Only what an inbox still holds: an erase may have taken out a delivery whose earlier flush failed
        # (it stayed here, uncommitted), and writing it now would bring it back after a restart.
        held = [(a, d) for a, d in batch if (inbox := self._inboxes.get(a)) is not None and inbox.has(d.delivery_id)]
        journaled = self._behind is not None and self._behind.journal.enabled
        if held and self._behind is not None and journaled:
            rows = deliveries_to_arrow(held)
            self._behind.accept(rows, [rows])  # durable now; the table's commit follows behind
        elif held:
            await self._deliveries.append(deliveries_to_arrow(held))
        del self._unflushed[: len(batch)]
        tops: dict[str, int] = {}
        for agent_id, stored in batch:
            tops[agent_id] = max(tops.get(agent_id, 0), stored.seq)
        for agent_id, top in tops.items():
            if (inbox := self._inboxes.get(agent_id)) is not None:  # an erased agent's inbox stays gone
                inbox.commit(top)
            signal = self._signals.pop(agent_id, None)
            if signal is not None:
                signal.set()
        if not journaled:
            await self._deliveries.optimize_if_due(self.config.storage.optimize_every)

    async def _commit_rows(self, batches: list[pa.Table]) -> None:
        """The table's commit of journaled deliveries (``CommitBehind``'s)."""
        assert self._deliveries is not None
        await self._deliveries.append(pa.concat_tables(batches))
        try:  # the rows are in: a failed compaction must not fail the commit, whose retry would append them again
            await self._deliveries.optimize_if_due(self.config.storage.optimize_every)
        except MemeshError as exc:
            log.warning("inbox shard %d: compacting the deliveries failed (%s); tried again later", self.config.index, exc)

    async def _flush_trims(self, delivery_ids: list[str]) -> None:
        """Delete what retention took out (and what an earlier failed delete left); on failure the ids are kept
        for the next trim or sweep, so a delivery that left memory never stays in the table for good."""
        assert self._deliveries is not None
        ids = set(delivery_ids) | self._untrimmed
        try:
            await self._settled()  # a journaled delivery reaches the table before its delete, so no replay revives it
            await self._deliveries.delete_where_in("delivery_id", ids)
        except Exception:
            self._untrimmed |= ids
            raise
        self._untrimmed -= ids
        await self._deliveries.optimize_if_due(self.config.storage.optimize_every)

    async def _flush_cursors(self, _: list[int]) -> None:
        assert self._cursors is not None
        dirty, self._dirty_cursors = self._dirty_cursors, {}
        if not dirty:
            return
        try:
            rows = [{"id": agent, "cursor": cursor} for agent, cursor in dirty.items()]
            await self._cursors.write(pa.Table.from_pylist(rows, schema=CURSOR_SCHEMA))
        except Exception:
            for agent, cursor in dirty.items():  # retried with the next batch
                self._dirty_cursors.setdefault(agent, cursor)
            raise
        for agent, cursor in dirty.items():
            self._durable_cursors[agent] = max(cursor, self._durable_cursors.get(agent, 0))

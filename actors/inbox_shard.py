"""InboxShard: the inboxes of a partition of agents (virtual actors by agent id).

Guarantees:
- ``deliver`` is idempotent by delivery id and answers after the deliveries
  are committed; a delivery is visible to ``pull`` only once committed, and
  sequences become visible as a gap-free prefix (rows that failed to commit
  are retried, in order, with the next batch).
- A pull that moves the cursor answers after the new cursor is committed, so
  an acknowledged cursor survives a crash; the cursor never rewinds.
- On restart every committed delivery and cursor is reloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass

import pyarrow as pa

from actors.codecs import CURSOR_SCHEMA, DELIVERY_SCHEMA, deliveries_from_arrow, deliveries_to_arrow
from actors.storage import GroupCommitter, LanceStore, LoadOnce, RowTable
from mesh.erasure import EraseCounts
from mesh.inbox import AgentInbox, StoredDelivery


@dataclass(frozen=True, slots=True)
class InboxShardConfig:
    storage_uri: str
    index: int
    commit_window_s: float = 0.002
    optimize_every: int = 64
    cache_mb: int = 32  # LanceDB index and metadata cache bounds (storage.cache_mb)


@dataclass(frozen=True, slots=True)
class InboxDelivery:
    """A delivery a walk makes: ``item_json`` holds the item's ``"diff": ..., "delivery": ...`` members."""

    agent_id: str
    delivery_id: str
    diff_id: str
    project_id: str
    score: float
    item_json: str


@dataclass(frozen=True, slots=True)
class PullResult:
    items: tuple[str, ...]  # each SeqInboxItem as JSON, in page order (score, or sequence for the stream)
    cursor: int
    window_high: int
    has_more: bool
    max_seq: int  # the largest delivery_seq among the items (0 when none)

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def items_json(self) -> str:
        """The items as one JSON array (what a pull's body embeds)."""
        return "[" + ",".join(self.items) + "]"


def render_item(d: StoredDelivery) -> str:
    return f'{{"delivery_seq":{d.seq},{d.item_json}}}'


class InboxShard:
    def __init__(self, config: InboxShardConfig) -> None:
        self.config = config
        self._inboxes: dict[str, AgentInbox] = {}
        self._unflushed: list[tuple[str, StoredDelivery]] = []
        self._dirty_cursors: dict[str, int] = {}
        self._durable_cursors: dict[str, int] = {}
        self._signals: dict[str, asyncio.Event] = {}
        self._deliveries: RowTable | None = None
        self._cursors: RowTable | None = None
        self._ready_once = LoadOnce(self._load)
        self._delivery_commit: GroupCommitter[int] = GroupCommitter(self._flush_deliveries, config.commit_window_s, 4096)
        self._cursor_commit: GroupCommitter[int] = GroupCommitter(self._flush_cursors, config.commit_window_s, 4096)

    async def _ready(self) -> None:
        await self._ready_once()

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage_uri, self.config.cache_mb << 20)
        prefix = f"inbox_shard_{self.config.index}"
        self._deliveries = await store.table(f"{prefix}_deliveries", DELIVERY_SCHEMA)
        self._cursors = await store.table(f"{prefix}_cursors", CURSOR_SCHEMA)
        for agent_id, stored in deliveries_from_arrow(await self._deliveries.read_all()):
            self._inbox(agent_id).restore(stored)
        for row in (await self._cursors.read_all()).to_pylist():
            inbox = self._inbox(row["id"])
            inbox.cursor = max(inbox.cursor, int(row["cursor"]))
            self._durable_cursors[row["id"]] = inbox.cursor

    def _inbox(self, agent_id: str) -> AgentInbox:
        inbox = self._inboxes.get(agent_id)
        if inbox is None:
            inbox = self._inboxes[agent_id] = AgentInbox()
        return inbox

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {"inboxes": len(self._inboxes), "pid": os.getpid()}

    async def deliver(self, deliveries: list[InboxDelivery]) -> int:
        """Enqueue and commit; returns how many were new."""
        await self._ready()
        added = 0
        for d in deliveries:
            stored = self._inbox(d.agent_id).enqueue(d.delivery_id, d.diff_id, d.project_id, d.score, d.item_json)
            if stored is not None:
                self._unflushed.append((d.agent_id, stored))
                added += 1
        await self._delivery_commit.submit([added or 1])  # also waits for a replay's first attempt to commit
        return added

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
            tuple(render_item(d) for d in items),
            page.cursor,
            page.window_high,
            page.has_more,
            max((d.seq for d in page.items), default=0),
        )

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
            await asyncio.wait_for(signal.wait(), timeout_s)
        return inbox.committed

    async def erase(self, diff_ids: list[str], agent_id: str | None, dry_run: bool) -> EraseCounts:
        """Remove every delivery of ``diff_ids`` from every inbox here, and with ``agent_id`` that
        agent's whole inbox and cursor; rows and older table versions included. Idempotent."""
        await self._ready()
        wanted = frozenset(diff_ids)
        doomed = self._inboxes.get(agent_id) if agent_id is not None else None
        affected = {a: inbox for a, inbox in self._inboxes.items() if inbox is not doomed and inbox.count_of(wanted)}
        removed = (len(doomed.deliveries) if doomed is not None else 0) + sum(i.count_of(wanted) for i in affected.values())
        if dry_run:
            return EraseCounts(deliveries_removed=removed, tombstones_propagated=1)
        if not removed and (agent_id is None or agent_id not in self._durable_cursors):
            return EraseCounts(tombstones_propagated=1)  # nothing held here: acknowledged, no rewrite
        for inbox in affected.values():
            inbox.remove(wanted)
        if agent_id is not None:
            self._inboxes.pop(agent_id, None)
            self._durable_cursors.pop(agent_id, None)
            self._dirty_cursors.pop(agent_id, None)
        await self._delivery_commit.close()  # pending appends land before the delete, never after
        await self._cursor_commit.close()
        assert self._deliveries is not None and self._cursors is not None
        await self._deliveries.delete_where_in("diff_id", sorted(wanted))
        if agent_id is not None:
            await self._deliveries.delete_where_in("agent_id", [agent_id])
            await self._cursors.delete_where_in("id", [agent_id])
        await self._deliveries.purge()
        await self._cursors.purge()
        return EraseCounts(deliveries_removed=removed, tombstones_propagated=1)

    async def close(self) -> None:
        await self._delivery_commit.close()
        await self._cursor_commit.close()

    async def _flush_deliveries(self, _: list[int]) -> None:
        assert self._deliveries is not None
        batch = list(self._unflushed)
        if not batch:
            return
        await self._deliveries.append(deliveries_to_arrow(batch))
        del self._unflushed[: len(batch)]
        tops: dict[str, int] = {}
        for agent_id, stored in batch:
            tops[agent_id] = max(tops.get(agent_id, 0), stored.seq)
        for agent_id, top in tops.items():
            self._inbox(agent_id).commit(top)
            signal = self._signals.pop(agent_id, None)
            if signal is not None:
                signal.set()
        await self._deliveries.optimize_if_due(self.config.optimize_every)

    async def _flush_cursors(self, _: list[int]) -> None:
        assert self._cursors is not None
        dirty, self._dirty_cursors = self._dirty_cursors, {}
        if not dirty:
            return
        try:
            rows = [{"id": agent, "cursor": cursor} for agent, cursor in dirty.items()]
            await self._cursors.upsert(pa.Table.from_pylist(rows, schema=CURSOR_SCHEMA))
        except Exception:
            for agent, cursor in dirty.items():  # retried with the next batch
                self._dirty_cursors.setdefault(agent, cursor)
            raise
        for agent, cursor in dirty.items():
            self._durable_cursors[agent] = max(cursor, self._durable_cursors.get(agent, 0))
        await self._cursors.optimize_if_due(self.config.optimize_every)

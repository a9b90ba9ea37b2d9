"""BeaconSet: the beacons and agent nodes of a partition of agents.

Guarantees:
- Single writer of ``beacon_set_<n>_beacons`` and ``beacon_set_<n>_agents``;
  ``place`` and ``remove`` answer after their row is committed (placed, or
  deleted); when that commit fails, memory is left as storage holds it.
- ``place`` is idempotent by beacon id; ``remove`` by anyone but the owner is a
  NotFound, like a missing beacon; removing (or deleting) again a beacon among
  its agent's last ``REMEMBERED_REMOVALS`` removals is a no-op that succeeds
  (held in memory only: after a restart it is a NotFound).
- Bounded: a removed beacon leaves memory and its row at once; an expired one
  leaves at the owner's next ``place`` or at the next sweep (every
  ``sweep_interval_s``); the vector index is rebuilt when dead rows outnumber
  live ones. An agent holds at most ``max_per_agent`` beacons.
- An agent node's vector is the running mean of the cells its agent wrote
  (``observe``); persisted with group commit (soft: a crash may lose the last
  few observations, never a beacon).
- ``neighbours`` answers for one tenant only, never returns a removed or
  expired beacon, and leaves out the writer's own nodes when asked.
- Every leaf keeps its standing statistics (``mesh.standing``): folded from
  the diffs of a batch's first wave marked ``observe``, before that wave is
  answered; soft state like agent nodes (committed with them, a crash may lose
  the last few writes' worth, and a node starts from the prior).
- Erase steps (``erase``, ``set_agent_sums``) are idempotent and leave no byte
  of an erased beacon or of an old agent-node sum in the data files.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from actors.beacon_reembed import BeaconReembedding
from actors.chores import Background, LoadOnce, Periodic
from actors.codecs import agent_nodes_from_arrow, agent_nodes_to_arrow, beacons_from_arrow, beacons_to_arrow
from actors.group_commit import GroupCommitter
from actors.presence import PresenceTeller
from actors.schemas import STANDING_SCHEMA, agent_node_schema, beacon_schema
from actors.storage import KeyedTable, LanceStore, StorageConfig
from actors.tenant_nodes import RecentRemovals, TenantNodes
from mesh.errors import NotFound, QuotaExceeded
from mesh.histogram import LATENCY_S, Histogram
from mesh.layout import table_prefix
from mesh.model import AgentNode, Beacon, Vector, WriterSums
from mesh.seam import Directory
from mesh.standing import StandingPrior
from mesh.storage_cost import stored_bytes
from mesh.walk import NeighbourRequest, NodeKind
from mesh.walk_wire import PackedAnswers, Row

log = logging.getLogger(__name__)
REMEMBERED_REMOVALS = 64  # per agent: what makes a repeated removal a no-op


@dataclass(frozen=True, slots=True)
class BeaconSetConfig:
    storage: StorageConfig
    index: int
    dims: int
    sweep_interval_s: float = 60.0  # how often expired beacons are purged (0: only at place)
    prior: StandingPrior = field(default_factory=StandingPrior)
    standing_commit_s: float = 10.0  # how often folded leaf statistics are committed (0: only at close)
    generation: int = 0  # of the partition layout (mesh.layout): which tables this set owns


class BeaconSet(BeaconReembedding):
    def __init__(self, config: BeaconSetConfig, lookup: Callable[[], Directory] | None = None) -> None:
        """``lookup``: how this set finds the scene shards whose walks it tells of the tenants it holds."""
        self.config = config
        self._lookup = lookup
        self._directory: Directory | None = None
        self._presence = PresenceTeller(("beacon_set", config.index), self._dir)
        self.beacons: dict[str, Beacon] = {}
        self.agents: dict[str, AgentNode] = {}
        self._tenants: dict[str, TenantNodes] = {}
        self._beacon_table: KeyedTable | None = None
        self._agent_table: KeyedTable | None = None
        self._ready_once = LoadOnce(self._load)
        self._background = Background("agent-node commit")
        self._staged: dict[str, Vector] = {}  # a reembed's new beacon vectors, switched in by apply_staged
        self._skipped = 0  # stored rows the last load could not decode
        self._removed = RecentRemovals(REMEMBERED_REMOVALS)
        window = config.storage.commit_window_s
        self._commit_timing = Histogram(LATENCY_S)  # every storage commit's duration, for /metrics
        self._beacon_commit: GroupCommitter[tuple[str, Beacon | None]] = GroupCommitter(
            self._flush_beacons, window, 512, self._commit_timing, adaptive=True
        )
        self._agent_commit: GroupCommitter[AgentNode] = GroupCommitter(
            self._flush_agents, config.storage.soft_commit_window_s, 1024, self._commit_timing
        )
        self._sweeper = Periodic("expired-beacon sweep", self.sweep, config.sweep_interval_s)
        self._standing_table: KeyedTable | None = None
        self._folded: set[str] = set()  # tenants whose leaf statistics changed since their last commit
        self._unfolded: set[str] = set()  # removed beacons whose statistics row goes at the next commit
        self._standing_saver = Periodic("leaf statistics commit", self._commit_standings, config.standing_commit_s)

    async def _ready(self) -> None:
        await self._ready_once()

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage)
        prefix = table_prefix("beacon_set", self.config.index, self.config.generation)
        self._beacon_table = await store.keyed(f"{prefix}_beacons", beacon_schema(self.config.dims), "id", identity="id")
        self._agent_table = await store.keyed(f"{prefix}_agents", agent_node_schema(self.config.dims), "id", identity="id")
        stale = []
        beacon_rows, agent_rows = await self._beacon_table.load(), await self._agent_table.load()
        beacons, nodes = beacons_from_arrow(beacon_rows), agent_nodes_from_arrow(agent_rows)
        self._skipped = beacon_rows.num_rows - len(beacons) + agent_rows.num_rows - len(nodes)
        for beacon in beacons:
            if beacon.removed or beacon.embedding.shape != (self.config.dims,):
                stale.append(beacon.id)  # removed by a version that kept the row
                continue
            self._put_beacon(beacon)
        for node in nodes:
            if node.vector_sum.shape == (self.config.dims,):
                self._put_agent(node)
        self._standing_table = await store.keyed(f"{prefix}_standings", STANDING_SCHEMA, "id", identity="id")
        for row in (await self._standing_table.load()).to_pylist():
            held = self._tenants.get(row["tenant_id"])
            if held is not None:
                held.restore_standing(row["id"], row["count"], row["total"], row["total_sq"])
        self._standing_saver.start()
        if stale:
            await self._beacon_commit.submit([(b, None) for b in stale])
        self._sweeper.start()
        await self._presence.tell(self._tenants)  # again: repairs a crash between a first commit and its telling

    def attach(self, directory: Directory) -> None:
        """Give the set the directory it tells walkers through (in-process; Ray sets look it up)."""
        self._directory = directory

    def _dir(self) -> Directory | None:
        if self._directory is None and self._lookup is not None:
            self._directory = self._lookup()
        return self._directory

    async def tenants(self) -> list[str]:
        """The tenants this set holds a beacon or agent node of (what a walker that starts asks)."""
        await self._ready()
        return sorted(self._tenants)

    def _tenant(self, tenant_id: str) -> TenantNodes:
        if tenant_id not in self._tenants:
            self._tenants[tenant_id] = TenantNodes(self.config.dims, self.config.prior)
        return self._tenants[tenant_id]

    def _put_beacon(self, beacon: Beacon) -> None:
        self.beacons[beacon.id] = beacon
        expires = beacon.expires_at.timestamp() if beacon.expires_at is not None else math.inf
        self._tenant(beacon.tenant_id).put(beacon.id, beacon.embedding, True, NodeKind.BEACON, beacon.agent_id, expires)

    def _put_agent(self, node: AgentNode) -> None:
        self.agents[node.agent_id] = node
        self._tenant(node.tenant_id).put(node.agent_id, node.vector, node.count > 0, NodeKind.AGENT, node.agent_id)

    def _drop_beacon(self, beacon: Beacon, remember: bool = True) -> None:  # remember: a removal, not an undone place
        self.beacons.pop(beacon.id, None)
        if remember:
            self._removed.add(beacon.id, beacon.tenant_id, beacon.agent_id)
            self._unfolded.add(beacon.id)
        nodes = self._tenant(beacon.tenant_id)
        nodes.drop(beacon.id)
        if nodes.wasteful:
            self._rebuild(beacon.tenant_id)

    def _rebuild(self, tenant_id: str) -> None:
        """A fresh index for the tenant with only the nodes it holds (reclaims dead rows); standings kept."""
        old = self._tenants.pop(tenant_id, None)
        for beacon in self.beacons.values():
            if beacon.tenant_id == tenant_id:
                self._put_beacon(beacon)
        for node in self.agents.values():
            if node.tenant_id == tenant_id:
                self._put_agent(node)
        fresh = self._tenants.get(tenant_id)
        if old is not None and fresh is not None:
            fresh.adopt_standings(old)

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {
            "beacons": len(self.beacons),
            "agent_nodes": len(self.agents),
            "skipped_rows": self._skipped,
            "pid": os.getpid(),
            **self._commit_timing.fields("commit"),
        }

    async def usage(self, tenant_id: str) -> tuple[int, int]:
        """(beacons, bytes) of ``tenant_id`` held here (what its quotas count)."""
        await self._ready()
        held = [b for b in self.beacons.values() if b.tenant_id == tenant_id]
        return len(held), sum(stored_bytes(b.interest, self.config.dims) for b in held)

    def _expired_of(self, beacons: list[Beacon], now: datetime) -> list[Beacon]:
        return [b for b in beacons if b.expires_at is not None and b.expires_at <= now]

    async def _purge(self, expired: list[Beacon]) -> None:
        for beacon in expired:
            self._drop_beacon(beacon)
        if expired:
            await self._beacon_commit.submit([(b.id, None) for b in expired])

    async def place(self, beacon: Beacon, max_per_agent: int) -> Beacon:
        """Idempotent by id; QuotaExceeded past ``max_per_agent`` beacons (the agent's expired ones
        are purged first, so only live ones count)."""
        await self._ready()
        existing = self.beacons.get(beacon.id)
        if existing is not None:
            return existing
        owned = [
            self.beacons[b] for b in self._tenant(beacon.tenant_id).by_agent.get(beacon.agent_id, set()) if b in self.beacons
        ]
        expired = self._expired_of(owned, beacon.created_at)
        if len(owned) - len(expired) >= max_per_agent:
            raise QuotaExceeded(f"an agent holds at most {max_per_agent} beacons")
        self._put_beacon(beacon)
        for old in expired:
            self._drop_beacon(old)
        try:
            await self._beacon_commit.submit([(beacon.id, beacon), *((b.id, None) for b in expired)])
        except Exception:  # not acknowledged: the beacon leaves again (its id was never given out)
            if self.beacons.get(beacon.id) is beacon:
                self._drop_beacon(beacon, remember=False)
            raise
        await self._presence.tell([beacon.tenant_id])
        return beacon

    async def remove(self, tenant_id: str, agent_id: str, beacon_id: str) -> bool:
        """Remove the caller's own beacon (its row is deleted); True when this call removed it, False
        when it was removed before (a no-op); removing an absent one is NotFound."""
        await self._ready()
        beacon = self.beacons.get(beacon_id)
        if beacon is None:
            if self._removed.get(beacon_id) == (tenant_id, agent_id):
                return False
            raise NotFound("beacon not found")
        if beacon.tenant_id != tenant_id or beacon.agent_id != agent_id:
            raise NotFound("beacon not found")
        self._drop_beacon(beacon)
        try:
            await self._beacon_commit.submit([(beacon_id, None)])
        except Exception:  # not acknowledged: placed as storage holds it, and a retry removes it
            self._put_beacon(beacon)
            self._unfolded.discard(beacon_id)
            raise
        return True

    async def sweep(self, now: datetime | None = None) -> int:
        """Purge every expired beacon (memory and rows); returns how many."""
        await self._ready()
        expired = self._expired_of(list(self.beacons.values()), now or datetime.now(UTC))
        await self._purge(expired)
        return len(expired)

    async def list_for(self, tenant_id: str, agent_id: str, now: datetime) -> list[Beacon]:
        await self._ready()
        return sorted(
            (b for b in self.beacons.values() if b.tenant_id == tenant_id and b.agent_id == agent_id and b.active(now)),
            key=lambda b: b.id,
        )

    async def neighbours_many(
        self, requests: list[NeighbourRequest], now: datetime, moves: list[tuple[str, str, Vector]] | None = None
    ) -> PackedAnswers:
        """``neighbours`` for many walks at once, packed for the wire (no candidate object here; the walker
        unpacks): per tenant and excluded writer, one search for every frontier node, one product for every
        hit's relevance to its walk's diff and one pass for their standings.

        ``moves`` (a batch's first wave): the writers' agent nodes held here move first, as
        ``observe_many`` would (one message instead of two). Then the diffs of requests marked
        ``observe`` are folded into their tenant's leaf statistics (one product per tenant), so
        every walk of the batch is judged on the same ones."""
        await self._ready()
        if moves:
            await self._move_agents(moves)
        self._fold([r for r in requests if r.observe])
        answers: list[dict[str, list[Row]]] = [{} for _ in requests]
        groups: dict[tuple[str, str | None], list[int]] = {}
        for n, request in enumerate(requests):
            groups.setdefault((request.tenant_id, request.exclude_agent), []).append(n)
        for (tenant_id, exclude), members in groups.items():
            nodes = self._tenants.get(tenant_id)
            flat = [(n, fid, vec) for n in members for fid, vec in requests[n].queries]
            if nodes is None or nodes.index.size == 0 or not flat:
                continue
            mask = nodes.mask(exclude, now.timestamp())
            k = max(requests[n].leaf_k for n in members)
            hits = nodes.index.search_many(np.stack([vec for _, _, vec in flat]), k, mask)
            kept = [found[: requests[n].leaf_k] for (n, _, _), found in zip(flat, hits, strict=True)]
            # every hit's relevance to its own walk's diff and its standing, for the whole group at once
            rows = np.fromiter((nodes.index.row_of(nid) for found in kept for nid, _ in found), dtype=np.intp)
            of_query = np.repeat(np.arange(len(flat)), [len(found) for found in kept])
            diffs = np.stack([requests[n].diff_vector for n, _, _ in flat])[of_query]
            scores = nodes.index.similarity_rows(rows, diffs)
            standing = nodes.standings.standing(rows, scores).tolist()
            relevance = scores.tolist()
            at = 0
            for (n, frontier_id, _), found in zip(flat, kept, strict=True):
                answers[n][frontier_id] = [
                    (nid, nodes.kind[nid].value, sim, relevance[at + i], nodes.agent[nid], standing[at + i], -1)
                    for i, (nid, sim) in enumerate(found)
                ]
                at += len(found)
        return PackedAnswers.of_rows(answers)  # leaves carry no vector

    def _fold(self, requests: list[NeighbourRequest]) -> None:
        """Fold the diffs into their tenants' leaf statistics (every node of the tenant sees every diff)."""
        by_tenant: dict[str, list[Vector]] = {}
        for request in requests:
            by_tenant.setdefault(request.tenant_id, []).append(request.diff_vector)
        for tenant_id, vectors in by_tenant.items():
            nodes = self._tenants.get(tenant_id)
            if nodes is not None and nodes.index.size:
                nodes.standings.fold(nodes.index.scores_many(np.stack(vectors)))
            self._folded.add(tenant_id)

    async def _commit_standings(self) -> None:
        """Write the leaf statistics of every tenant folded since the last commit (soft state)."""
        tenants, self._folded = self._folded, set()
        gone, self._unfolded = self._unfolded, set()
        if gone and self._standing_table is not None:
            await self._standing_table.delete([g for g in gone if g not in self.beacons])
        rows = [row for t in sorted(tenants) if (nodes := self._tenants.get(t)) is not None for row in nodes.standing_rows(t)]
        if rows and self._standing_table is not None:
            try:
                await self._standing_table.write(pa.Table.from_pylist(rows, schema=STANDING_SCHEMA))
            except Exception:
                self._folded |= tenants  # retried at the next commit
                raise

    async def observe_many(self, observations: list[tuple[str, str, Vector]]) -> None:
        """Move agent nodes by the cells their agents just wrote: (agent_id, tenant_id, vector) each."""
        await self._ready()
        await self._move_agents(observations)

    async def _move_agents(self, observations: list[tuple[str, str, Vector]]) -> None:
        changed: dict[str, AgentNode] = {}
        for agent_id, tenant_id, vector in observations:
            node = self.agents.get(agent_id) or AgentNode(agent_id, tenant_id, np.zeros(self.config.dims, dtype=np.float64))
            node.vector_sum = node.vector_sum + vector
            node.count += 1
            self._put_agent(node)
            changed[agent_id] = node
        # Agent nodes are soft state: answer now, commit with the next batch.
        self._background.spawn(self._commit_agents(list(changed.values())))
        await self._presence.tell(node.tenant_id for node in changed.values())

    async def _commit_agents(self, nodes: list[AgentNode]) -> None:
        try:
            await self._agent_commit.submit(nodes)
        except Exception:  # soft state: the next observation commits the node again
            log.warning("agent node commit failed", exc_info=True)

    async def locate(self, beacon_id: str) -> str | None:
        """The tenant of a stored beacon, or None when this set does not hold it."""
        await self._ready()
        beacon, removed = self.beacons.get(beacon_id), self._removed.get(beacon_id)
        return beacon.tenant_id if beacon is not None else removed[0] if removed is not None else None

    async def delete_beacon(self, beacon_id: str) -> bool:
        """An operator's delete: the beacon is removed; False when it already was."""
        await self._ready()
        beacon = self.beacons.get(beacon_id)
        if beacon is not None:
            await self.remove(beacon.tenant_id, beacon.agent_id, beacon_id)
        return beacon is not None

    # ------------------------------------------------------------------- erase
    def _doomed(self, agent_id: str | None, beacon_ids: list[str]) -> list[Beacon]:
        wanted = set(beacon_ids)
        return [b for b in self.beacons.values() if b.id in wanted or (agent_id is not None and b.agent_id == agent_id)]

    async def erase_count(self, agent_id: str | None, beacon_ids: list[str], writers: list[str]) -> tuple[int, int]:
        """(nodes an erase would remove here, agent nodes it would recompute here); nothing changes."""
        await self._ready()
        nodes = len(self._doomed(agent_id, beacon_ids)) + (agent_id is not None and agent_id in self.agents)
        return nodes, sum(1 for w in writers if w in self.agents and w != agent_id)

    async def erase(self, agent_id: str | None, beacon_ids: list[str]) -> None:
        """Erase beacons (by id, or all of ``agent_id``'s) and ``agent_id``'s agent node, from memory
        and every data file. Idempotent."""
        await self._ready()
        doomed = self._doomed(agent_id, beacon_ids)
        for beacon in doomed:
            self._drop_beacon(beacon)
        node = self.agents.pop(agent_id, None) if agent_id is not None else None
        if node is not None:
            self._tenant(node.tenant_id).drop(node.agent_id)
        await self._drained()
        assert self._beacon_table is not None and self._agent_table is not None
        await self._beacon_table.erase({*beacon_ids, *(b.id for b in doomed)})
        if agent_id is not None:
            await self._agent_table.erase([agent_id])
        if self._standing_table is not None:
            await self._standing_table.erase({*beacon_ids, *(b.id for b in doomed), *([agent_id] if agent_id else [])})

    async def set_agent_sums(self, tenant_id: str, sums: WriterSums, agent_ids: list[str]) -> None:
        """Set the agent nodes of ``agent_ids`` held here to ``sums`` (absent: no cells left), recomputed
        after an erase; their old sums leave the data files. Idempotent (absolute values)."""
        await self._ready()
        changed: list[AgentNode] = []
        for agent_id in agent_ids:
            if agent_id not in self.agents:
                continue
            total, count = sums.get(agent_id, (np.zeros(self.config.dims, dtype=np.float64), 0))
            node = AgentNode(agent_id, tenant_id, np.asarray(total, dtype=np.float64).copy(), count)
            self._put_agent(node)
            changed.append(node)
        if not changed:
            return
        await self._drained()
        assert self._agent_table is not None
        await self._agent_table.erase([], agent_nodes_to_arrow(changed, self.config.dims))

    async def _drained(self) -> None:
        """Every change queued before this call is committed (an erase then rewrites what it left)."""
        async with self._beacon_commit.urgent(), self._agent_commit.urgent():
            await self._background.drain()
            await self._beacon_commit.flush()
            await self._agent_commit.flush()

    # ----------------------------------------------------------------- reembed
    async def close(self) -> None:
        await self._sweeper.stop()
        await self._standing_saver.stop()
        await self._drained()
        await self._commit_standings()

    async def _flush_beacons(self, changes: list[tuple[str, Beacon | None]]) -> None:
        """Placed beacons are appended (a merge over the whole table costs far more), changed ones
        upserted, removed ones deleted; only the latest change of an id counts."""
        assert self._beacon_table is not None
        latest = dict(changes)
        dims = self.config.dims
        puts = {i: b for i, b in latest.items() if b is not None and self.beacons.get(i) is b}
        await self._beacon_table.write(beacons_to_arrow(puts.values(), dims))
        await self._beacon_table.delete([i for i, b in latest.items() if b is None])

    async def _flush_agents(self, nodes: list[AgentNode]) -> None:
        assert self._agent_table is not None
        latest = {n.agent_id: n for n in nodes if self.agents.get(n.agent_id) is n}
        await self._agent_table.write(agent_nodes_to_arrow(latest.values(), self.config.dims))

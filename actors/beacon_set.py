"""BeaconSet: the beacons and agent nodes of a partition of agents.

Guarantees:
- Single writer of ``beacon_set_<n>_beacons`` and ``beacon_set_<n>_agents``;
  ``place`` and ``remove`` answer after their row is committed.
- ``place`` is idempotent by beacon id; ``remove`` by anyone but the owner is a
  NotFound, like a missing beacon.
- An agent node's vector is the running mean of the cells its agent wrote
  (``observe``); persisted with group commit (soft: a crash may lose the last
  few observations, never a beacon).
- ``neighbours`` answers for one tenant only, never returns a removed or
  expired beacon, and leaves out the writer's own nodes when asked.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import numpy.typing as npt

from actors.codecs import (
    agent_node_schema,
    agent_nodes_from_arrow,
    agent_nodes_to_arrow,
    beacon_schema,
    beacons_from_arrow,
    beacons_to_arrow,
)
from actors.storage import GroupCommitter, LanceStore, LoadOnce, RowTable
from mesh.erasure import EraseCounts
from mesh.errors import NotFound, QuotaExceeded
from mesh.model import AgentNode, Beacon, Vector, WriterSums
from mesh.vector_index import VectorIndex
from mesh.walk import Candidate, NeighbourRequest, NodeKind

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BeaconSetConfig:
    storage_uri: str
    index: int
    dims: int
    commit_window_s: float = 0.002
    optimize_every: int = 64
    cache_mb: int = 32  # LanceDB index and metadata cache bounds (storage.cache_mb)


class _TenantNodes:
    """A tenant's beacons and agent nodes in one index, with who owns each row."""

    def __init__(self, dims: int) -> None:
        self.index = VectorIndex(dims)
        self.kind: dict[str, NodeKind] = {}
        self.agent: dict[str, str] = {}
        self.expires: dict[str, datetime] = {}
        self.by_agent: dict[str, set[str]] = {}

    def own(self, node_id: str, kind: NodeKind, agent_id: str) -> None:
        self.kind[node_id] = kind
        self.agent[node_id] = agent_id
        self.by_agent.setdefault(agent_id, set()).add(node_id)


class BeaconSet:
    def __init__(self, config: BeaconSetConfig) -> None:
        self.config = config
        self.beacons: dict[str, Beacon] = {}
        self.agents: dict[str, AgentNode] = {}
        self._tenants: dict[str, _TenantNodes] = {}
        self._beacon_table: RowTable | None = None
        self._agent_table: RowTable | None = None
        self._ready_once = LoadOnce(self._load)
        self._background: set[asyncio.Task[None]] = set()
        self._staged: dict[str, Vector] = {}  # a reembed's new beacon vectors, switched in by commit_staged
        self._stored: set[str] = set()  # beacon and agent ids with a committed row: later changes are upserts
        self._beacon_commit: GroupCommitter[Beacon] = GroupCommitter(self._flush_beacons, config.commit_window_s, 512)
        self._agent_commit: GroupCommitter[AgentNode] = GroupCommitter(self._flush_agents, config.commit_window_s * 10, 1024)

    async def _ready(self) -> None:
        await self._ready_once()

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage_uri, self.config.cache_mb << 20)
        prefix = f"beacon_set_{self.config.index}"
        self._beacon_table = await store.table(f"{prefix}_beacons", beacon_schema(self.config.dims))
        self._agent_table = await store.table(f"{prefix}_agents", agent_node_schema(self.config.dims))
        for beacon in beacons_from_arrow(await self._beacon_table.read_all()):
            self._put_beacon(beacon)
        for node in agent_nodes_from_arrow(await self._agent_table.read_all()):
            self._put_agent(node)
        self._stored = set(self.beacons) | set(self.agents)

    def _tenant(self, tenant_id: str) -> _TenantNodes:
        nodes = self._tenants.get(tenant_id)
        if nodes is None:
            nodes = self._tenants[tenant_id] = _TenantNodes(self.config.dims)
        return nodes

    def _put_beacon(self, beacon: Beacon) -> None:
        self.beacons[beacon.id] = beacon
        nodes = self._tenant(beacon.tenant_id)
        nodes.index.upsert(beacon.id, beacon.embedding, live=not beacon.removed)
        nodes.own(beacon.id, NodeKind.BEACON, beacon.agent_id)
        if beacon.expires_at is not None:
            nodes.expires[beacon.id] = beacon.expires_at

    def _put_agent(self, node: AgentNode) -> None:
        self.agents[node.agent_id] = node
        nodes = self._tenant(node.tenant_id)
        nodes.index.upsert(node.agent_id, node.vector, live=node.count > 0)
        nodes.own(node.agent_id, NodeKind.AGENT, node.agent_id)

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {
            "beacons": sum(1 for b in self.beacons.values() if not b.removed),
            "agent_nodes": len(self.agents),
            "pid": os.getpid(),
        }

    async def place(self, beacon: Beacon, max_per_agent: int) -> Beacon:
        """Idempotent by id; QuotaExceeded past ``max_per_agent`` active beacons."""
        await self._ready()
        existing = self.beacons.get(beacon.id)
        if existing is not None:
            return existing
        owned = self._tenant(beacon.tenant_id).by_agent.get(beacon.agent_id, set())
        active = sum(1 for b in owned if b in self.beacons and self.beacons[b].active(beacon.created_at))
        if active >= max_per_agent:
            raise QuotaExceeded(f"an agent holds at most {max_per_agent} beacons")
        self._put_beacon(beacon)
        await self._beacon_commit.submit([beacon])
        return beacon

    async def remove(self, tenant_id: str, agent_id: str, beacon_id: str) -> None:
        """Remove the caller's own beacon; removing twice is a no-op."""
        await self._ready()
        beacon = self.beacons.get(beacon_id)
        if beacon is None or beacon.tenant_id != tenant_id or beacon.agent_id != agent_id:
            raise NotFound("beacon not found")
        if beacon.removed:
            return
        beacon.removed = True
        self._tenant(tenant_id).index.set_live(beacon_id, False)
        await self._beacon_commit.submit([beacon])

    async def list_for(self, tenant_id: str, agent_id: str, now: datetime) -> list[Beacon]:
        await self._ready()
        return sorted(
            (b for b in self.beacons.values() if b.tenant_id == tenant_id and b.agent_id == agent_id and b.active(now)),
            key=lambda b: b.id,
        )

    async def observe(self, agent_id: str, tenant_id: str, vectors: list[Vector]) -> None:
        """Move the agent node's running mean by the cells it just wrote."""
        await self._ready()
        node = self.agents.get(agent_id) or AgentNode(agent_id, tenant_id, np.zeros(self.config.dims, dtype=np.float64))
        for vector in vectors:
            node.vector_sum = node.vector_sum + vector
            node.count += 1
        self._put_agent(node)
        await self._agent_commit.submit([node])

    async def neighbours_many(self, requests: list[NeighbourRequest], now: datetime) -> list[dict[str, list[Candidate]]]:
        """``neighbours`` for many walks at once: one matrix product per tenant and excluded writer."""
        await self._ready()
        answers: list[dict[str, list[Candidate]]] = [{} for _ in requests]
        groups: dict[tuple[str, str | None], list[int]] = {}
        for n, request in enumerate(requests):
            groups.setdefault((request.tenant_id, request.exclude_agent), []).append(n)
        for (tenant_id, exclude), members in groups.items():
            nodes = self._tenants.get(tenant_id)
            flat = [(n, fid, vec) for n in members for fid, vec in requests[n].queries]
            if nodes is None or nodes.index.size == 0 or not flat:
                continue
            mask = self._mask(nodes, exclude, now)
            k = max(requests[n].k for n in members)
            hits = nodes.index.search_many(np.stack([vec for _, _, vec in flat]), k, mask)
            for (n, frontier_id, _), found in zip(flat, hits, strict=True):
                found = found[: requests[n].k]
                relevance = nodes.index.similarity([nid for nid, _ in found], requests[n].diff_vector).tolist()
                answers[n][frontier_id] = [
                    Candidate(nid, nodes.kind[nid], sim, rel, nodes.agent[nid])
                    for (nid, sim), rel in zip(found, relevance, strict=True)
                ]
        return answers

    def _mask(self, nodes: _TenantNodes, exclude_agent: str | None, now: datetime) -> npt.NDArray[np.bool_]:
        mask = np.ones(nodes.index.size, dtype=np.bool_)
        for node_id, expires in nodes.expires.items():
            if expires <= now:
                mask[nodes.index.row_of(node_id)] = False
        for node_id in nodes.by_agent.get(exclude_agent or "", ()):
            mask[nodes.index.row_of(node_id)] = False
        return mask

    async def observe_many(self, observations: list[tuple[str, str, Vector]]) -> None:
        """``observe`` for many writes: (agent_id, tenant_id, vector) each."""
        await self._ready()
        changed: dict[str, AgentNode] = {}
        for agent_id, tenant_id, vector in observations:
            node = self.agents.get(agent_id) or AgentNode(agent_id, tenant_id, np.zeros(self.config.dims, dtype=np.float64))
            node.vector_sum = node.vector_sum + vector
            node.count += 1
            self._put_agent(node)
            changed[agent_id] = node
        # Agent nodes are soft state: answer now, commit with the next batch.
        self._background.add(asyncio.get_running_loop().create_task(self._commit_agents(list(changed.values()))))

    async def _commit_agents(self, nodes: list[AgentNode]) -> None:
        try:
            await self._agent_commit.submit(nodes)
        except Exception:  # soft state: the next observation commits the node again
            log.warning("agent node commit failed", exc_info=True)
        finally:
            self._background = {t for t in self._background if not t.done()}

    async def locate(self, beacon_id: str) -> str | None:
        """The tenant of a stored beacon, or None when this set does not hold it."""
        await self._ready()
        beacon = self.beacons.get(beacon_id)
        return beacon.tenant_id if beacon is not None else None

    async def delete_beacon(self, beacon_id: str) -> bool:
        """An operator's delete: the beacon stops attracting diffs; False when it already had."""
        await self._ready()
        beacon = self.beacons.get(beacon_id)
        if beacon is None or beacon.removed:
            return False
        await self.remove(beacon.tenant_id, beacon.agent_id, beacon_id)
        return True

    async def erase(
        self,
        agent_id: str | None,
        beacon_ids: list[str],
        writers: WriterSums,
        dry_run: bool,
    ) -> EraseCounts:
        """Erase beacons (by id, or all of ``agent_id``'s), ``agent_id``'s agent node, and take each
        writer's erased cells out of its agent node's running mean. Rows and old versions go too."""
        await self._ready()
        doomed = [b for b in self.beacons.values() if b.id in beacon_ids or (agent_id is not None and b.agent_id == agent_id)]
        node = self.agents.get(agent_id) if agent_id is not None else None
        adjusted = [a for a in writers if a in self.agents and a != agent_id]
        counts = EraseCounts(
            nodes_removed=len(doomed) + (node is not None), aggregates_recomputed=len(adjusted), tombstones_propagated=1
        )
        if dry_run or (not doomed and node is None and not adjusted):
            return counts  # a dry run, or nothing held here: acknowledged, no rewrite
        for beacon in doomed:
            del self.beacons[beacon.id]
            nodes = self._tenant(beacon.tenant_id)
            nodes.index.erase(beacon.id)
            nodes.expires.pop(beacon.id, None)
            nodes.by_agent.get(beacon.agent_id, set()).discard(beacon.id)
        if node is not None:
            del self.agents[node.agent_id]
            self._tenant(node.tenant_id).index.erase(node.agent_id)
        changed = []
        for writer in adjusted:
            current = self.agents[writer]
            total, count = writers[writer]
            current.vector_sum = current.vector_sum - total
            current.count = max(0, current.count - count)
            if current.count == 0:
                current.vector_sum = np.zeros(self.config.dims, dtype=np.float64)
            self._put_agent(current)
            changed.append(current)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._beacon_commit.close()
        await self._agent_commit.close()
        assert self._beacon_table is not None and self._agent_table is not None
        await self._beacon_table.delete_where_in("id", sorted(b.id for b in doomed))
        if node is not None:
            await self._agent_table.delete_where_in("id", [node.agent_id])
        self._stored -= {b.id for b in doomed} | ({node.agent_id} if node is not None else set())
        await self._agent_table.upsert(agent_nodes_to_arrow(changed, self.config.dims))
        await self._beacon_table.purge()
        await self._agent_table.purge()
        return counts

    # ----------------------------------------------------------------- reembed
    async def reembed_count(self) -> int:
        await self._ready()
        return sum(1 for b in self.beacons.values() if not b.removed)

    async def reembed_page(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        """(id, interest) of up to ``limit`` beacons in id order after ``after`` without a staged vector."""
        await self._ready()
        ids = sorted(
            b.id for b in self.beacons.values() if not b.removed and (after is None or b.id > after) and b.id not in self._staged
        )
        return [(bid, self.beacons[bid].interest) for bid in ids[:limit]]

    async def stage(self, vectors: list[tuple[str, Vector]]) -> None:
        await self._ready()
        self._staged.update(vectors)

    def _switched(self, engine: str, writers: WriterSums) -> tuple[list[Beacon], list[AgentNode]]:
        beacons = [replace(b, embedding=self._staged[b.id], engine=engine) for b in self.beacons.values() if b.id in self._staged]
        nodes = [
            AgentNode(a.agent_id, a.tenant_id, writers[a.agent_id][0].copy(), writers[a.agent_id][1])
            for a in self.agents.values()
            if a.agent_id in writers
        ]
        return beacons, nodes

    async def _write(self, beacons: list[Beacon], nodes: list[AgentNode]) -> None:
        assert self._beacon_table is not None and self._agent_table is not None
        dims = self.config.dims
        await self._beacon_table.upsert(beacons_to_arrow((b for b in beacons if b.id in self._stored), dims))
        await self._agent_table.upsert(agent_nodes_to_arrow((n for n in nodes if n.agent_id in self._stored), dims))

    async def persist_staged(self, engine: str, writers: WriterSums) -> None:
        """Phase one of a reembed switch: write the new beacon vectors and agent-node means; memory unchanged."""
        await self._ready()
        await self._beacon_commit.close()
        await self._agent_commit.close()
        await self._write(*self._switched(engine, writers))

    async def apply_staged(self, engine: str, writers: WriterSums) -> None:
        """Phase two: switch memory to the persisted vectors."""
        await self._ready()
        beacons, nodes = self._switched(engine, writers)
        for beacon in beacons:
            self._put_beacon(beacon)
        for node in nodes:
            self._put_agent(node)
        self._staged = {}

    async def revert_staged(self) -> None:
        """Undo phase one: rewrite the current beacons and agent nodes, drop the staged vectors."""
        await self._ready()
        staged = set(self._staged)
        self._staged = {}
        await self._write([b for b in self.beacons.values() if b.id in staged], list(self.agents.values()))

    async def discard_staged(self) -> None:
        self._staged = {}

    async def close(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._beacon_commit.close()
        await self._agent_commit.close()

    async def _flush_beacons(self, beacons: list[Beacon]) -> None:
        """New beacons are appended; removals upserted (a merge over the whole table costs far more)."""
        assert self._beacon_table is not None
        latest = {b.id: b for b in beacons}
        dims = self.config.dims
        await self._beacon_table.append(beacons_to_arrow((b for i, b in latest.items() if i not in self._stored), dims))
        await self._beacon_table.upsert(beacons_to_arrow((b for i, b in latest.items() if i in self._stored), dims))
        self._stored.update(latest)
        await self._beacon_table.optimize_if_due(self.config.optimize_every)

    async def _flush_agents(self, nodes: list[AgentNode]) -> None:
        assert self._agent_table is not None
        latest = {n.agent_id: n for n in nodes}
        dims = self.config.dims
        await self._agent_table.append(agent_nodes_to_arrow((n for i, n in latest.items() if i not in self._stored), dims))
        await self._agent_table.upsert(agent_nodes_to_arrow((n for i, n in latest.items() if i in self._stored), dims))
        self._stored.update(latest)
        await self._agent_table.optimize_if_due(self.config.optimize_every)

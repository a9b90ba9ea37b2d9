"""What a BeaconSet holds per tenant and per agent, in memory.

``TenantNodes``: a tenant's leaves (beacons and agent nodes) in one vector index, with row-aligned expiry
times and standing statistics, and who owns each row. A dropped node leaves every search at once; its row
is reclaimed when the BeaconSet rebuilds the tenant (``wasteful``), statistics carried over.
``RecentRemovals``: what makes a repeated removal a no-op. The BeaconSet persists what it must.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt

from mesh.model import Vector
from mesh.standing import LeafStandings, StandingPrior
from mesh.vector_index import VectorIndex
from mesh.walk import NodeKind


class TenantNodes:
    """A tenant's beacons and agent nodes in one index, with who owns each row and when it expires."""

    def __init__(self, dims: int, prior: StandingPrior) -> None:
        self.index = VectorIndex(dims)
        self.standings = LeafStandings(prior)
        self.expires = np.full(256, np.inf, dtype=np.float64)  # epoch seconds, row-aligned; inf: never
        self.kind: dict[str, NodeKind] = {}
        self.agent: dict[str, str] = {}
        self.by_agent: dict[str, set[str]] = {}
        self.dead = 0

    def put(self, node_id: str, vector: Vector, live: bool, kind: NodeKind, agent_id: str, expires: float = math.inf) -> None:
        new = node_id not in self.index
        row = self.index.upsert(node_id, vector, live=live)
        if new:
            self.standings.reset(row)
        if row >= self.expires.shape[0]:
            grown = np.full(self.expires.shape[0] * 2, np.inf, dtype=np.float64)
            grown[: self.expires.shape[0]] = self.expires
            self.expires = grown
        self.expires[row] = expires
        self.kind[node_id] = kind
        self.agent[node_id] = agent_id
        self.by_agent.setdefault(agent_id, set()).add(node_id)

    def drop(self, node_id: str) -> None:
        """Forget ``node_id``: out of every search; its row is reclaimed by the next rebuild."""
        if self.kind.pop(node_id, None) is None:
            return
        self.index.forget(node_id)
        owners = self.by_agent.get(self.agent.pop(node_id, ""), set())
        owners.discard(node_id)
        self.dead += 1

    @property
    def wasteful(self) -> bool:
        return self.dead > 256 and self.dead > len(self.kind)

    def mask(self, exclude_agent: str | None, now: float) -> npt.NDArray[np.bool_]:
        mask: npt.NDArray[np.bool_] = self.expires[: self.index.size] > now
        for node_id in self.by_agent.get(exclude_agent or "", ()):
            mask[self.index.row_of(node_id)] = False
        return mask

    def restore_standing(self, node_id: str, count: float, total: float, total_sq: float) -> None:
        """Reload a node's statistics (ignored for a node this tenant no longer holds)."""
        if node_id in self.kind:
            self.standings.restore(self.index.row_of(node_id), count, total, total_sq)

    def adopt_standings(self, old: TenantNodes) -> None:
        """Carry the statistics of every node still held over from ``old`` (after a rebuild)."""
        for node_id in self.kind:
            if node_id in old.index:
                self.standings.restore(self.index.row_of(node_id), *old.standings.get(old.index.row_of(node_id)))

    def standing_rows(self, tenant_id: str) -> list[dict[str, Any]]:
        """Every node's statistics as rows of ``STANDING_SCHEMA``."""
        rows = []
        for node_id in self.kind:
            count, total, total_sq = self.standings.get(self.index.row_of(node_id))
            rows.append({"id": node_id, "tenant_id": tenant_id, "count": count, "total": total, "total_sq": total_sq})
        return rows


class RecentRemovals:
    """The last ``per_agent`` beacons each agent removed: beacon id -> (tenant, agent), in memory only."""

    def __init__(self, per_agent: int) -> None:
        self.per_agent = per_agent
        self._owner: dict[str, tuple[str, str]] = {}
        self._by_agent: dict[str, deque[str]] = {}

    def add(self, beacon_id: str, tenant_id: str, agent_id: str) -> None:
        recent = self._by_agent.setdefault(agent_id, deque())
        recent.append(beacon_id)
        self._owner[beacon_id] = (tenant_id, agent_id)
        if len(recent) > self.per_agent:
            self._owner.pop(recent.popleft(), None)

    def get(self, beacon_id: str) -> tuple[str, str] | None:
        return self._owner.get(beacon_id)

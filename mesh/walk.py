"""The energy walk: how a diff spreads across the mesh (DESIGN.md section 5).

A walk starts at the scene of the written cell with energy ``E0`` (growing
with salience) and expands in hop-synchronous waves. The first wave searches
around the written cell itself, later waves around the centroids of the
scenes reached. For every frontier node the neighbourhood is its ``fan_out``
nearest scenes and its ``leaf_fan_out`` nearest *leaves* (agent nodes and
beacons) of the tenant, gathered completely before the wave is decided.
Every neighbour examined gets exactly one outcome:

- ``deduped``:   already reached by this diff;
- ``pruned``:    a scene whose relevance (cosine between the diff and the node)
  is below ``gate``; a leaf the diff does not *match* (below);
- ``exhausted``: the hop's cost would take the energy to ``floor`` or below;
- ``delivered``: reached with ``energy - cost``. A scene joins the next wave;
  an agent node or beacon becomes an inbox delivery for its agent.

A leaf matches when the diff stands out for *that* node: its ``standing``,
``(relevance - mean) / sd`` over the relevance of the tenant's recent writes to
the node (its owner keeps those statistics, :mod:`mesh.standing`), is at least
``standout`` and its relevance at least ``standout_floor`` (a statistic
alone would let the top few percent of pure noise through); or the relevance is
at least ``close_match`` whatever the standing. One fixed cosine cannot tell "nothing relevant yet" from "relevant,
but this model scores this interest low"; a node's own distribution can.

``cost = min_cost + (max_cost - min_cost) * (1 - relevance)``: hop cost falls
as relevance rises, and ``min_cost > 0`` makes energy strictly decrease, so
every walk ends (``max_hops`` is a second bound).

Determinism: within a wave, frontier nodes are taken by (energy desc, id) and
their neighbours by (similarity desc, id), so the outcome is a pure function of
the mesh state and the diff, whatever order lookups or messages complete in.
Recording events never feeds back into the walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from mesh.model import Vector


class NodeKind(StrEnum):
    SCENE = "scene"
    AGENT = "agent"
    BEACON = "beacon"


class Outcome(StrEnum):
    DELIVERED = "delivered"
    DEDUPED = "deduped"
    PRUNED = "pruned"
    EXHAUSTED = "exhausted"


class Criterion(StrEnum):
    """The test that decided an examined neighbour's outcome (the observatory's and the delivery's ``criterion``)."""

    REACHED = "reached"  # deduped: already reached by this diff
    GATE = "gate"  # a scene: relevance against ``gate``
    STANDOUT = "standout"  # a leaf: standing against ``standout``
    CLOSE_MATCH = "close_match"  # a leaf: relevance at or above ``close_match``
    FLOOR = "floor"  # exhausted: the energy would not stay above ``floor``


@dataclass(frozen=True, slots=True)
class EnergyPolicy:
    """The walk's tuning values (settings section ``propagation``)."""

    base_energy: float = 0.4
    salience_energy: float = 0.6
    min_cost: float = 0.05
    max_cost: float = 0.5
    floor: float = 0.05
    gate: float = 0.3
    fan_out: int = 8
    max_hops: int = 16
    leaf_fan_out: int = 8
    standout: float = 2.0
    close_match: float = 0.65
    standout_floor: float = 0.2

    def initial_energy(self, salience: float) -> float:
        return self.base_energy + self.salience_energy * min(1.0, max(0.0, salience))

    def cost(self, relevance: float) -> float:
        r = min(1.0, max(-1.0, relevance))
        return self.min_cost + (self.max_cost - self.min_cost) * (1.0 - max(0.0, r))

    def passes(self, cand: Candidate) -> Criterion | None:
        """The criterion a candidate passes on relevance (None: pruned). Scenes face ``gate``; a leaf
        passes with a relevance of ``close_match`` or more, or with a ``standing`` of ``standout`` or more
        and a relevance of at least ``standout_floor`` (and always needs a positive relevance)."""
        if cand.kind is NodeKind.SCENE:
            return Criterion.GATE if cand.relevance >= self.gate else None
        if cand.relevance <= 0.0:
            return None
        if cand.relevance >= self.close_match:
            return Criterion.CLOSE_MATCH
        if cand.standing is not None and cand.standing >= self.standout and cand.relevance >= self.standout_floor:
            return Criterion.STANDOUT
        return None


class Candidate(NamedTuple):
    """A neighbour as its owner reports it: similarity to the frontier node, relevance to the diff.
    A named tuple, not a frozen dataclass: a wave makes thousands, and a tuple is made in a third of
    the time (no ``object.__setattr__`` per field)."""

    node_id: str
    kind: NodeKind
    similarity: float
    relevance: float
    agent_id: str | None = None
    vector: Vector | None = None  # scenes only: the next wave searches around it
    standing: float | None = None  # leaves only: (relevance - mean) / sd of the node's recent relevance


@dataclass(frozen=True, slots=True)
class NeighbourRequest:
    """One walk's wave as its node owners see it: the frontier, the diff, whom to leave out."""

    tenant_id: str
    queries: list[tuple[str, Vector]]
    diff_vector: Vector
    k: int  # scenes per frontier node (fan_out + 1: a scene is its own nearest)
    exclude_agent: str | None
    leaf_k: int = 8  # leaves per frontier node
    observe: bool = False  # first wave of a first attempt: owners fold the diff into their leaves' statistics
    centroid_floor: float = float("-inf")  # scenes less relevant to the diff than this come without their centroid
    keep: bool = True  # answers worth keeping for later walks (not a first wave: its query is the written cell's own)


@dataclass(frozen=True, slots=True)
class FrontierNode:
    node_id: str
    vector: Vector
    energy: float


class HopEvent(NamedTuple):
    """One examined edge; content-free (no text, no vector). A named tuple: a walk makes hundreds, and
    the observatory's trace carries them as they are (``mesh.observation.WalkTrace``)."""

    from_node: str | None
    to_node: str
    hop_index: int
    energy_before: float
    energy_after: float
    outcome: Outcome
    relevance: float = 1.0
    standing: float | None = None
    criterion: Criterion | None = None  # None only for the seed


@dataclass(frozen=True, slots=True)
class Reach:
    """An agent node or beacon the diff reached: the seed of one inbox delivery."""

    agent_id: str
    node_id: str
    kind: NodeKind
    score: float
    hops: int
    energy: float
    standing: float | None = None
    criterion: Criterion = Criterion.STANDOUT


@dataclass(slots=True)
class WalkState:
    """One diff's walk, advanced one wave at a time by :meth:`advance`."""

    policy: EnergyPolicy
    origin_id: str
    origin_vector: Vector
    energy0: float
    hop: int = 0
    reached: set[str] = field(default_factory=set)
    frontier: list[FrontierNode] = field(default_factory=list)
    events: list[HopEvent] = field(default_factory=list)
    reaches: list[Reach] = field(default_factory=list)

    @classmethod
    def start(cls, policy: EnergyPolicy, origin_id: str, origin_vector: Vector, salience: float) -> WalkState:
        energy = policy.initial_energy(salience)
        state = cls(policy, origin_id, origin_vector, energy)
        state.reached.add(origin_id)
        state.events.append(HopEvent(None, origin_id, 0, energy, energy, Outcome.DELIVERED))
        state.frontier = [FrontierNode(origin_id, origin_vector, energy)]
        return state

    @property
    def done(self) -> bool:
        return not self.frontier or self.hop >= self.policy.max_hops

    def advance(self, neighbours: dict[str, list[Candidate]]) -> list[HopEvent]:
        """Decide one wave from every frontier node's gathered candidates; returns its events."""
        self.hop += 1
        wave: list[HopEvent] = []
        next_frontier: list[FrontierNode] = []
        p = self.policy
        for node in sorted(self.frontier, key=lambda f: (-f.energy, f.node_id)):
            ranked = sorted(neighbours.get(node.node_id, ()), key=lambda c: (-c.similarity, c.node_id))
            seen: set[str] = set()
            quota = {True: p.fan_out, False: p.leaf_fan_out}  # scenes, leaves
            for cand in ranked:
                if cand.node_id == node.node_id or cand.node_id in seen:
                    continue
                seen.add(cand.node_id)
                is_scene = cand.kind is NodeKind.SCENE
                if quota[is_scene] == 0:
                    continue
                quota[is_scene] -= 1
                wave.append(self._decide(node, cand, next_frontier))
        self.frontier = next_frontier
        self.events.extend(wave)
        return wave

    def _decide(self, node: FrontierNode, cand: Candidate, next_frontier: list[FrontierNode]) -> HopEvent:
        p = self.policy
        after = node.energy - p.cost(cand.relevance)
        passed = p.passes(cand)
        if cand.node_id in self.reached:
            outcome, after, criterion = Outcome.DEDUPED, node.energy, Criterion.REACHED
        elif passed is None:
            outcome, after = Outcome.PRUNED, node.energy
            criterion = Criterion.GATE if cand.kind is NodeKind.SCENE else Criterion.STANDOUT
        elif after <= p.floor:
            outcome, after, criterion = Outcome.EXHAUSTED, node.energy, Criterion.FLOOR
        else:
            outcome, criterion = Outcome.DELIVERED, passed
            self.reached.add(cand.node_id)
            if cand.kind is NodeKind.SCENE:
                if cand.vector is not None:
                    next_frontier.append(FrontierNode(cand.node_id, cand.vector, after))
            elif cand.agent_id is not None:
                self.reaches.append(
                    Reach(cand.agent_id, cand.node_id, cand.kind, cand.relevance, self.hop, after, cand.standing, passed)
                )
        return HopEvent(
            node.node_id, cand.node_id, self.hop, node.energy, after, outcome, cand.relevance, cand.standing, criterion
        )


def merge_candidates(parts: list[dict[str, list[Candidate]]], fan_out: int, leaf_fan_out: int) -> dict[str, list[Candidate]]:
    """Merge owners' answers into each frontier node's ``fan_out + 1`` nearest scenes and
    ``leaf_fan_out`` nearest leaves, deterministically (similarity descending, then id)."""
    merged: dict[str, list[Candidate]] = {}
    for part in parts:
        for node_id, cands in part.items():
            merged.setdefault(node_id, []).extend(cands)
    out: dict[str, list[Candidate]] = {}
    for nid, cands in merged.items():
        ranked = sorted(cands, key=lambda x: (-x.similarity, x.node_id))
        scenes = [c for c in ranked if c.kind is NodeKind.SCENE][: fan_out + 1]
        leaves = [c for c in ranked if c.kind is not NodeKind.SCENE][:leaf_fan_out]
        out[nid] = sorted(scenes + leaves, key=lambda x: (-x.similarity, x.node_id))
    return out

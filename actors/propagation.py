"""Propagation: run a diff's energy walk across the actors that own the nodes.

The walk's decisions are the pure :class:`mesh.walk.WalkState`; this module
carries them out. Each wave is one message to every SceneShard and BeaconSet
that may hold a node of a walk's tenant (``owner_addressed``: the others are
known to hold none, :mod:`mesh.presence`, so leaving them out changes nothing),
asking for their nodes nearest the frontier; the answers are gathered in full
before the wave is decided, so the outcome never depends on which arrives first. Reaches
become deliveries, batched per InboxShard; events go to the Observatory when
the diff is sampled, fire-and-forget and bounded.

Guarantees: a walk is a pure function of the mesh state, the diff and ``now``;
replaying it (after a crash) makes the same delivery ids, which inboxes
de-duplicate; the writer's own agent node and beacons are left out unless
``deliver_to_writer`` is set; a walk never leaves its tenant.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from actors.chores import Background
from mesh.errors import MemeshError
from mesh.inbox_wire import InboxDelivery, delivery_json, diff_json, item_members
from mesh.model import Cell, Vector
from mesh.observation import PackedHops, WalkTrace
from mesh.presence import Owner, OwnerPresence
from mesh.seam import Directory, beacon_set_index, inbox_index
from mesh.times import rfc3339
from mesh.walk import Candidate, Criterion, EnergyPolicy, HopEvent, NeighbourRequest, Reach, WalkState, merge_candidates
from mesh.walk_wire import PackedAnswers, WaveRequests

log = logging.getLogger(__name__)

DIFF_NAMESPACE = uuid.UUID("5b0a7c1e-3f52-4d8e-9a61-6d0c2f4e8b17")


YIELD_EVERY = 8  # walks advanced between two turns of the event loop
TRACE_EVENTS_PER_MESSAGE = 2_000  # hop events a message to the Observatory carries at most
Moves = dict[int, list[tuple[str, str, Vector]]]  # beacon set index -> (agent id, tenant id, vector) moves


@dataclass(frozen=True, slots=True)
class PropagationConfig:
    policy: EnergyPolicy = field(default_factory=EnergyPolicy)
    deliver_to_writer: bool = False
    observe: bool = True
    sample_rate: float = 1.0
    max_inflight_records: int = 64
    owner_addressed: bool = True  # a wave messages only the owners that may hold the walk's tenant


def owners_of(directory: Directory) -> list[Owner]:
    """Every node owner a wave may ask: the scene shards, then the beacon sets."""
    spec = directory.spec
    return [("scene_shard", i) for i in range(spec.scene_shards)] + [("beacon_set", i) for i in range(spec.beacon_sets)]


def diff_id_of(cell_id: str) -> str:
    """One diff per written cell, with an id stable across replays."""
    return str(uuid.uuid5(DIFF_NAMESPACE, cell_id))


def sampled(diff_id: str, rate: float) -> bool:
    """Per-diff sampling: a trace is recorded whole or not at all."""
    if rate >= 1.0:
        return True
    return int(uuid.UUID(diff_id).hex[:16], 16) / float(1 << 64) < rate


@dataclass(slots=True)
class WalkResult:
    diff_id: str
    events: list[HopEvent]
    reaches: list[Reach]
    delivered: int = 0


async def _unpacked(answer: Awaitable[PackedAnswers]) -> list[dict[str, list[Candidate]]]:
    """An owner's packed answer as the walk reads it."""
    return (await answer).unpacked()


class Propagator:
    def __init__(self, config: PropagationConfig, directory: Callable[[], Directory]) -> None:
        self.config = config
        self._directory = directory
        self._inflight_records = 0
        self._dropped = 0
        self._background = Background("observatory record")
        self.presence = OwnerPresence()
        self.walks = 0  # walks decided
        self.messages = 0  # actor calls their waves made

    async def walk(self, cell: Cell, origin_vector: Vector, now: datetime) -> WalkResult:
        """Decide one walk (no deliveries made)."""
        return (await self.walk_many([(cell, origin_vector)], now))[0]

    async def walk_many(
        self, jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool = False, moves: Moves | None = None
    ) -> list[WalkResult]:
        """Decide many walks in lockstep: each wave is one ``neighbours_many`` message per node owner.

        Each walk advances only on its own complete wave, so batching changes
        no outcome; it only shares the messages and the matrix products.
        ``observe``: the first wave asks the leaves' owners to fold the diffs into
        their statistics before answering (a batch's first attempt only).
        ``moves`` (beacon set index -> the writers' agent-node moves it holds): carried by
        the first wave's message to that set, which applies them before it answers; every
        set with moves is asked in that wave, with every request of the tenants it moves.
        Each agent node lives in one set, so every walk sees the mesh after all moves, as
        when they were sent ahead (``observe_many``) and waited for.
        """
        directory = self._directory()
        policy = self.config.policy
        states = [WalkState.start(policy, cell.scene_id or cell.id, origin, cell.salience) for cell, origin in jobs]
        pending = dict(moves or {})
        while True:
            active = [n for n, state in enumerate(states) if not state.done]
            if not active:
                break
            requests = [
                NeighbourRequest(
                    jobs[n][0].tenant_id,
                    [(f.node_id, f.vector) for f in states[n].frontier],
                    jobs[n][0].embedding,
                    policy.fan_out + 1,
                    None if self.config.deliver_to_writer else jobs[n][0].source_agent,
                    policy.leaf_fan_out,
                    observe and states[n].hop == 0,
                    policy.gate,  # a scene below the gate is pruned: its centroid would never be searched around
                    states[n].hop > 0,  # a first wave searches around the written cell: no later walk asks that
                )
                for n in active
            ]
            asked = [(owner, self._addressed(owner, requests, pending)) for owner in owners_of(directory)]
            asked = [(owner, positions) for owner, positions in asked if positions or self._moves_of(owner, pending)]
            calls = [
                self._neighbours(directory, owner, [requests[p] for p in positions], now, self._moves_of(owner, pending))
                for owner, positions in asked
            ]
            pending = {}  # carried by this wave
            self.messages += len(asked)
            parts = await asyncio.gather(*calls)
            gathered: list[list[dict[str, list[Candidate]]]] = [[] for _ in active]
            for (_, positions), answers in zip(asked, parts, strict=True):
                for position, answer in zip(positions, answers, strict=True):
                    gathered[position].append(answer)
            for position, n in enumerate(active):
                states[n].advance(merge_candidates(gathered[position], policy.fan_out, policy.leaf_fan_out))
                if position % YIELD_EVERY == YIELD_EVERY - 1:
                    await asyncio.sleep(0)  # searches queued on this actor run between walks, not after the wave
        if pending:  # no walk had a wave to carry them (all ended at the start): sent on their own
            await asyncio.gather(*(directory.beacon_set(i).observe_many(obs) for i, obs in pending.items()))
        self.walks += len(jobs)
        return [
            WalkResult(diff_id_of(cell.id), state.events, state.reaches) for (cell, _), state in zip(jobs, states, strict=True)
        ]

    @staticmethod
    def _moves_of(owner: Owner, pending: Moves) -> list[tuple[str, str, Vector]] | None:
        return pending.get(owner[1]) if owner[0] == "beacon_set" else None

    def _addressed(self, owner: Owner, requests: list[NeighbourRequest], pending: Moves) -> list[int]:
        """Positions of the requests ``owner`` is asked: those whose tenant it may hold (all of them when walks
        are not owner-addressed), and those of the tenants whose agent nodes it moves in this wave (it may
        hold the first node of one)."""
        if not self.config.owner_addressed:
            return list(range(len(requests)))
        moved = {tenant for _, tenant, _ in self._moves_of(owner, pending) or ()}
        return [p for p, r in enumerate(requests) if r.tenant_id in moved or self.presence.may_hold(owner, r.tenant_id)]

    def _neighbours(
        self,
        directory: Directory,
        owner: Owner,
        requests: list[NeighbourRequest],
        now: datetime,
        moves: list[tuple[str, str, Vector]] | None = None,
    ) -> Awaitable[list[dict[str, list[Candidate]]]]:
        kind, index = owner
        wave = WaveRequests(requests)  # pickled packed: one matrix for the frontier and diff vectors
        if kind == "beacon_set":
            return _unpacked(directory.beacon_set(index).neighbours_many(wave, now, moves))
        return _unpacked(directory.scene_shard(index).neighbours_many(wave))

    async def pull_presence(self, attempts: int = 6, timeout_s: float = 30.0) -> None:
        """Ask every other owner which tenants it holds (a walker that starts knows nobody: until an owner
        answers, it is messaged for every walk). An owner that does not answer after ``attempts`` stays
        unknown, which costs messages, never deliveries."""
        directory = self._directory()
        owners = owners_of(directory)

        async def pull(owner: Owner) -> None:
            kind, index = owner
            self.presence.begin_pull(owner)
            tenants: list[str] | None = None
            for attempt in range(attempts):
                try:
                    actor = directory.beacon_set(index) if kind == "beacon_set" else directory.scene_shard(index)
                    async with asyncio.timeout(timeout_s):
                        tenants = await actor.tenants()
                    break
                except (MemeshError, TimeoutError) as exc:  # not created yet, restarting, busy: asked again
                    log.info("presence of %s:%d not known yet (%s)", kind, index, exc)
                    await asyncio.sleep(0.25 * 2**attempt)
            self.presence.end_pull(owner, tenants)
            if tenants is None:
                log.warning("%s:%d did not say which tenants it holds: every walk messages it", kind, index)

        await asyncio.gather(*(pull(owner) for owner in owners))

    async def propagate(self, cell: Cell, origin_vector: Vector, now: datetime) -> WalkResult:
        """Update the writer's agent node, walk, deliver, and record the trace."""
        return (await self.propagate_many([(cell, origin_vector)], now))[0]

    async def propagate_many(self, jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool = True) -> list[WalkResult]:
        """``propagate`` for a batch of written cells: agent nodes, walks, deliveries, traces.

        The writers' agent nodes move first (carried by the first wave's message to
        each BeaconSet, applied before it answers and before the soft commit of the
        new means), so every walk of the batch sees the same mesh whatever the
        timing. ``observe=False`` skips that step: a retried batch or a replay
        after a restart must not count a cell twice.
        """
        directory = self._directory()
        moves: Moves = defaultdict(list)
        if observe:  # carried by the first wave (walk_many): one message per set instead of two
            for cell, _ in jobs:
                index = beacon_set_index(directory, cell.source_agent)
                moves[index].append((cell.source_agent, cell.tenant_id, cell.embedding))
        results = await self.walk_many(jobs, now, observe, dict(moves))
        by_shard: dict[int, list[InboxDelivery]] = defaultdict(list)
        for (cell, _), result in zip(jobs, results, strict=True):
            if not result.reaches:
                continue
            payload = diff_json(cell, result.diff_id, self.config.policy.initial_energy(cell.salience))
            for reach in result.reaches:
                item = item_members(payload, delivery_json(reach, now))
                delivery = InboxDelivery(
                    reach.agent_id,
                    f"{result.diff_id}:{reach.node_id}",
                    result.diff_id,
                    cell.project_id,
                    reach.score,
                    item,
                    now.timestamp(),
                    reach.criterion is Criterion.CLOSE_MATCH,
                )
                by_shard[inbox_index(directory, reach.agent_id)].append(delivery)
        if by_shard:
            await asyncio.gather(*(directory.inbox_shard(s).deliver(ds) for s, ds in by_shard.items()))
        traced = []
        for (cell, _), result in zip(jobs, results, strict=True):
            result.delivered = len(result.reaches)
            if self.config.observe and sampled(result.diff_id, self.config.sample_rate):
                traced.append((cell, result))
        if traced:
            self._record(directory, traced, now)
        return results

    def _record(self, directory: Directory, traced: list[tuple[Cell, WalkResult]], now: datetime) -> None:
        """Hand the traces to the Observatory without waiting; past the in-flight bound, drop and count.

        Each walk goes as one ``WalkTrace`` holding its events as decided (no per-event work here), in
        messages of at most ``TRACE_EVENTS_PER_MESSAGE`` events, so pickling one never holds this actor's
        event loop for long."""
        if self._inflight_records >= self.config.max_inflight_records:
            self._dropped += sum(len(result.events) for _, result in traced)
            return
        ts = rfc3339(now)
        traces = [
            WalkTrace(
                result.diff_id,
                cell.tenant_id,
                cell.source_agent,
                cell.layer.depth,
                cell.salience,
                ts,
                PackedHops.of(result.events),
            )
            for cell, result in traced
        ]
        messages: list[list[WalkTrace]] = [[]]
        size = 0
        for trace in traces:
            if size and size + len(trace.hops) > TRACE_EVENTS_PER_MESSAGE:
                messages.append([])
                size = 0
            messages[-1].append(trace)
            size += len(trace.hops)
        dropped, self._dropped = self._dropped, 0
        self._inflight_records += 1

        async def send() -> None:
            try:
                for n, message in enumerate(messages):
                    await directory.observatory().record_walks(message, dropped if n == 0 else 0)
            finally:
                self._inflight_records -= 1

        self._background.spawn(send())  # observation never fails nor slows a walk

    async def close(self) -> None:
        await self._background.drain()

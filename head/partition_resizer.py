"""Online resize: move virtual partitions between actors while the deployment keeps serving.

Run by the head that receives the operator's command (``memesh admin
partitions resize``, gRPC ``AdminService/ResizePartitions``), a ServiceAdmin's:

1. Take the deployment's maintenance slot (the AuditLog's): no reembed runs
   and no erase is under way, and none is journaled until the slot is given
   back (an erase's plan names shards by index).
2. Hold: this head's gate (``actors.partition_gate``) lets no new call through
   to a scene shard, beacon set or inbox shard and drains those in flight;
   then every other live head does the same before the roster's ``publish``
   returns (each acknowledges after its own drain).
3. Stop the partitioned actors, drained (group commits flushed; a walk not
   done stays unmarked and runs again from its cell).
4. Move the partitions: ``actors.resize.settle_layout`` in the Registry, the
   same three commits a start makes, with the next *epoch*.
5. Start the new actors, named for the epoch (``scene_shard:3@1``), route by
   the new assignment, tell every head (it follows and releases), release.

A request that arrives meanwhile waits at its head's gate (at most the gate's
``max_wait_s``, then a retryable 503) and is answered by the partition's new
owner, never from a partition in transit. A failure after the hold starts the
actors of the layout in force (the old one unless the move switched) and
releases; the operator sees the error, and a start or another resize finishes
what a cut-short move left (its sweep).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from head.audit import record
from mesh.audit import AuditKind
from mesh.deployment import DirectorySpec
from mesh.errors import Forbidden, MemeshError, ValidationFailed
from mesh.identity import Principal, require_admin
from mesh.layout import COUNT_KEYS, KINDS, Layout, Settled
from mesh.roster import EVERYTHING
from mesh.seam import Directory

log = logging.getLogger(__name__)

HOLD = "\x1epartitions:hold"  # roster changes: not agent ids (those never hold a control character)
MOVED = "\x1epartitions:moved"
MAX_ACTORS = 1024  # the bound of ray.scene_shards, ray.beacon_sets and ray.inbox_shards
SLOT_LEASE_S = 600.0

Plan = dict[str, tuple[type, tuple[Any, ...]]]
PlanFor = Callable[[Layout, DirectorySpec], Plan]  # the actor plan of a layout (cluster.compose.actor_plan)


class Phases:
    """How long each step of a resize took (logged, for operators)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._laps: list[tuple[str, float]] = []

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self._laps.append((step, now - self._last))
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{step} after {seconds:.2f}s" for step, seconds in self._laps)


class PartitionResizer:
    def __init__(
        self,
        directory: Directory,
        publish: Callable[[str], Awaitable[None]],
        plan_for: PlanFor | None,
        dims: int,
        drain_s: float = 2.0,
    ) -> None:
        """``publish`` tells every live head a roster change and returns once each has applied it;
        ``plan_for`` is None where actors cannot be replaced (a head built without its settings)."""
        self._dir = directory
        self._publish = publish
        self.plan_for = plan_for
        self._dims = dims
        self.drain_s = drain_s
        self.followers: list[Callable[[Settled], None]] = []  # told the layout in force after every move
        self.hold_max_s = 300.0  # a hold with no "moved" after this long is given up (the mover died)
        self._moving = False  # this head is the mover: its own hold is its own
        self._one = asyncio.Lock()
        self._watchdog: asyncio.Task[None] | None = None
        self.last = Settled(Layout({}))  # the moves this head last made or followed

    def counts(self) -> dict[str, int]:
        spec = self._dir.spec
        return {kind: int(getattr(spec, COUNT_KEYS[kind])) for kind in KINDS}

    async def in_force(self, actor: Principal) -> Settled:
        """The layout the manifest holds, with the moves this head last made or saw (a ServiceAdmin's)."""
        await self._require_service_admin(actor, "partitions")
        layout = await self._dir.registry().layout_in_force(self.counts())
        return Settled(layout, self.last.moves if self.last.layout.epoch == layout.epoch else ())

    async def _require_service_admin(self, actor: Principal, action: str) -> None:
        require_admin(actor)
        if not actor.is_service_admin:
            await record(self._dir, actor, AuditKind.AUTHZ_DENIED, "partitions", "denied", {"action": action})
            raise Forbidden("only a ServiceAdmin manages the partitions")

    async def resize(self, actor: Principal, wanted: dict[str, int]) -> Settled:
        """Move partitions so each kind has the ``wanted`` number of actors (kinds left out keep theirs);
        the layout reached and the moves made (none when nothing changes)."""
        await self._require_service_admin(actor, "resize")
        unknown = sorted(set(wanted) - set(KINDS))
        if unknown or any(not 1 <= n <= MAX_ACTORS for n in wanted.values()):
            raise ValidationFailed(f"each count must be 1 to {MAX_ACTORS}, of {', '.join(KINDS)}")
        if self.plan_for is None:
            raise ValidationFailed("this head cannot start actors: resize from a head started by memesh serve")
        holder = uuid.uuid4().hex
        async with self._one:
            current = await self._dir.registry().layout_in_force(self.counts())
            target = {**current.counts, **wanted}
            if target == current.counts:
                return Settled(current)
            await self._dir.audit_log().begin_exclusive("resize", holder, SLOT_LEASE_S)
            self._moving = True
            try:
                settled = await self._move(current, target)
            finally:
                self._moving = False
                try:
                    await self._dir.audit_log().end_exclusive(holder)
                except MemeshError:
                    log.warning("the maintenance slot was not given back; it lapses in %.0f s", SLOT_LEASE_S)
        detail = {m.kind: [m.count_from, m.count_to, m.partitions, m.rows] for m in settled.moves}
        await record(self._dir, actor, AuditKind.PARTITIONS_RESIZED, "partitions", "ok", detail)
        return settled

    async def _move(self, current: Layout, wanted: dict[str, int]) -> Settled:
        assert self.plan_for is not None
        gate = self._dir.gate
        target = current.resized_to(wanted, online=True)
        ahead = self._dir.spec.following(target)
        clock = Phases()
        await self._dir.prepare_partitions(ahead, self.plan_for(target, ahead))  # they boot while the old ones serve
        clock.lap("new actors booted")
        await gate.hold(self.drain_s)
        settled: Settled | None = None
        failure: MemeshError | None = None
        try:
            await self._publish(HOLD)
            clock.lap("every head holding")
            await self._dir.retire_partitions()
            clock.lap("old actors stopped")
            settled = await self._dir.registry().settle_layout(wanted, self._dims, False, True)
            clock.lap("partitions moved")
            for move in settled.moves:
                log.warning("online resize: %s", move)
        except MemeshError as exc:
            failure = exc
            log.exception("online resize to %s failed; starting the actors of the layout in force", wanted)
        try:
            layout = settled.layout if settled is not None else await self._dir.registry().layout_in_force(self.counts())
            if layout != target:
                self._dir.discard_prepared()
            spec = self._dir.spec.following(layout)
            await self._dir.adopt_partitions(spec, self.plan_for(layout, spec))
            self._tell(settled or Settled(layout))
            await self._publish(MOVED)
            clock.lap("every head following")
        finally:
            gate.release()
            log.warning("online resize: %s", clock)
        if failure is not None:
            raise failure
        assert settled is not None
        return settled

    def _tell(self, settled: Settled) -> None:
        self.last = settled
        for follower in self.followers:
            follower(settled)

    async def on_roster(self, changes: list[str]) -> list[str]:
        """Apply another head's partition changes (hold: drain this head's calls before acknowledging;
        moved: route by the layout in force and release); the other changes, agent ids, are returned."""
        for change in changes:
            if change == HOLD and not self._moving:
                drained = await self._dir.gate.hold(self.drain_s)
                log.warning("partitions: another head is moving them; requests held (%s)", "drained" if drained else "busy")
                self._watch()
            elif change == MOVED:
                self._unwatch()
                await self.follow()
            elif change == EVERYTHING:  # this head missed changes: route by what is in force, keep any hold
                await self.follow(release=False)
        return [c for c in changes if c not in (HOLD, MOVED)]

    def _watch(self) -> None:
        """If the head moving the partitions dies, no "moved" comes: after ``hold_max_s`` this head routes by
        whatever layout the manifest holds and releases, rather than hold its requests for ever."""
        self._unwatch()

        async def watchdog() -> None:
            await asyncio.sleep(self.hold_max_s)
            if self._dir.gate.held:
                log.error("partitions: no head finished the move in %.0f s; following the manifest", self.hold_max_s)
                await self.follow()

        self._watchdog = asyncio.get_running_loop().create_task(watchdog(), name="partition hold watchdog")

    def _unwatch(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def follow(self, release: bool = True) -> None:
        """Route by the layout the manifest holds, and release this head's gate."""
        try:
            layout = await self._dir.registry().layout_in_force(self.counts())
            if layout.epoch != self._dir.spec.epoch or layout.counts != self.counts():
                self._dir.follow(self._dir.spec.following(layout))
                self._tell(Settled(layout))
                log.warning("partitions: following epoch %d, counts %s", layout.epoch, layout.counts)
        finally:
            if release:
                self._dir.gate.release()

"""The one module that creates, finds and calls Ray actors.

All Ray API calls sit here (as in Ray Serve's ``deployment_state.py``): the
actor classes stay plain, and the rest of memesh sees only ``Directory``.

Actors are named ``<kind>:<n>`` in the deployment's namespace, restart without
limit (``max_restarts=-1``; on restart they reload from storage) and retry a
call interrupted by a restart (``max_task_retries``), which is safe because
every actor method is idempotent (walkers excepted: their caller retries, see
``_KIND_OPTIONS``). They ask for no CPU: they are I/O-bound and a 2-core
machine must hold all of them. Their processes run at the niceness Ray gives
its workers (``RAY_worker_niceness``; ``memesh serve`` starts a local Ray with 0),
the walkers' a step lower (``actors.walker``). The hot methods of an actor on the
caller's own node go through its lane (``actors.node_lane``) once one is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from actors.heap import keep_pauses_short
from actors.kinds import KIND_BY_NAME, ActorKind, ActorProxy, TypedDirectory, retire_partitioned
from actors.node_lane import LANE_METHODS, LaneAddress, LaneBroken, LaneRetry, Lanes, LaneServer, LaneUnfit, lane_directory
from actors.partition_gate import PartitionGate
from actors.storage import warm_up
from mesh.deployment import DirectorySpec
from mesh.errors import InternalError, MemeshError, TimedOut, Unavailable
from mesh.layout import KINDS
from mesh.seam import every_actor, partitioned_actors

log = logging.getLogger(__name__)

_ACTOR_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "max_restarts": -1,
    "max_task_retries": 5,
    "max_concurrency": 1000,
    "enable_task_events": False,
}
# A walker's call is retried by the scene shard's walk queue, which knows whether the batch's agent-node moves
# may already have landed (a retry never carries them again); Ray retrying it on its own would move them twice.
_KIND_OPTIONS: dict[str, dict[str, Any]] = {"walker": {"max_task_retries": 0}}


@functools.cache
def hosted(cls: type, lane_methods: frozenset[str] = frozenset()) -> type:
    """``cls`` as Ray runs it: the same class (name, methods, arguments), whose process keeps its
    garbage-collection pauses short (``actors.heap``) from the moment the actor is made, restarts included,
    and which serves ``lane_methods`` on a lane of its node (``lane_address``) once a caller asks for one."""

    init = cls.__init__  # type: ignore[misc]  # the class's own, called on an instance of exactly this class

    def start(self: Any, *args: Any, **kwargs: Any) -> None:
        keep_pauses_short()
        init(self, *args, **kwargs)
        self._node_lane = None
        if callable(getattr(self, "note_restart", None)) and _reconstructed():
            self.note_restart()  # an actor whose guarantees depend on whether it follows one that died

    async def lane_address(self: Any) -> LaneAddress | None:
        """Where this actor's lane listens (opened at the first ask, on this actor's event loop); None: no lane."""
        if not lane_methods:
            return None
        if self._node_lane is None:
            self._node_lane = asyncio.get_running_loop().create_task(_open_lane(self, lane_methods))
        server: LaneServer | None = await asyncio.shield(self._node_lane)  # the actor holds it: it serves while held
        return None if server is None else server.address

    namespace = {"__init__": start, "lane_address": lane_address, "__qualname__": cls.__qualname__, "__module__": cls.__module__}
    return type(cls.__name__, (cls,), namespace)


def _reconstructed() -> bool:
    """Whether Ray re-created this actor after the last one died (an unanswered question counts as yes)."""
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # Ray's state did not answer: a restart is the safe guess (it only delays what waits on it)
        log.warning("could not tell whether this actor was restarted; assuming it was", exc_info=True)
        return True


async def _open_lane(target: object, methods: frozenset[str]) -> LaneServer | None:
    try:
        directory = lane_directory()
        if directory is None:
            return None
        server = LaneServer(target, methods, ray.get_runtime_context().get_node_id())
        await server.start(directory)
        return server
    except OSError:
        log.warning("no lane for this actor: it is called through Ray only", exc_info=True)
        return None


class RayActor(ActorProxy):
    """A named Ray actor; Ray failures become the memesh error vocabulary. A method its kind serves on a lane
    goes through the actor's lane when ``lanes`` has one open (``actors.node_lane``), through Ray otherwise."""

    def __init__(
        self, handle: Any, kind: ActorKind[Any], name: str, gate: PartitionGate | None = None, lanes: Lanes | None = None
    ) -> None:
        super().__init__(kind, name, gate)
        self.handle = handle
        self.lanes = lanes
        self._lane_methods = LANE_METHODS.get(kind.name, {}) if lanes is not None else {}

    async def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        retry = self._lane_methods.get(method)
        if retry is not None and self.lanes is not None:
            lane = self.lanes.lane(self.name, self._lane_address)
            if lane is not None:
                try:
                    answer = await lane.invoke(method, args, kwargs)
                except LaneBroken:
                    if retry is LaneRetry.NONE:
                        raise Unavailable(f"{self.name} is unavailable") from None
                    self.lanes.fell_back += 1
                except LaneUnfit:
                    pass  # nothing was sent: Ray's serializer carries it
                else:
                    self.lanes.answered += 1
                    return answer
        with memesh_errors(self.name, method):
            return await getattr(self.handle, method).remote(*args, **kwargs)

    async def _lane_address(self) -> LaneAddress | None:
        with memesh_errors(self.name, "lane_address"):
            address: LaneAddress | None = await self.handle.lane_address.remote()
            return address


@contextlib.contextmanager
def memesh_errors(name: str, method: str) -> Iterator[None]:
    """The one mapping of Ray's failures of an actor call to the memesh error vocabulary."""
    try:
        yield
    except RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, MemeshError):
            raise cause from None
        raise InternalError(f"{name}.{method} failed") from exc
    except GetTimeoutError as exc:
        raise TimedOut(f"{name} did not answer in time") from exc
    except (ActorDiedError, ActorUnavailableError, RayActorError) as exc:
        raise Unavailable(f"{name} is unavailable") from exc


class RayDirectory(TypedDirectory):
    """Actors of one deployment (one Ray namespace) on the connected Ray cluster.

    Built with ``plan`` (name -> (class, args)) it creates the actors, or
    attaches to ones already running; built without, it only looks actors up
    by name, lazily (what actors use to reach each other).
    """

    def __init__(
        self,
        spec: DirectorySpec,
        plan: dict[str, tuple[type, tuple[Any, ...]]] | None = None,
        detached: bool = False,
        spread: bool = False,
        lanes: bool = True,
    ) -> None:
        """Several heads may build one with the same ``plan``: the first creates the actors, the others
        attach to them (``get_if_exists``). ``detached`` actors outlive the head that created them (heads
        joined to a Ray cluster come and go); otherwise they share that head's fate (one machine).
        ``spread`` places them across the cluster's nodes (Ray's ``SPREAD`` strategy) instead of where Ray
        packs them; either way an actor whose node is lost restarts on another and reloads from storage.
        ``lanes``: call the hot methods of actors on this node through their lanes (``actors.node_lane``)."""
        if not ray.is_initialized():
            raise RuntimeError("connect to Ray before building a RayDirectory")
        self.spec = spec
        self.gate = PartitionGate()
        self.lanes = Lanes(ray.get_runtime_context().get_node_id()) if lanes else None
        self._handles: dict[str, Any] = {}
        self._prepared: dict[str, Any] = {}  # name -> actor started ahead of a move (``prepare_partitions``)
        self._extra: dict[str, Any] = {"lifetime": "detached"} if detached else {}
        if spread:
            self._extra["scheduling_strategy"] = "SPREAD"
        self.create(plan or {})

    def _named(self, name: str, epoch: int | None = None) -> str:
        """The Ray name of a plan's actor: a partitioned actor of epoch e > 0 (an online resize) is
        ``<kind>:<n>@<e>``, so its predecessor's name is never reused while that one may still be dying."""
        epoch = self.spec.epoch if epoch is None else epoch
        return f"{name}@{epoch}" if epoch and name.split(":")[0] in KINDS else name

    def create(self, plan: dict[str, tuple[type, tuple[Any, ...]]], detached: bool = False, epoch: int | None = None) -> None:
        """Create the actors of ``plan`` (named for ``epoch``, by default the spec's), or attach to those already
        running under their names. A name this directory already holds is skipped: replacing the creating
        handle would drop the last reference Ray counts for a non-detached actor, and Ray would destroy it."""
        extra = {**self._extra, "lifetime": "detached"} if detached else self._extra
        for planned, (cls, args) in plan.items():
            name = self._named(planned, epoch)
            if name in self._handles:
                continue
            kind = planned.split(":")[0]
            kind_options = {**_ACTOR_OPTIONS, **_KIND_OPTIONS.get(kind, {})}
            known = KIND_BY_NAME.get(kind)
            lane_methods = frozenset(LANE_METHODS.get(kind, {})) if known is not None and known.cls is cls else frozenset()
            options: Any = ray.remote(hosted(cls, lane_methods)).options(
                name=name, namespace=self.spec.namespace, get_if_exists=True, **kind_options, **extra
            )
            self._handles[name] = options.remote(*args)

    async def retire_partitions(self) -> None:
        """Drain (bounded) and kill every scene shard, beacon set and inbox shard of the current epoch."""
        actors = [a for a in partitioned_actors(self) if isinstance(a, RayActor)]
        with self.gate.passing(), contextlib.suppress(Exception):  # a dead actor has nothing left to drain
            async with asyncio.timeout(30):
                await retire_partitioned(self)
        for actor in actors:
            with contextlib.suppress(Exception):  # already gone is what we want
                ray.kill(actor.handle, no_restart=True)
            self._handles.pop(actor.name, None)
            if self.lanes is not None:
                self.lanes.forget(actor.name)

    async def prepare_partitions(self, spec: DirectorySpec, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Start the partitioned actors of ``spec``'s epoch ahead of a move and wait (bounded) until their
        processes have booted and imported the storage library (seconds each), while the old ones serve;
        they open no table before their first call. Routing is unchanged."""
        partitioned = {name: entry for name, entry in plan.items() if name.split(":")[0] in KINDS}
        self.create(partitioned, detached=True, epoch=spec.epoch)
        self._prepared = {n: self._handles[n] for n in (self._named(name, spec.epoch) for name in partitioned)}
        with contextlib.suppress(Exception):  # one that does not boot in time is waited for at its first call
            booted = [handle.__ray_call__.remote(warm_up) for handle in self._prepared.values()]
            async with asyncio.timeout(120):
                await asyncio.gather(*booted)

    def discard_prepared(self) -> None:
        """Kill the actors ``prepare_partitions`` started (the move they were for did not happen)."""
        for handle in self._prepared.values():
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        self._prepared = {}

    async def adopt_partitions(self, spec: DirectorySpec, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Route by ``spec`` and create the partitioned actors of ``plan``. They are detached: the head that
        made them may be any head, and must not take them along when it stops (the last head stops them).
        A name still held by a killed actor (a failed resize keeps its epoch) is waited out first (bounded)."""
        self.follow(spec)
        partitioned = {name: entry for name, entry in plan.items() if name.split(":")[0] in KINDS}
        deadline = time.monotonic() + 30
        for name in map(self._named, partitioned):
            while name not in self._prepared and time.monotonic() < deadline:
                try:
                    ray.get_actor(name, namespace=self.spec.namespace)
                except ValueError:
                    break
                await asyncio.sleep(0.1)
        self.create(partitioned, detached=True)  # prepared ones are attached to by name
        self._prepared = {}

    def follow(self, spec: DirectorySpec) -> None:
        """Route by ``spec``, and let go of the handles of partitioned actors it no longer names."""
        self.spec = spec
        for name in [n for n in self._handles if n.split(":")[0] in KINDS]:
            del self._handles[name]
            if self.lanes is not None:
                self.lanes.forget(name)

    def call_now(self, kind: ActorKind[Any], method: str, *args: Any, timeout_s: float = 600.0) -> Any:
        """Call an actor from synchronous code (a head's start, before its event loop runs): its answer,
        or its MemeshError raised as is."""
        actor = self.proxy(kind)
        with memesh_errors(actor.name, method):
            return ray.get(getattr(actor.handle, method).remote(*args), timeout=timeout_s)

    def proxy(self, kind: ActorKind[Any], index: int | None = None) -> RayActor:
        name = self._named(kind.actor_name(index))
        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = self._handles[name] = ray.get_actor(name, namespace=self.spec.namespace)
            except ValueError as exc:
                raise Unavailable(f"{name} is not running") from exc
        return RayActor(handle, kind, name, self.gate, self.lanes)

    async def close(self, last: bool = True) -> None:
        """The last head drains and stops every actor; another head only lets go of its handles."""
        if self.lanes is not None:
            self.lanes.close()
        if not last:
            self._handles.clear()
            return
        actors = every_actor(self)
        with contextlib.suppress(Exception):  # best effort: a dead actor has nothing left to drain
            async with asyncio.timeout(30):
                await asyncio.gather(*(a.close() for a in actors), return_exceptions=True)
        for handle in self._handles.values():
            with contextlib.suppress(Exception):  # already gone is fine at shutdown
                ray.kill(handle, no_restart=True)


@dataclass(frozen=True, slots=True)
class RayLookup:
    """A picklable way for an actor to find the others: ``RayLookup(spec)()`` is a lookup-only directory."""

    spec: DirectorySpec
    lanes: bool = True

    def __call__(self) -> RayDirectory:
        return RayDirectory(self.spec, lanes=self.lanes)


def connect(address: str | None, namespace: str) -> None:
    """Join the Ray cluster at ``address``, or start a local one (no dashboard)."""
    if ray.is_initialized():
        return
    ray.init(
        address=address,
        namespace=namespace,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )


def deployment_running(spec: DirectorySpec) -> bool:
    """Whether the deployment's actors already run (a head started before this one made them)."""
    try:
        ray.get_actor("registry", namespace=spec.namespace)
    except ValueError:
        return False
    return True


def gcs_address() -> str:
    """The address other processes join this Ray cluster with (``ray.init(address=...)``)."""
    return str(ray.get_runtime_context().gcs_address)


def shutdown() -> None:
    if ray.is_initialized():
        ray.shutdown()

"""The actor kinds: each one's name, its class, and the Protocol of :mod:`mesh.seam` it answers.

``_conforming`` is never called: it is how mypy checks, on every run, that
each actor class answers its Protocol (same methods, same arguments, same
results). Both directories expose an actor only through its kind's methods,
so the Protocol is the whole seam: no method name travels as a string.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from actors.audit_log import AuditLog
from actors.beacon_set import BeaconSet
from actors.console_state import ConsoleState
from actors.embedder import EmbedderWorker
from actors.head_roster import HeadRoster
from actors.inbox_shard import InboxShard
from actors.observatory import Observatory
from actors.partition_gate import PartitionGate
from actors.registry import Registry
from actors.scene_shard import SceneShard
from actors.walker import Walker
from mesh.layout import KINDS
from mesh.seam import (
    AuditLogActor,
    BeaconSetActor,
    ConsoleStateActor,
    Directory,
    EmbedderActor,
    HeadRosterActor,
    InboxShardActor,
    ObservatoryActor,
    RegistryActor,
    SceneShardActor,
    WalkerActor,
    beacon_sets,
    inbox_shards,
    scene_shards,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ActorKind(Generic[T]):
    """One kind of actor: ``name`` (``name:<n>`` for a partitioned kind), its class and its methods."""

    name: str
    cls: type
    methods: frozenset[str]
    partitioned: bool

    def actor_name(self, index: int | None = None) -> str:
        return f"{self.name}:{index}" if self.partitioned else self.name


def _methods(protocol: type) -> frozenset[str]:
    return frozenset(n for n in dir(protocol) if not n.startswith("_") and callable(getattr(protocol, n)))


SCENE_SHARD: ActorKind[SceneShardActor] = ActorKind("scene_shard", SceneShard, _methods(SceneShardActor), True)
BEACON_SET: ActorKind[BeaconSetActor] = ActorKind("beacon_set", BeaconSet, _methods(BeaconSetActor), True)
INBOX_SHARD: ActorKind[InboxShardActor] = ActorKind("inbox_shard", InboxShard, _methods(InboxShardActor), True)
REGISTRY: ActorKind[RegistryActor] = ActorKind("registry", Registry, _methods(RegistryActor), False)
OBSERVATORY: ActorKind[ObservatoryActor] = ActorKind("observatory", Observatory, _methods(ObservatoryActor), False)
AUDIT_LOG: ActorKind[AuditLogActor] = ActorKind("audit_log", AuditLog, _methods(AuditLogActor), False)
HEAD_ROSTER: ActorKind[HeadRosterActor] = ActorKind("head_roster", HeadRoster, _methods(HeadRosterActor), False)
CONSOLE_STATE: ActorKind[ConsoleStateActor] = ActorKind("console_state", ConsoleState, _methods(ConsoleStateActor), False)
EMBEDDER: ActorKind[EmbedderActor] = ActorKind("embedder", EmbedderWorker, _methods(EmbedderActor), True)
WALKER: ActorKind[WalkerActor] = ActorKind("walker", Walker, _methods(WalkerActor), True)
KIND_BY_NAME: dict[str, ActorKind[Any]] = {
    kind.name: kind
    for kind in (
        SCENE_SHARD,
        BEACON_SET,
        INBOX_SHARD,
        REGISTRY,
        OBSERVATORY,
        AUDIT_LOG,
        HEAD_ROSTER,
        CONSOLE_STATE,
        EMBEDDER,
        WALKER,
    )
}


def _conforming(
    scene_shard: SceneShard,
    beacon_set: BeaconSet,
    inbox_shard: InboxShard,
    registry: Registry,
    observatory: Observatory,
    audit_log: AuditLog,
    head_roster: HeadRoster,
    console_state: ConsoleState,
    embedder: EmbedderWorker,
    walker: Walker,
) -> tuple[
    SceneShardActor,
    BeaconSetActor,
    InboxShardActor,
    RegistryActor,
    ObservatoryActor,
    AuditLogActor,
    HeadRosterActor,
    ConsoleStateActor,
    EmbedderActor,
    WalkerActor,
]:
    return scene_shard, beacon_set, inbox_shard, registry, observatory, audit_log, head_roster, console_state, embedder, walker


class ActorProxy:
    """An actor behind its kind's methods only: ``proxy.write(...)`` is ``invoke("write", ...)``.

    The one place a method name is looked up at run time, checked against the
    kind's Protocol first; callers are typed by that Protocol.
    """

    def __init__(self, kind: ActorKind[Any], name: str, gate: PartitionGate | None = None) -> None:
        self.kind = kind
        self.name = name
        self.gate = gate if kind.name in KINDS else None  # only the actors whose partitions move are held

    async def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        if method not in self.kind.methods:
            raise AttributeError(f"{self.name} answers no {method!r}")
        gate = self.gate

        async def call(*args: Any, **kwargs: Any) -> Any:
            if gate is None:
                return await self.invoke(method, args, kwargs)
            async with gate.call(method):
                return await self.invoke(method, args, kwargs)

        return call


class TypedDirectory:
    """The typed accessors of :class:`mesh.seam.Directory` over one lookup, ``proxy(kind, index)``, and the
    gate its calls to partitioned actors pass (held while an online resize moves their partitions)."""

    gate: PartitionGate

    def proxy(self, kind: ActorKind[Any], index: int | None = None) -> ActorProxy:
        raise NotImplementedError

    def scene_shard(self, index: int) -> SceneShardActor:
        return cast(SceneShardActor, self.proxy(SCENE_SHARD, index))

    def beacon_set(self, index: int) -> BeaconSetActor:
        return cast(BeaconSetActor, self.proxy(BEACON_SET, index))

    def inbox_shard(self, index: int) -> InboxShardActor:
        return cast(InboxShardActor, self.proxy(INBOX_SHARD, index))

    def registry(self) -> RegistryActor:
        return cast(RegistryActor, self.proxy(REGISTRY))

    def observatory(self) -> ObservatoryActor:
        return cast(ObservatoryActor, self.proxy(OBSERVATORY))

    def audit_log(self) -> AuditLogActor:
        return cast(AuditLogActor, self.proxy(AUDIT_LOG))

    def head_roster(self) -> HeadRosterActor:
        return cast(HeadRosterActor, self.proxy(HEAD_ROSTER))

    def console_state(self) -> ConsoleStateActor:
        return cast(ConsoleStateActor, self.proxy(CONSOLE_STATE))

    def embedder(self, index: int) -> EmbedderActor:
        return cast(EmbedderActor, self.proxy(EMBEDDER, index))

    def walker(self, index: int) -> WalkerActor:
        return cast(WalkerActor, self.proxy(WALKER, index))


async def retire_partitioned(directory: Directory) -> None:
    """Stop every partitioned actor for a resize: scene shards leave their queued walks to be replayed, the
    others drain as at shutdown."""
    await asyncio.gather(
        *(shard.retire() for shard in scene_shards(directory)),
        *(actor.close() for actor in [*beacon_sets(directory), *inbox_shards(directory)]),
    )

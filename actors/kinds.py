"""The actor kinds: each one's name, its class, and the Protocol of :mod:`mesh.seam` it answers.

``_conforming`` is never called: it is how mypy checks, on every run, that
each actor class answers its Protocol (same methods, same arguments, same
results). Both directories expose an actor only through its kind's methods,
so the Protocol is the whole seam: no method name travels as a string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from actors.audit_log import AuditLog
from actors.beacon_set import BeaconSet
from actors.inbox_shard import InboxShard
from actors.observatory import Observatory
from actors.registry import Registry
from actors.scene_shard import SceneShard
from mesh.seam import (
    AuditLogActor,
    BeaconSetActor,
    InboxShardActor,
    ObservatoryActor,
    RegistryActor,
    SceneShardActor,
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


def _conforming(
    scene_shard: SceneShard,
    beacon_set: BeaconSet,
    inbox_shard: InboxShard,
    registry: Registry,
    observatory: Observatory,
    audit_log: AuditLog,
) -> tuple[SceneShardActor, BeaconSetActor, InboxShardActor, RegistryActor, ObservatoryActor, AuditLogActor]:
    return scene_shard, beacon_set, inbox_shard, registry, observatory, audit_log

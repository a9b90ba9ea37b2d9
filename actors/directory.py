"""The Directory seam: how the rest of memesh finds and calls actors.

Callers address actors by role and partition (``scene_shard(n)``,
``inbox_for(agent_id)``), never by a handle they keep, so an actor may restart
or move (Orleans' virtual actors). Two implementations: :class:`InProcessDirectory`
(the same actor classes, called directly; unit tests and notebooks) and
``actors.ray_directory.RayDirectory`` (the server, integration tests,
benchmarks). Actors that call other actors (a scene shard running a walk) get
the directory through ``attach``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol

from mesh.partition import shard_for


class ActorRef(Protocol):
    async def call(self, method: str, *args: Any) -> Any:
        """Invoke ``method`` on the actor; failures arrive as :class:`mesh.errors.MemeshError`."""
        ...


@dataclass(frozen=True, slots=True)
class DirectorySpec:
    """Where a deployment's actors are: its namespace and partition counts (picklable)."""

    namespace: str
    scene_shards: int
    beacon_sets: int
    inbox_shards: int


class Directory(Protocol):
    spec: DirectorySpec

    def scene_shard(self, index: int) -> ActorRef: ...

    def beacon_set(self, index: int) -> ActorRef: ...

    def inbox_shard(self, index: int) -> ActorRef: ...

    def registry(self) -> ActorRef: ...

    def observatory(self) -> ActorRef: ...

    def audit_log(self) -> ActorRef: ...

    async def close(self) -> None: ...


def beacon_set_index(directory: Directory, agent_id: str) -> int:
    """The one mapping from an agent to the BeaconSet holding its beacons and agent node."""
    return shard_for(agent_id, directory.spec.beacon_sets)


def inbox_index(directory: Directory, agent_id: str) -> int:
    """The one mapping from an agent to the InboxShard holding its inbox."""
    return shard_for(agent_id, directory.spec.inbox_shards)


def all_refs(directory: Directory) -> list[ActorRef]:
    spec = directory.spec
    return [
        *(directory.scene_shard(i) for i in range(spec.scene_shards)),
        *(directory.beacon_set(i) for i in range(spec.beacon_sets)),
        *(directory.inbox_shard(i) for i in range(spec.inbox_shards)),
        directory.registry(),
        directory.observatory(),
        directory.audit_log(),
    ]


class LocalRef:
    """Calls a plain object's method in this process."""

    def __init__(self, target: object, name: str) -> None:
        self.target = target
        self.name = name

    async def call(self, method: str, *args: Any) -> Any:
        result = getattr(self.target, method)(*args)
        if inspect.isawaitable(result):
            return await result
        return result


class InProcessDirectory:
    """Every actor instance lives in this process (no Ray). ``actors`` maps a name to an instance."""

    def __init__(self, spec: DirectorySpec, actors: dict[str, object]) -> None:
        self.spec = spec
        self._refs = {name: LocalRef(actor, name) for name, actor in actors.items()}
        for actor in actors.values():
            attach = getattr(actor, "attach", None)
            if attach is not None:
                attach(self)

    def scene_shard(self, index: int) -> LocalRef:
        return self._refs[f"scene_shard:{index}"]

    def beacon_set(self, index: int) -> LocalRef:
        return self._refs[f"beacon_set:{index}"]

    def inbox_shard(self, index: int) -> LocalRef:
        return self._refs[f"inbox_shard:{index}"]

    def registry(self) -> LocalRef:
        return self._refs["registry"]

    def observatory(self) -> LocalRef:
        return self._refs["observatory"]

    def audit_log(self) -> LocalRef:
        return self._refs["audit_log"]

    async def close(self) -> None:
        """Drain every actor's pending work (its tables may then be opened by another owner)."""
        for ref in all_refs(self):
            await ref.call("close")

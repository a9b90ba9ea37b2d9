"""The in-process Directory: every actor object lives in this process (no Ray).

Unit tests and notebooks use it; the server, the integration tests and the
benchmarks use ``actors.ray_directory.RayDirectory``. Both hand out the typed
Protocols of :mod:`mesh.seam` for the same actor classes (``actors.kinds``).
A call here behaves as a Ray call does where it matters to callers: its
arguments and its result are pickled and unpickled, so neither side keeps a
reference into the other's objects, and an argument Ray could not send fails
here too. Errors are raised as the actor raised them (Ray re-raises a copy of a
``MemeshError`` too). Actors that call other actors get the directory through
``attach``.
"""

from __future__ import annotations

import pickle
from typing import Any

from actors.kinds import ActorKind, ActorProxy, TypedDirectory, retire_partitioned
from actors.partition_gate import PartitionGate
from mesh.deployment import DirectorySpec
from mesh.layout import KINDS
from mesh.seam import every_actor


def _copied(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


class LocalActor(ActorProxy):
    """An actor object called in this process, with copied arguments and result."""

    def __init__(self, target: object, kind: ActorKind[Any], name: str, gate: PartitionGate | None = None) -> None:
        super().__init__(kind, name, gate)
        self.target = target

    async def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args, kwargs = _copied((args, kwargs))
        return _copied(await getattr(self.target, method)(*args, **kwargs))


class InProcessDirectory(TypedDirectory):
    """``actors`` maps an actor name (``scene_shard:0``, ``registry``, ...) to its instance."""

    def __init__(self, spec: DirectorySpec, actors: dict[str, object]) -> None:
        self.spec = spec
        self.gate = PartitionGate()
        self.instances: dict[str, object] = {}
        self._add(actors)

    def _add(self, actors: dict[str, object]) -> None:
        self.instances.update(actors)
        for actor in actors.values():
            attach = getattr(actor, "attach", None)
            if attach is not None:
                attach(self)

    def proxy(self, kind: ActorKind[Any], index: int | None = None) -> LocalActor:
        name = kind.actor_name(index)
        return LocalActor(self.instances[name], kind, name, self.gate)

    async def retire_partitions(self) -> None:
        """Drain and drop every scene shard, beacon set and inbox shard (their tables may then move)."""
        with self.gate.passing():
            await retire_partitioned(self)
        for name in [n for n in self.instances if n.split(":")[0] in KINDS]:
            del self.instances[name]

    async def prepare_partitions(self, spec: DirectorySpec, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Nothing to boot in process: ``adopt_partitions`` makes the objects."""

    def discard_prepared(self) -> None:
        """Nothing was prepared."""

    async def adopt_partitions(self, spec: DirectorySpec, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Route by ``spec`` and start the partitioned actors of ``plan`` (the others run on)."""
        self.spec = spec
        self._add({name: cls(*args) for name, (cls, args) in plan.items() if name.split(":")[0] in KINDS})

    def follow(self, spec: DirectorySpec) -> None:
        """Route by ``spec`` (another head replaced the actors)."""
        self.spec = spec

    async def close(self, last: bool = True) -> None:
        """Drain every actor's pending work (its tables may then be opened by another owner)."""
        if not last:
            return
        for actor in every_actor(self):
            await actor.close()

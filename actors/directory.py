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
from collections.abc import Awaitable, Callable
from typing import Any, cast

from actors.kinds import AUDIT_LOG, BEACON_SET, INBOX_SHARD, OBSERVATORY, REGISTRY, SCENE_SHARD, ActorKind
from mesh.seam import (
    AuditLogActor,
    BeaconSetActor,
    DirectorySpec,
    InboxShardActor,
    ObservatoryActor,
    RegistryActor,
    SceneShardActor,
    every_actor,
)


def _copied(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


class LocalActor:
    """An actor object behind its kind's methods, called in this process with copied arguments and result."""

    def __init__(self, target: object, kind: ActorKind[Any], name: str) -> None:
        self.target = target
        self.kind = kind
        self.name = name

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        if method not in self.kind.methods:
            raise AttributeError(f"{self.name} answers no {method!r}")
        bound = getattr(self.target, method)

        async def call(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = _copied((args, kwargs))
            return _copied(await bound(*args, **kwargs))

        return call


class InProcessDirectory:
    """``actors`` maps an actor name (``scene_shard:0``, ``registry``, ...) to its instance."""

    def __init__(self, spec: DirectorySpec, actors: dict[str, object]) -> None:
        self.spec = spec
        self.instances = dict(actors)
        for actor in actors.values():
            attach = getattr(actor, "attach", None)
            if attach is not None:
                attach(self)

    def _local(self, kind: ActorKind[Any], index: int | None = None) -> Any:
        name = kind.actor_name(index)
        return LocalActor(self.instances[name], kind, name)

    def scene_shard(self, index: int) -> SceneShardActor:
        return cast(SceneShardActor, self._local(SCENE_SHARD, index))

    def beacon_set(self, index: int) -> BeaconSetActor:
        return cast(BeaconSetActor, self._local(BEACON_SET, index))

    def inbox_shard(self, index: int) -> InboxShardActor:
        return cast(InboxShardActor, self._local(INBOX_SHARD, index))

    def registry(self) -> RegistryActor:
        return cast(RegistryActor, self._local(REGISTRY))

    def observatory(self) -> ObservatoryActor:
        return cast(ObservatoryActor, self._local(OBSERVATORY))

    def audit_log(self) -> AuditLogActor:
        return cast(AuditLogActor, self._local(AUDIT_LOG))

    async def close(self) -> None:
        """Drain every actor's pending work (its tables may then be opened by another owner)."""
        for actor in every_actor(self):
            await actor.close()

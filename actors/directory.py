"""The Directory seam: how the rest of memesh finds and calls actors.

Callers address actors by role and partition (``scene_shard(n)``,
``registry()``), never by a handle they keep, so an actor may restart or move
(Orleans' virtual actors). Two implementations: :class:`InProcessDirectory`
(the same actor classes, called directly; unit tests and quick notebooks) and
``actors.ray_directory.RayDirectory`` (the server, integration tests,
benchmarks).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from actors.registry import Registry, RegistryConfig
from actors.scene_shard import SceneShard, ShardConfig


class ActorRef(Protocol):
    async def call(self, method: str, *args: Any) -> Any:
        """Invoke ``method`` on the actor; failures arrive as :class:`mesh.errors.MemeshError`."""
        ...


class Directory(Protocol):
    @property
    def scene_shards(self) -> int: ...

    def scene_shard(self, index: int) -> ActorRef: ...

    def registry(self) -> ActorRef: ...

    async def close(self) -> None: ...


class LocalRef:
    """Calls a plain object's method in this process."""

    def __init__(self, target: object) -> None:
        self.target = target

    async def call(self, method: str, *args: Any) -> Any:
        result = getattr(self.target, method)(*args)
        if inspect.isawaitable(result):
            return await result
        return result


class InProcessDirectory:
    """Every actor instance lives in this process (no Ray)."""

    def __init__(self, shard_configs: list[ShardConfig], registry_config: RegistryConfig) -> None:
        self._shards = [LocalRef(SceneShard(c)) for c in shard_configs]
        self._registry = LocalRef(Registry(registry_config))

    @property
    def scene_shards(self) -> int:
        return len(self._shards)

    def scene_shard(self, index: int) -> LocalRef:
        return self._shards[index]

    def registry(self) -> LocalRef:
        return self._registry

    async def close(self) -> None:
        """Drain every actor's pending commits (the tables may then be opened by another owner)."""
        for ref in [*self._shards, self._registry]:
            await ref.call("close")

"""The one module that creates, finds and calls Ray actors.

All Ray API calls sit here (as in Ray Serve's ``deployment_state.py``): the
actor classes stay plain, and the rest of memesh sees only ``Directory``.

Actors are named ``<kind>:<n>`` in the deployment's namespace, restart without
limit (``max_restarts=-1``; on restart they reload from storage) and retry a
call interrupted by a restart (``max_task_retries``), which is safe because
every actor method is idempotent. They ask for no CPU: they are I/O-bound and
a 2-core machine must hold all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from actors.registry import Registry, RegistryConfig
from actors.scene_shard import SceneShard, ShardConfig
from mesh.errors import InternalError, MemeshError, TimedOut, Unavailable

_ACTOR_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "max_restarts": -1,
    "max_task_retries": 5,
    "max_concurrency": 1000,
}


class RayRef:
    """Calls a named Ray actor; Ray failures become the memesh error vocabulary."""

    def __init__(self, handle: Any, name: str) -> None:
        self.handle = handle
        self.name = name

    async def call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self.handle, method).remote(*args)
        except RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, MemeshError):
                raise cause from None
            raise InternalError(f"{self.name}.{method} failed") from exc
        except GetTimeoutError as exc:
            raise TimedOut(f"{self.name} did not answer in time") from exc
        except (ActorDiedError, ActorUnavailableError, RayActorError) as exc:
            raise Unavailable(f"{self.name} is unavailable") from exc


def _actor(cls: type, name: str, namespace: str, *args: Any) -> RayRef:
    handle: Any = ray.remote(cls).options(name=name, namespace=namespace, get_if_exists=True, **_ACTOR_OPTIONS).remote(*args)
    return RayRef(handle, name)


class RayDirectory:
    """Actors of one deployment (one Ray namespace) on the connected Ray cluster."""

    def __init__(self, namespace: str, shard_configs: list[ShardConfig], registry_config: RegistryConfig) -> None:
        if not ray.is_initialized():
            raise RuntimeError("connect to Ray before building a RayDirectory")
        self.namespace = namespace
        self._shards = [_actor(SceneShard, f"scene_shard:{c.index}", namespace, c) for c in shard_configs]
        self._registry = _actor(Registry, "registry", namespace, registry_config)

    @property
    def scene_shards(self) -> int:
        return len(self._shards)

    def scene_shard(self, index: int) -> RayRef:
        return self._shards[index]

    def registry(self) -> RayRef:
        return self._registry

    async def close(self) -> None:
        refs = [*self._shards, self._registry]
        with contextlib.suppress(Exception):  # best effort: a dead actor has nothing left to drain
            await asyncio.wait_for(asyncio.gather(*(ref.call("close") for ref in refs), return_exceptions=True), 30)
        for ref in refs:
            with contextlib.suppress(Exception):  # already gone is fine at shutdown
                ray.kill(ref.handle, no_restart=True)


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


def shutdown() -> None:
    if ray.is_initialized():
        ray.shutdown()

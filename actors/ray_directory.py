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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from actors.kinds import ActorKind, ActorProxy, TypedDirectory
from mesh.errors import InternalError, MemeshError, TimedOut, Unavailable
from mesh.seam import DirectorySpec, every_actor

_ACTOR_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "max_restarts": -1,
    "max_task_retries": 5,
    "max_concurrency": 1000,
}


class RayActor(ActorProxy):
    """A named Ray actor; Ray failures become the memesh error vocabulary."""

    def __init__(self, handle: Any, kind: ActorKind[Any], name: str) -> None:
        super().__init__(kind, name)
        self.handle = handle

    async def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with memesh_errors(self.name, method):
            return await getattr(self.handle, method).remote(*args, **kwargs)


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
    ) -> None:
        """Several heads may build one with the same ``plan``: the first creates the actors, the others
        attach to them (``get_if_exists``). ``detached`` actors outlive the head that created them (heads
        joined to a Ray cluster come and go); otherwise they share that head's fate (one machine).
        ``spread`` places them across the cluster's nodes (Ray's ``SPREAD`` strategy) instead of where Ray
        packs them; either way an actor whose node is lost restarts on another and reloads from storage."""
        if not ray.is_initialized():
            raise RuntimeError("connect to Ray before building a RayDirectory")
        self.spec = spec
        self._handles: dict[str, Any] = {}
        self._extra: dict[str, Any] = {"lifetime": "detached"} if detached else {}
        if spread:
            self._extra["scheduling_strategy"] = "SPREAD"
        self.create(plan or {})

    def create(self, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Create the actors of ``plan``, or attach to those already running under their names. A name this
        directory already holds is skipped: replacing the creating handle would drop the last reference Ray
        counts for a non-detached actor, and Ray would destroy it."""
        for name, (cls, args) in plan.items():
            if name in self._handles:
                continue
            options: Any = ray.remote(cls).options(
                name=name, namespace=self.spec.namespace, get_if_exists=True, **_ACTOR_OPTIONS, **self._extra
            )
            self._handles[name] = options.remote(*args)

    def call_now(self, kind: ActorKind[Any], method: str, *args: Any, timeout_s: float = 600.0) -> Any:
        """Call an actor from synchronous code (a head's start, before its event loop runs): its answer,
        or its MemeshError raised as is."""
        actor = self.proxy(kind)
        with memesh_errors(actor.name, method):
            return ray.get(getattr(actor.handle, method).remote(*args), timeout=timeout_s)

    def proxy(self, kind: ActorKind[Any], index: int | None = None) -> RayActor:
        name = kind.actor_name(index)
        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = self._handles[name] = ray.get_actor(name, namespace=self.spec.namespace)
            except ValueError as exc:
                raise Unavailable(f"{name} is not running") from exc
        return RayActor(handle, kind, name)

    async def close(self, last: bool = True) -> None:
        """The last head drains and stops every actor; another head only lets go of its handles."""
        if not last:
            self._handles.clear()
            return
        actors = every_actor(self)
        with contextlib.suppress(Exception):  # best effort: a dead actor has nothing left to drain
            await asyncio.wait_for(asyncio.gather(*(a.close() for a in actors), return_exceptions=True), 30)
        for handle in self._handles.values():
            with contextlib.suppress(Exception):  # already gone is fine at shutdown
                ray.kill(handle, no_restart=True)


@dataclass(frozen=True, slots=True)
class RayLookup:
    """A picklable way for an actor to find the others: ``RayLookup(spec)()`` is a lookup-only directory."""

    spec: DirectorySpec

    def __call__(self) -> RayDirectory:
        return RayDirectory(self.spec)


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

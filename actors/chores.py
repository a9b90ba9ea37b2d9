"""An actor's life besides its calls: loading its tables once (``LoadOnce``), repeated chores
(retention sweeps, started once it has loaded) and one-off ones it does not make its caller wait for."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Periodic:
    """Runs ``chore`` every ``interval_s`` seconds from ``start`` until ``stop``.

    A failing run is logged and the next one runs on time: a sweep must never
    stop an actor. An interval of 0 never starts (tests call the chore
    themselves).
    """

    def __init__(self, name: str, chore: Callable[[], Awaitable[object]], interval_s: float) -> None:
        self._name = name
        self._chore = chore
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._interval_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._task is asyncio.current_task():  # not only the cancel: a chore may swallow it (3.11's wait_for can)
            await asyncio.sleep(self._interval_s)
            try:
                await self._chore()
            except Exception:
                log.warning("%s failed; it runs again in %.0f s", self._name, self._interval_s, exc_info=True)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])


class Background:
    """One-off chores an actor starts without awaiting them (soft-state commits, observation, trims).

    Each task is held until it ends (the event loop keeps only a weak reference), a failure is
    logged and never raised, and ``drain`` returns once every chore started before it has ended.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, chore: Coroutine[Any, Any, object]) -> None:
        async def guarded() -> None:
            try:
                await chore
            except Exception:
                log.warning("%s failed", self._name, exc_info=True)

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def busy(self) -> bool:
        """True while a chore started here has not ended."""
        return any(not t.done() for t in self._tasks)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class LoadOnce:
    """Runs an actor's async loader exactly once, on first use; concurrent callers wait for it.

    (A Ray actor's constructor cannot await, so actors load their tables lazily.)
    A loader that fails leaves nothing marked loaded: the next call tries again.
    """

    def __init__(self, loader: Callable[[], Awaitable[None]]) -> None:
        self._loader = loader
        self._done = False
        self._lock = asyncio.Lock()

    async def __call__(self) -> None:
        if self._done:
            return
        async with self._lock:
            if not self._done:
                await self._loader()
                self._done = True

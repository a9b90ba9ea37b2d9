"""A chore an actor repeats on its own event loop (retention sweeps), started once it has loaded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

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
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self._chore()
            except Exception:
                log.warning("%s failed; it runs again in %.0f s", self._name, self._interval_s, exc_info=True)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

"""What an owner (scene shard, beacon set) tells the walks of the tenants it holds (``mesh.presence``).

Guarantee: :meth:`PresenceTeller.tell` returns once every running walker
(``actors.walker``) has noted the tenants, so a caller that tells before
acknowledging a write or a placement leaves no walk begun after the
acknowledgement without this owner.
Each tenant is told once per owner lifetime (and again at its next load).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from mesh.errors import MemeshError
from mesh.presence import Owner
from mesh.seam import Directory

log = logging.getLogger(__name__)


async def tell_walkers(
    directory: Directory, owner: Owner, tenants: list[str], attempts: int = 3, timeout_s: float = 10.0
) -> None:
    """Tell every walker that ``owner`` holds ``tenants`` (``mesh.presence``), waiting for each.

    A walker that does not answer after ``attempts`` is not running (not created yet, or restarting): it
    asks every owner for its tenants when it next walks, so it still learns of these."""

    async def tell(walker: int) -> None:
        for attempt in range(attempts):
            try:
                await asyncio.wait_for(directory.walker(walker).note_presence(owner[0], owner[1], tenants), timeout_s)
                return
            except (MemeshError, TimeoutError) as exc:  # not serving: its start pulls instead
                log.info("walker %d not told of %s:%d (%s)", walker, owner[0], owner[1], exc)
                await asyncio.sleep(0.1 * 2**attempt)
        log.warning("walker %d was not told that %s:%d holds %d tenants", walker, owner[0], owner[1], len(tenants))

    await asyncio.gather(*(tell(walker) for walker in range(directory.spec.walkers)))


class PresenceTeller:
    """One owner's telling: ``directory()`` is None for an owner on its own (nobody to tell)."""

    def __init__(self, owner: Owner, directory: Callable[[], Directory | None]) -> None:
        self._owner = owner
        self._directory = directory
        self._told: set[str] = set()

    async def tell(self, tenants: Iterable[str]) -> None:
        """Tell every walker the tenants among ``tenants`` not told yet."""
        fresh = sorted(set(tenants) - self._told)
        if not fresh:
            return
        directory = self._directory()
        if directory is not None:
            await tell_walkers(directory, self._owner, fresh)
        self._told.update(fresh)

"""What an owner (scene shard, beacon set) tells the walks of the tenants it holds (``mesh.presence``), and
what a scene shard tells the heads (``mesh.shard_absence``: ``HeadsTeller``).

Guarantee: :meth:`PresenceTeller.tell` returns once every running walker
(``actors.walker``) has noted the tenants, so a caller that tells before
acknowledging a write or a placement leaves no walk begun after the
acknowledgement without this owner.
Each tenant is told once per owner lifetime (and again at its next load).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from mesh.errors import MemeshError, Unavailable
from mesh.presence import Owner
from mesh.seam import Directory
from mesh.shard_absence import arrival_key, loaded_key

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
                async with asyncio.timeout(timeout_s):
                    await directory.walker(walker).note_presence(owner[0], owner[1], tenants)
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


class HeadsTeller:
    """What one scene shard announces to every head (``mesh.shard_absence``): each tenant the first time it
    holds a node of it since it loaded, and each load; and which tenants of a search it may say it holds
    nothing of.

    Guarantees: :meth:`tell` returns once every live head has applied the announcement (the roster's
    ``publish``), and raises Unavailable when the roster has not confirmed it within ``lease_s``: the
    tenant then counts as not told (the caller's retry announces it again), so a shard that calls ``tell``
    after its nodes are visible to its searches and before it acknowledges the write leaves no head
    skipping it for that tenant. :meth:`absent` never names a tenant announced since the load, whatever
    the partition holds now (a reembed rebuilds it without the tenants an erase emptied). :meth:`loaded`
    gives up after ``lease_s`` (a load replays only what may be unacknowledged)."""

    def __init__(
        self,
        shard: int,
        directory: Callable[[], Directory | None],
        lease_s: float,
        poll_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._shard = shard
        self._directory = directory
        self._lease_s = lease_s
        self._poll_s = poll_s
        self._monotonic = monotonic
        self._told: set[str] = set()

    def absent(self, holds: Callable[[str], bool], tenants: Iterable[str]) -> list[str]:
        """The tenants among ``tenants`` the shard holds nothing of (``holds`` false) and has not announced."""
        return sorted({t for t in tenants if not holds(t) and t not in self._told})

    async def tell(self, tenants: Iterable[str]) -> None:
        for tenant_id in sorted(set(tenants) - self._told):
            if not await self._publish(arrival_key(self._shard, tenant_id)):
                raise Unavailable(f"scene shard {self._shard}: the heads were not told of a tenant's first write; retry")
            self._told.add(tenant_id)

    async def loaded(self) -> None:
        if not await self._publish(loaded_key(self._shard)):
            log.warning("scene shard %d: its load was not announced to the heads", self._shard)

    async def _publish(self, change: str) -> bool:
        """True once every live head has applied ``change`` (or there is nobody to tell); False when the roster
        did not confirm it within ``lease_s`` of trying."""
        directory = self._directory()
        if directory is None:
            return True
        deadline = self._monotonic() + self._lease_s
        while True:
            try:
                await directory.head_roster().publish(change, self._lease_s + self._poll_s)
                return True
            except MemeshError as exc:
                if self._monotonic() > deadline:
                    log.warning("scene shard %d: the head roster did not confirm %s (%s)", self._shard, change, exc)
                    return False
                await asyncio.sleep(0.05)

"""Per-tenant quotas: cells, beacons and stored bytes (head-side).

A tenant's data lives on several actors (its projects on scene shards, its
agents' beacons on beacon sets), so a quota is checked against a ledger the
head keeps: the tenant's usage as read from every actor (again after
``refresh_s``), plus what this head has reserved since. A write reserves its
cost before it is dispatched, and either settles it (it landed, or was
cancelled and may still land) or gives it back (it failed). A reading taken
while writes are in flight counts them too (an actor may or may not hold them
yet), so a refresh never forgets a write under way, and a failed one gives
back only what was counted.

Guarantees: with one head, a tenant never holds more than its quota (a write
landing during a refresh may be counted twice until the next one: the safe
side); with several heads, the overshoot is bounded by what the others admit
within one ``refresh_s``. A quota of 0 is off. Refusals are QuotaExceeded (429
``quota_exceeded``, no Retry-After: the quota does not refill by itself).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from mesh.errors import QuotaExceeded
from mesh.seam import Directory


@dataclass(frozen=True, slots=True)
class Quotas:
    max_cells: int = 250_000
    max_beacons: int = 4_096
    max_bytes: int = 512 * 1024 * 1024
    refresh_s: float = 30.0


@dataclass(slots=True)
class _Usage:
    cells: int
    beacons: int
    size: int
    read_at: float


@dataclass(frozen=True, slots=True)
class Reservation:
    tenant_id: str
    cells: int = 0
    beacons: int = 0
    size: int = 0


class UsageLedger:
    def __init__(self, directory: Directory, quotas: Quotas, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._dir = directory
        self._quotas = quotas
        self._monotonic = monotonic
        self._usage: dict[str, _Usage] = {}
        self._pending: dict[str, list[int]] = {}  # per tenant: cells, beacons, bytes reserved by writes under way
        self._reading: dict[str, asyncio.Lock] = {}
        self.refusals: Counter[str] = Counter()  # by quota: cells, beacons, bytes

    async def _current(self, tenant_id: str) -> _Usage:
        known = self._usage.get(tenant_id)
        if known is not None and self._monotonic() - known.read_at < self._quotas.refresh_s:
            return known
        lock = self._reading.setdefault(tenant_id, asyncio.Lock())
        async with lock:
            known = self._usage.get(tenant_id)
            if known is not None and self._monotonic() - known.read_at < self._quotas.refresh_s:
                return known
            spec = self._dir.spec
            cells, beacons, size = self._pending.get(tenant_id, (0, 0, 0))  # under way now: held or not when read
            shards = await asyncio.gather(*(self._dir.scene_shard(i).usage(tenant_id) for i in range(spec.scene_shards)))
            sets = await asyncio.gather(*(self._dir.beacon_set(i).usage(tenant_id) for i in range(spec.beacon_sets)))
            fresh = _Usage(
                cells=cells + sum(c for c, _ in shards),
                beacons=beacons + sum(b for b, _ in sets),
                size=size + sum(s for _, s in shards) + sum(s for _, s in sets),
                read_at=self._monotonic(),
            )
            self._usage[tenant_id] = fresh
            if len(self._reading) > 10_000:
                self._reading.clear()
            return fresh

    async def reserve(self, tenant_id: str, cells: int = 0, beacons: int = 0, size: int = 0) -> Reservation:
        """Take ``cells``, ``beacons`` and ``size`` bytes from the tenant's quotas, or raise QuotaExceeded."""
        q = self._quotas
        if not (q.max_cells or q.max_beacons or q.max_bytes):
            return Reservation(tenant_id)
        usage = await self._current(tenant_id)
        if q.max_cells and cells and usage.cells + cells > q.max_cells:
            self.refusals["cells"] += 1
            raise QuotaExceeded(f"the tenant's quota of {q.max_cells} cells is reached")
        if q.max_beacons and beacons and usage.beacons + beacons > q.max_beacons:
            self.refusals["beacons"] += 1
            raise QuotaExceeded(f"the tenant's quota of {q.max_beacons} beacons is reached")
        if q.max_bytes and size and usage.size + size > q.max_bytes:
            self.refusals["bytes"] += 1
            raise QuotaExceeded(f"the tenant's storage quota of {q.max_bytes} bytes is reached")
        usage.cells += cells
        usage.beacons += beacons
        usage.size += size
        reservation = Reservation(tenant_id, cells, beacons, size)
        self._under_way(reservation, +1)
        return reservation

    def _under_way(self, reservation: Reservation, sign: int) -> None:
        pending = self._pending.setdefault(reservation.tenant_id, [0, 0, 0])
        for i, amount in enumerate((reservation.cells, reservation.beacons, reservation.size)):
            pending[i] = max(0, pending[i] + sign * amount)
        if not any(pending):
            del self._pending[reservation.tenant_id]

    def settle(self, reservation: Reservation) -> None:
        """The reserved write landed: it stays counted (and the actors hold it from now on)."""
        self._under_way(reservation, -1)

    def release(self, reservation: Reservation) -> None:
        """Give back a reservation whose write failed."""
        self._under_way(reservation, -1)
        self.removed(reservation)

    def removed(self, amount: Reservation) -> None:
        """What a tenant held and no longer does (a beacon removed) leaves its count."""
        usage = self._usage.get(amount.tenant_id)
        if usage is not None:
            usage.cells = max(0, usage.cells - amount.cells)
            usage.beacons = max(0, usage.beacons - amount.beacons)
            usage.size = max(0, usage.size - amount.size)

    def forget(self, tenant_id: str | None = None) -> None:
        """Read the tenant's usage afresh next time (after an erase); None: every tenant."""
        if tenant_id is None:
            self._usage.clear()
        else:
            self._usage.pop(tenant_id, None)

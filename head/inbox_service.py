"""Inbox use cases: beacons, the acknowledged pull, and what the stream needs.

The inbox drained is always the caller's own (addressed by the principal's
agent id, never by anything in a request), filtered by the caller's read scope.

Bounds: a beacon's interest is 1 to ``max_interest_chars`` characters; its
expiry, given as ``ttl_s`` or ``expires_at`` (any offset; stored in UTC), lies
``min_ttl_s`` to ``max_ttl_s`` ahead; an agent holds at most
``max_beacons_per_agent`` and a tenant its quota. A head serves at most
``max_streams`` open inbox streams, ``max_streams_per_tenant`` per tenant (so
one tenant's many agents cannot take every slot) and ``max_streams_per_agent``
per agent (QuotaExceeded before the upgrade beyond any of them).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from head.embedding import Embedder
from head.usage import Reservation, UsageLedger
from mesh.errors import QuotaExceeded, ValidationFailed
from mesh.identity import Principal
from mesh.ids import Clock, IdSource
from mesh.inbox_wire import PullResult
from mesh.model import Beacon
from mesh.seam import Directory, InboxShardActor, beacon_set_index, inbox_index
from mesh.storage_cost import stored_bytes


@dataclass(frozen=True, slots=True)
class InboxLimits:
    max_batch: int = 256
    max_interest_chars: int = 8_192
    max_beacons_per_agent: int = 64
    min_beacon_ttl_s: float = 1.0
    max_beacon_ttl_s: float = 365 * 24 * 3600.0
    max_streams_per_agent: int = 4
    max_streams_per_tenant: int = 64
    max_streams: int = 256


class InboxService:
    def __init__(
        self, directory: Directory, embedder: Embedder, ids: IdSource, clock: Clock, limits: InboxLimits, usage: UsageLedger
    ) -> None:
        self._dir = directory
        self._embedder = embedder
        self._ids = ids
        self._clock = clock
        self.limits = limits
        self._usage = usage
        self._streams: Counter[str] = Counter()  # agent id -> open streams on this head
        self._tenant_streams: Counter[str] = Counter()  # tenant id -> open streams on this head

    def _inbox(self, principal: Principal) -> InboxShardActor:
        return self._dir.inbox_shard(inbox_index(self._dir, principal.agent_id))

    def expiry(self, now: datetime, expires_at: datetime | None, ttl_s: float | None) -> datetime | None:
        """The UTC expiry a beacon request asks for, or None for none; ValidationFailed outside the bounds."""
        limits = self.limits
        if expires_at is not None and ttl_s is not None:
            raise ValidationFailed("give expires_at or ttl_s, not both")
        if ttl_s is not None:
            if not limits.min_beacon_ttl_s <= ttl_s <= limits.max_beacon_ttl_s:
                raise ValidationFailed(
                    f"ttl_s must be between {limits.min_beacon_ttl_s:g} and {limits.max_beacon_ttl_s:g} seconds"
                )
            return now + timedelta(seconds=ttl_s)
        if expires_at is None:
            return None
        if expires_at.tzinfo is None:
            raise ValidationFailed("expires_at needs a time zone offset")
        try:
            ahead = (expires_at - now).total_seconds()
            at = expires_at.astimezone(UTC)
        except OverflowError:  # beyond year 9999 once in UTC
            raise ValidationFailed(f"expires_at must be at most {limits.max_beacon_ttl_s:g} seconds ahead") from None
        if ahead < limits.min_beacon_ttl_s:
            raise ValidationFailed(f"expires_at must be at least {limits.min_beacon_ttl_s:g} seconds in the future")
        if ahead > limits.max_beacon_ttl_s:
            raise ValidationFailed(f"expires_at must be at most {limits.max_beacon_ttl_s:g} seconds ahead")
        return at

    async def place_beacon(
        self, principal: Principal, interest: str, expires_at: datetime | None = None, ttl_s: float | None = None
    ) -> Beacon:
        """A standing interest of the caller; any role may place one (it is about reading)."""
        if not interest.strip() or len(interest) > self.limits.max_interest_chars:
            raise ValidationFailed(f"interest must be 1 to {self.limits.max_interest_chars} characters")
        now = self._clock()
        expiry = self.expiry(now, expires_at, ttl_s)
        reservation = await self._usage.reserve(principal.tenant_id, beacons=1, size=stored_bytes(interest, self._embedder.dims))
        try:
            async with self._embedder.gate.shared():  # the vector and its engine never straddle a reembed switch
                placed = await self._place(principal, interest, now, expiry)
        except asyncio.CancelledError:  # a timeout or a gone client: the placement may still land
            self._usage.settle(reservation)
            raise
        except BaseException:
            self._usage.release(reservation)
            raise
        self._usage.settle(reservation)
        return placed

    async def _place(self, principal: Principal, interest: str, now: datetime, expires_at: datetime | None) -> Beacon:
        vector = await self._embedder.embed_one(interest, principal.tenant_id)
        beacon = Beacon(
            id=self._ids.new(),
            tenant_id=principal.tenant_id,
            agent_id=principal.agent_id,
            interest=interest,
            embedding=vector,
            engine=self._embedder.name,
            created_at=now,
            expires_at=expires_at,
        )
        ref = self._dir.beacon_set(beacon_set_index(self._dir, principal.agent_id))
        placed: Beacon = await ref.place(beacon, self.limits.max_beacons_per_agent)
        return placed

    async def remove_beacon(self, principal: Principal, beacon_id: str) -> None:
        """Only the owner removes a beacon; anyone else gets NotFound, as for a missing one."""
        ref = self._dir.beacon_set(beacon_set_index(self._dir, principal.agent_id))
        removed: bool = await ref.remove(principal.tenant_id, principal.agent_id, beacon_id)
        if removed:  # a repeated removal gives nothing back
            self._usage.removed(Reservation(principal.tenant_id, beacons=1))

    async def pull(
        self, principal: Principal, since: int | None, ack: int | None, limit: int | None, by_seq: bool = False
    ) -> PullResult:
        for name, value in (("since", since), ("ack", ack), ("limit", limit)):
            if value is not None and value < 0:
                raise ValidationFailed(f"{name} must be at least 0")
        result: PullResult = await self._inbox(principal).pull(
            principal.agent_id, since, ack, limit, self.limits.max_batch, principal.read_scope, by_seq
        )
        return result

    async def ack(self, principal: Principal, ack: int) -> int:
        if ack < 0:
            raise ValidationFailed("ack must be at least 0")
        cursor: int = await self._inbox(principal).ack(principal.agent_id, ack)
        return cursor

    async def cursor(self, principal: Principal) -> int:
        cursor: int = await self._inbox(principal).cursor(principal.agent_id)
        return cursor

    async def next_page(self, principal: Principal, since: int, timeout_s: float) -> PullResult:
        """The stream's next page after ``since`` (one shard call: it waits up to ``timeout_s`` for one)."""
        result: PullResult = await self._inbox(principal).next_page(
            principal.agent_id, since, self.limits.max_batch, principal.read_scope, timeout_s
        )
        return result

    async def wait(self, principal: Principal, after_seq: int, timeout_s: float) -> int:
        top: int = await self._inbox(principal).wait(principal.agent_id, after_seq, timeout_s)
        return top

    @contextmanager
    def stream_slot(self, principal: Principal) -> Iterator[None]:
        """Hold one of this head's inbox stream slots while a stream is open; QuotaExceeded when the
        agent already holds ``max_streams_per_agent``, its tenant ``max_streams_per_tenant`` or the
        head ``max_streams``."""
        agent, tenant, limits = principal.agent_id, principal.tenant_id, self.limits
        if self._streams[agent] >= limits.max_streams_per_agent:
            raise QuotaExceeded(f"an agent holds at most {limits.max_streams_per_agent} open inbox streams")
        if self._tenant_streams[tenant] >= limits.max_streams_per_tenant:
            raise QuotaExceeded(f"a tenant holds at most {limits.max_streams_per_tenant} open inbox streams on a server")
        if self.open_streams >= limits.max_streams:
            raise QuotaExceeded("this server holds its maximum of open inbox streams: retry later")
        self._streams[agent] += 1
        self._tenant_streams[tenant] += 1
        try:
            yield
        finally:
            for counts, key in ((self._streams, agent), (self._tenant_streams, tenant)):
                counts[key] -= 1
                if counts[key] <= 0:
                    del counts[key]

    @property
    def open_streams(self) -> int:
        return self._streams.total()

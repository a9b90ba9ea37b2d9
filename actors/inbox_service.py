"""Inbox use cases: beacons, the acknowledged pull, and what the stream needs.

The inbox drained is always the caller's own (addressed by the principal's
agent id, never by anything in a request), filtered by the caller's read scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from actors.clock import Clock, IdSource
from actors.directory import ActorRef, Directory, beacon_set_index, inbox_index
from actors.embedding import Embedder
from actors.inbox_shard import PullResult
from mesh.errors import ValidationFailed
from mesh.identity import Principal
from mesh.model import Beacon


@dataclass(frozen=True, slots=True)
class InboxLimits:
    max_batch: int = 256
    max_interest_chars: int = 8_192
    max_beacons_per_agent: int = 64
    max_beacon_ttl_s: float = 10 * 365 * 24 * 3600.0


class InboxService:
    def __init__(self, directory: Directory, embedder: Embedder, ids: IdSource, clock: Clock, limits: InboxLimits) -> None:
        self._dir = directory
        self._embedder = embedder
        self._ids = ids
        self._clock = clock
        self.limits = limits

    def _inbox(self, principal: Principal) -> ActorRef:
        return self._dir.inbox_shard(inbox_index(self._dir, principal.agent_id))

    async def place_beacon(
        self, principal: Principal, interest: str, expires_at: datetime | None = None, ttl_s: float | None = None
    ) -> Beacon:
        """A standing interest of the caller; any role may place one (it is about reading)."""
        if not interest.strip() or len(interest) > self.limits.max_interest_chars:
            raise ValidationFailed(f"interest must be 1 to {self.limits.max_interest_chars} characters")
        now = self._clock()
        if expires_at is not None and ttl_s is not None:
            raise ValidationFailed("give expires_at or ttl_s, not both")
        if ttl_s is not None:
            if not 0 < ttl_s <= self.limits.max_beacon_ttl_s:
                raise ValidationFailed("ttl_s must be positive and at most ten years")
            expires_at = now + timedelta(seconds=ttl_s)
        if expires_at is not None:
            if expires_at.tzinfo is None:
                raise ValidationFailed("expires_at needs a time zone offset")
            if expires_at <= now:
                raise ValidationFailed("expires_at must be in the future")
        async with self._embedder.gate.shared():  # the vector and its engine never straddle a reembed switch
            return await self._place(principal, interest, now, expires_at)

    async def _place(self, principal: Principal, interest: str, now: datetime, expires_at: datetime | None) -> Beacon:
        vector = await self._embedder.embed_one(interest)
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
        placed: Beacon = await ref.call("place", beacon, self.limits.max_beacons_per_agent)
        return placed

    async def remove_beacon(self, principal: Principal, beacon_id: str) -> None:
        """Only the owner removes a beacon; anyone else gets NotFound, as for a missing one."""
        ref = self._dir.beacon_set(beacon_set_index(self._dir, principal.agent_id))
        await ref.call("remove", principal.tenant_id, principal.agent_id, beacon_id)

    async def pull(
        self, principal: Principal, since: int | None, ack: int | None, limit: int | None, by_seq: bool = False
    ) -> PullResult:
        for name, value in (("since", since), ("ack", ack), ("limit", limit)):
            if value is not None and value < 0:
                raise ValidationFailed(f"{name} must be at least 0")
        result: PullResult = await self._inbox(principal).call(
            "pull", principal.agent_id, since, ack, limit, self.limits.max_batch, principal.read_scope, by_seq
        )
        return result

    async def ack(self, principal: Principal, ack: int) -> int:
        if ack < 0:
            raise ValidationFailed("ack must be at least 0")
        cursor: int = await self._inbox(principal).call("ack", principal.agent_id, ack)
        return cursor

    async def cursor(self, principal: Principal) -> int:
        cursor: int = await self._inbox(principal).call("cursor", principal.agent_id)
        return cursor

    async def wait(self, principal: Principal, after_seq: int, timeout_s: float) -> int:
        top: int = await self._inbox(principal).call("wait", principal.agent_id, after_seq, timeout_s)
        return top

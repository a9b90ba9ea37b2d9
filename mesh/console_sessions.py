"""Operator console sessions and the logins under way: the rules, in memory, bounded.

The deployment holds one table of each in its ConsoleState actor
(:mod:`actors.console_state`), which every head reads and writes.

Guarantees:
- A session id is 256 random bits (drawn by the ConsoleState actor), opaque (it encodes
  nothing) and handed out once, in the session cookie. Only its SHA-256 is
  kept, so the table in memory cannot be replayed as cookies, and a lookup
  compares digests, not the secret.
- Sessions and pending logins expire after a fixed TTL and are bounded in
  number: past the bound the oldest is dropped (for sessions that logs the
  oldest operator out; for pending logins, the oldest login must start again).
  Expired entries are purged on every insert, so memory stays bounded.
- A pending login is taken at most once: a replayed callback finds nothing.
- One client address (an IPv6 /64) holds at most ``per_owner`` pending
  logins: its next one drops its oldest, so a flood from one address cannot
  fill the table and lock other operators out.
- A session says who logged in (agent id and OIDC subject), not what they may
  do: the console gate re-resolves the agent's principal on every request, so
  a revoked or suspended agent's sessions stop working at once.
- Nothing is persisted: restarting the ConsoleState actor logs operators out
  (they log in again). Restarting a head does not.

Time is a parameter (``now``) of every call, so the rules replay in tests.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from mesh.errors import QuotaExceeded

__all__ = ["ConsoleSession", "ConsoleSessions", "PendingLogin", "PendingLogins", "address_owner"]

V = TypeVar("V")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class _ExpiringMap(Generic[V]):
    """Values under a secret token, each living ``ttl_s`` from its insert, at most ``capacity`` of them.

    With one TTL for all, insertion order is expiry order: the front of the
    ordered dict is always the next to expire and the first to drop.
    """

    def __init__(self, ttl_s: float, capacity: int) -> None:
        if ttl_s <= 0 or capacity < 1:
            raise ValueError("ttl_s must be positive and capacity at least 1")
        self.ttl = timedelta(seconds=ttl_s)
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[datetime, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, token: str, value: V, now: datetime) -> datetime:
        """Store ``value`` under ``token``; returns its expiry."""
        self._purge(now)
        while len(self._entries) >= self.capacity:
            self._entries.popitem(last=False)
        expires_at = now + self.ttl
        self._entries[_digest(token)] = (expires_at, value)
        return expires_at

    def has(self, token: str, now: datetime) -> bool:
        entry = self._entries.get(_digest(token))
        return entry is not None and entry[0] > now

    def full(self, now: datetime) -> bool:
        """True when ``capacity`` unexpired values are held (a ``put`` would then drop the oldest)."""
        self._purge(now)
        return len(self._entries) >= self.capacity

    def get(self, token: str, now: datetime) -> V | None:
        entry = self._entries.get(_digest(token))
        if entry is None:
            return None
        if entry[0] <= now:
            self._entries.pop(_digest(token), None)
            return None
        return entry[1]

    def pop(self, token: str, now: datetime) -> V | None:
        entry = self._entries.pop(_digest(token), None)
        if entry is None or entry[0] <= now:
            return None
        return entry[1]

    def _purge(self, now: datetime) -> None:
        while self._entries:
            expires_at, _ = next(iter(self._entries.values()))
            if expires_at > now:
                return
            self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """Who logged in to the console and until when. Holds no token from the provider."""

    agent_id: str
    subject: str
    created_at: datetime
    expires_at: datetime


class ConsoleSessions:
    """The console's server-side sessions, keyed by an opaque id (the ``service_admin_session`` cookie)."""

    def __init__(self, ttl_s: float, capacity: int) -> None:
        self._map: _ExpiringMap[ConsoleSession] = _ExpiringMap(ttl_s, capacity)

    @property
    def ttl_s(self) -> float:
        return self._map.ttl.total_seconds()

    def __len__(self) -> int:
        return len(self._map)

    def open(self, agent_id: str, subject: str, now: datetime, token: str) -> tuple[str, ConsoleSession]:
        """A new session under ``token`` (the caller draws it: 256 random bits, url-safe); the id is not kept."""
        session = ConsoleSession(agent_id, subject, now, now + self._map.ttl)
        self._map.put(token, session, now)
        return token, session

    def get(self, token: str | None, now: datetime) -> ConsoleSession | None:
        """The live session ``token`` names; None when missing, unknown, dropped or expired."""
        if not token or len(token) > 256:
            return None
        return self._map.get(token, now)

    def drop(self, token: str | None, now: datetime) -> bool:
        """End the session ``token`` names; True when a live one was dropped. Idempotent."""
        if not token or len(token) > 256:
            return False
        return self._map.pop(token, now) is not None


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """What the callback needs from the login it completes; never leaves the head."""

    nonce: str
    code_verifier: str
    redirect_uri: str


def address_owner(address: str) -> str:
    """Whose pending logins an address counts against: the address, or its /64 for IPv6."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


class PendingLogins:
    """Logins begun at ``/admin/auth/login``, keyed by their OAuth ``state``, taken once by the callback."""

    def __init__(self, ttl_s: float, capacity: int, per_owner: int = 8) -> None:
        self._map: _ExpiringMap[PendingLogin] = _ExpiringMap(ttl_s, capacity)
        self._per_owner = per_owner
        self._by_owner: dict[str, deque[str]] = {}

    def __len__(self) -> int:
        return len(self._map)

    def put(self, state: str, login: PendingLogin, now: datetime, owner: str = "") -> datetime:
        """Keep ``login`` pending for ``owner`` (``address_owner`` of the client): past ``per_owner`` of its
        own, the owner's oldest is dropped; QuotaExceeded when the table is full of unexpired logins."""
        mine = self._by_owner.setdefault(owner, deque())
        while mine and not self._map.has(mine[0], now):
            mine.popleft()  # taken or expired
        while len(mine) >= self._per_owner:
            self._map.pop(mine.popleft(), now)
        if self._map.full(now):
            raise QuotaExceeded("too many logins are in progress: try again in a few minutes")
        if len(self._by_owner) > self._map.capacity:
            self._by_owner = {o: q for o, q in self._by_owner.items() if any(self._map.has(t, now) for t in q)}
            mine = self._by_owner.setdefault(owner, mine)
        mine.append(state)
        return self._map.put(state, login, now)

    def take(self, state: str | None, now: datetime) -> PendingLogin | None:
        """The pending login of ``state``, removed so a replay finds nothing; None when unknown or expired."""
        if not state or len(state) > 256:
            return None
        return self._map.pop(state, now)

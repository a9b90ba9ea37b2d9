"""ConsoleState: the operator console's sessions and logins under way, one table for every head.

Guarantees: those of :mod:`mesh.console_sessions` (opaque ids kept as digests,
fixed TTLs, bounded counts, a pending login taken at most once, per-address
bounds), now for the whole deployment: a login completed at one head is a
session at every head, a logout at one ends it at all, and a callback may reach
another head than the one that began the login. In memory only: a restart of
this actor logs every operator out (they log in again); nothing from the
identity provider is ever held here.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import datetime

from mesh.console_sessions import ConsoleSession, ConsoleSessions, PendingLogin, PendingLogins


@dataclass(frozen=True, slots=True)
class ConsoleStateConfig:
    session_ttl_s: float = 8 * 3600.0
    max_sessions: int = 10_000
    state_ttl_s: float = 600.0
    max_pending_logins: int = 10_000


class ConsoleState:
    def __init__(self, config: ConsoleStateConfig) -> None:
        self.config = config
        self._sessions = ConsoleSessions(config.session_ttl_s, config.max_sessions)
        self._pending = PendingLogins(config.state_ttl_s, config.max_pending_logins)

    async def health(self) -> dict[str, int]:
        return {"console_sessions": len(self._sessions), "pending_logins": len(self._pending), "pid": os.getpid()}

    async def close(self) -> None:
        return None

    async def open_session(self, agent_id: str, subject: str, now: datetime) -> tuple[str, ConsoleSession]:
        return self._sessions.open(agent_id, subject, now, secrets.token_urlsafe(32))

    async def session(self, token: str | None, now: datetime) -> ConsoleSession | None:
        return self._sessions.get(token, now)

    async def drop_session(self, token: str | None, now: datetime) -> bool:
        return self._sessions.drop(token, now)

    async def sessions(self) -> int:
        return len(self._sessions)

    async def put_login(self, state: str, login: PendingLogin, now: datetime, owner: str) -> datetime:
        return self._pending.put(state, login, now, owner)

    async def take_login(self, state: str | None, now: datetime) -> PendingLogin | None:
        return self._pending.take(state, now)

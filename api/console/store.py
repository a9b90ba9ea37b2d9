"""The console's sessions and logins under way as a head sees them: in the deployment's ConsoleState actor.

Every head reads and writes the same table (:mod:`actors.console_state`), so a
load balancer in front of several heads needs no stickiness for ``/admin``. An
id that cannot be one (empty, or longer than 256 characters) is refused here,
without a round trip.
"""

from __future__ import annotations

from datetime import datetime

from mesh.console_sessions import ConsoleSession, PendingLogin
from mesh.seam import Directory

MAX_TOKEN = 256


class ConsoleStore:
    def __init__(self, directory: Directory) -> None:
        self._dir = directory

    async def open(self, agent_id: str, subject: str, now: datetime) -> tuple[str, ConsoleSession]:
        """A new session and its id (handed out once, in the cookie)."""
        return await self._dir.console_state().open_session(agent_id, subject, now)

    async def get(self, token: str | None, now: datetime) -> ConsoleSession | None:
        if not token or len(token) > MAX_TOKEN:
            return None
        return await self._dir.console_state().session(token, now)

    async def drop(self, token: str | None, now: datetime) -> bool:
        if not token or len(token) > MAX_TOKEN:
            return False
        return await self._dir.console_state().drop_session(token, now)

    async def count(self) -> int:
        return await self._dir.console_state().sessions()

    async def put_login(self, state: str, login: PendingLogin, now: datetime, owner: str) -> datetime:
        return await self._dir.console_state().put_login(state, login, now, owner)

    async def take_login(self, state: str | None, now: datetime) -> PendingLogin | None:
        if not state or len(state) > MAX_TOKEN:
            return None
        return await self._dir.console_state().take_login(state, now)

"""HeadRoster: the heads of a deployment, and credential changes that reach every head's cache before they return.

Guarantees (the rules are :class:`mesh.roster.Roster`'s):
- ``publish`` answers once every live head has acknowledged the change (its
  next poll after the change says so), or once a head that does not answer
  has stopped being live (``lease_s`` without a poll); a head fences its cache
  on the same lease, so no head serves a stale principal after ``publish``
  returns.
- ``poll`` answers at once when changes wait for the head, and otherwise after
  at most ``timeout_s``, so a head's lease is renewed well within ``lease_s``.
- Every answer to ``poll`` names this roster's life (a random id drawn at its
  start): a head answered by a new life drops its whole cache
  (``head.roster_link``), whatever the two lives' versions, so a roster
  restarted on a node whose clock is behind cannot leave a head trusting what
  the lost log would have told it to drop. Versions start at the start time in
  microseconds (a head of a former life is also behind the new log).
- A roster Ray restarted (``note_restart``, called by ``actors.ray_directory``)
  confirms no ``publish`` before one lease has passed since its start: a head
  of its former life that has not polled it yet may trust its cache until
  then, and the new roster cannot know of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from mesh.errors import Unavailable
from mesh.roster import Roster

MAX_POLL_S = 10.0


@dataclass(frozen=True, slots=True)
class HeadRosterConfig:
    lease_s: float = 3.0  # a head not heard from for this long is no longer waited for (and fences itself)
    max_log: int = 10_000


class HeadRoster:
    def __init__(self, config: HeadRosterConfig, restarted: bool = False, wall: Callable[[], float] = time.time) -> None:
        """``restarted``: this roster follows one that died (on Ray, ``note_restart`` says so after the start).
        ``wall``: the node's clock, read once for the first version."""
        self.config = config
        self.life = uuid.uuid4().hex
        self._quiet_until = 0.0
        if restarted:
            self.note_restart()
        self._roster = Roster(config.lease_s, config.max_log, version=int(wall() * 1_000_000))
        self._changed = asyncio.Condition()
        self._acked = asyncio.Condition()

    def note_restart(self) -> None:
        """This roster follows one that died: it confirms no change for one lease from now."""
        self._quiet_until = time.monotonic() + self.config.lease_s

    async def health(self) -> dict[str, int]:
        return {"heads": len(self._roster.live(time.monotonic())), "version": self._roster.version, "pid": os.getpid()}

    async def close(self) -> None:
        return None

    async def poll(self, head_id: str, seen: int, timeout_s: float) -> tuple[int, list[str], int, str]:
        """(the version the head is now at, the agent ids changed since ``seen``, live heads, this roster's life)."""
        deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_POLL_S)
        async with self._changed:
            while True:
                changes = self._roster.poll(head_id, seen, time.monotonic())
                async with self._acked:
                    self._acked.notify_all()
                if changes or seen < 0 or time.monotonic() >= deadline:  # a joining head hears back at once
                    break
                with contextlib.suppress(TimeoutError):  # asyncio.timeout, not wait_for: 3.11's can swallow a cancel
                    async with asyncio.timeout(deadline - time.monotonic()):
                        await self._changed.wait()
        return self._roster.version, changes, len(self._roster.live(time.monotonic())), self.life

    async def publish(self, agent_id: str, timeout_s: float, publisher: str = "") -> int:
        """Announce that ``agent_id``'s credential or status changed; answers when every live head has it.
        Returns how many heads it waited for. A head that neither acknowledges nor stops being live
        within ``timeout_s`` is Unavailable for the caller (it retries). ``publisher`` (the head that made
        the change, and already dropped it from its own cache) is not waited for."""
        async with self._changed:
            version = self._roster.publish(agent_id)
            self._changed.notify_all()
        quiet = self._quiet_until - time.monotonic()
        if quiet > 0:  # heads of the roster before this one may trust their caches for up to a lease
            await asyncio.sleep(min(quiet, timeout_s))
            if quiet > timeout_s:
                raise Unavailable("the head roster restarted less than a lease ago")

        def lagging() -> list[str]:
            return [h for h in self._roster.lagging(version, time.monotonic()) if h != publisher]

        waited = len(lagging())
        deadline = time.monotonic() + timeout_s
        async with self._acked:
            while lagging():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Unavailable(f"heads {lagging()} did not acknowledge a credential change")
                with contextlib.suppress(TimeoutError):  # wake on each acknowledgement, and every 100 ms (leases run out)
                    async with asyncio.timeout(min(remaining, 0.1)):
                        await self._acked.wait()
        return waited

    async def leave(self, head_id: str) -> int:
        """``head_id`` stops serving; the live heads left."""
        self._roster.leave(head_id)
        async with self._acked:
            self._acked.notify_all()
        return len(self._roster.live(time.monotonic()))

    async def heads(self) -> int:
        return len(self._roster.live(time.monotonic()))

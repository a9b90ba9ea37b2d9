"""This head's link to the deployment's HeadRoster: credential changes made at other heads, and its fence.

Guarantees:
- ``fresh()`` is true only until ``lease_s`` after this head *sent* its last
  poll that the roster answered. The roster stops waiting for a head it has
  not heard from for ``lease_s``, so a head that lost the roster stops
  trusting its principal cache before any publisher stops waiting for it.
  While not fresh, the identity service asks the registry on every request.
- Changes another head published are applied (``on_change``) before the next
  poll acknowledges them, so when ``publish`` at that head returns, this head
  already refuses the old key and has woken the agent's open streams.
- ``publish`` answers once every live head has the change. A roster that does
  not answer is retried until ``lease_s`` has passed with no answer: by then
  every head has fenced itself, so returning is safe.
- ``heads`` is the number of live heads the roster last reported (at least 1).
- A roster answering from a new life (it restarted and lost its log) counts
  as ``[EVERYTHING]`` changed: the head drops its whole cache before it
  acknowledges, whatever the versions say.
- ``on_rejoin`` runs before the head trusts anything again after its first
  answered poll and after every lapse of its lease (changes published
  meanwhile may never have reached the roster's log): what it cached on trust
  is dropped there.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import Callable

from mesh.errors import MemeshError
from mesh.roster import EVERYTHING
from mesh.seam import HeadRosterActor

log = logging.getLogger(__name__)


class RosterLink:
    def __init__(
        self,
        roster: Callable[[], HeadRosterActor],
        on_change: Callable[[list[str]], object],
        lease_s: float = 3.0,
        poll_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        on_rejoin: Callable[[], None] | None = None,
    ) -> None:
        if poll_s >= lease_s:
            raise ValueError("poll_s must be shorter than lease_s")
        self.head_id = uuid.uuid4().hex
        self.heads = 1
        self._roster = roster
        self._on_change = on_change
        self._on_rejoin = on_rejoin
        self._lease_s = lease_s
        self._poll_s = poll_s
        self._monotonic = monotonic
        self._fresh_until = -1.0
        self._seen = -1
        self._life: str | None = None  # the roster life that answered last
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._polled = asyncio.Event()

    def fresh(self) -> bool:
        return self._monotonic() < self._fresh_until

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="head roster poll")

    async def joined(self, timeout_s: float = 10.0) -> None:
        """Return once the first poll has been answered (or after ``timeout_s``; the head then starts fenced)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._polled.wait()

    async def _run(self) -> None:
        while not self._closing:  # not only the cancel: Python 3.11's wait_for can swallow one (a poll answered as it came)
            sent = self._monotonic()
            try:
                version, changes, heads, life = await self._roster().poll(self.head_id, self._seen, self._poll_s)
            except MemeshError:
                log.warning("the head roster did not answer; principal cache off until it does", exc_info=True)
                await asyncio.sleep(min(0.2, self._poll_s))
                continue
            if self._life is not None and life != self._life:  # what the lost log held never reaches this head
                changes = [EVERYTHING, *changes]
            if changes:
                applied = self._on_change(changes)
                if inspect.isawaitable(applied):  # acknowledged (the next poll) only once applied
                    await applied
            if not self.fresh() and self._on_rejoin is not None:  # joined, or back after a lapse
                self._on_rejoin()
            self._seen, self._life, self.heads = version, life, max(1, heads)
            self._fresh_until = sent + self._lease_s
            self._polled.set()

    async def publish(self, agent_id: str) -> None:
        deadline = self._monotonic() + self._lease_s
        while True:
            try:
                await self._roster().publish(agent_id, self._lease_s + self._poll_s, self.head_id)
                return
            except MemeshError:
                if self._monotonic() > deadline:
                    log.warning("a credential change was not confirmed by every head; every head has fenced by now")
                    return
                await asyncio.sleep(0.05)

    async def close(self) -> int:
        """Leave the roster; the live heads left (0 when the roster does not answer: this head acts as the last)."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # its end, not its CancelledError (a cancel of close itself still raises)
            self._task = None
        try:
            async with asyncio.timeout(5.0):
                return await self._roster().leave(self.head_id)
        except (MemeshError, TimeoutError):
            return 0

"""The heads of one deployment and the credential changes every one of them must hear before a change returns.

Several head processes serve a deployment, each with its own principal cache
(:mod:`head.identity_service`). A revoke, rotate or suspend at one head must
fail the old key at *every* head on the very next request. :class:`Roster` is
the bookkeeping that makes that a guarantee (the ``HeadRoster`` actor holds it):

- A head ``poll``\\ s in a loop (a long poll), passing the last version it has
  applied; that is its acknowledgement. It is *live* while its last poll is at
  most ``lease_s`` old.
- ``publish(agent_id)`` appends a change and returns its version; the
  publisher then waits until :meth:`Roster.lagging` is empty: every live head
  has acknowledged that version, or has stopped polling for ``lease_s`` and so
  is no longer live.
- A head fences itself: it trusts its cache only until ``lease_s`` after it
  *sent* its last answered poll (the roster received that poll later, so the
  head stops trusting its cache before the roster can count it dead). A head
  that loses the roster asks the registry on every request until it is back.
- Changes are kept in a bounded log; a head whose version is older than the
  log's start is told to drop its whole cache (``EVERYTHING``).

Pure state: time is a parameter of every call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

EVERYTHING = "*"  # a change that stands for "drop every cached principal"


@dataclass(slots=True)
class _Head:
    acked: int
    seen_at: float  # when its last poll arrived


@dataclass(slots=True)
class Roster:
    lease_s: float = 3.0
    max_log: int = 10_000
    version: int = 0
    _log: deque[tuple[int, str]] = field(default_factory=deque)
    _heads: dict[str, _Head] = field(default_factory=dict)

    def poll(self, head_id: str, seen: int, now: float) -> list[str]:
        """Record ``head_id``'s acknowledgement of ``seen`` (a newcomer joins with it); the agent ids
        changed after ``seen`` (``[EVERYTHING]`` when the log no longer reaches back to it). A ``seen``
        below 0 joins at the current version (a new head has nothing cached)."""
        if seen < 0:
            seen = self.version
        head = self._heads.get(head_id)
        if head is None:
            head = self._heads[head_id] = _Head(seen, now)
        head.acked, head.seen_at = max(head.acked, min(seen, self.version)), now
        if seen >= self.version:
            return []
        if seen < self.version - len(self._log):
            return [EVERYTHING]
        return list(dict.fromkeys(agent for v, agent in self._log if v > seen))

    def publish(self, agent_id: str) -> int:
        self.version += 1
        self._log.append((self.version, agent_id))
        while len(self._log) > self.max_log:
            self._log.popleft()
        return self.version

    def lagging(self, version: int, now: float) -> list[str]:
        """Live heads that have not acknowledged ``version`` yet (the publisher waits for none)."""
        return sorted(h for h, head in self._heads.items() if head.acked < version and now - head.seen_at <= self.lease_s)

    def leave(self, head_id: str) -> None:
        self._heads.pop(head_id, None)

    def live(self, now: float) -> list[str]:
        """Heads whose last poll is at most ``lease_s`` old (dead ones are forgotten)."""
        for head_id in [h for h, head in self._heads.items() if now - head.seen_at > self.lease_s]:
            del self._heads[head_id]
        return sorted(self._heads)

"""Observatory: a bounded ring buffer of content-free hop events.

Guarantees:
- At most ``max_events`` events, none older than ``max_age_s``; the oldest
  are evicted first.
- Events are never content: the walk hands over ids, energies and outcomes only.
- Recording is fire-and-forget for the walk; a saturated channel drops events
  and the drops are counted (``dropped``), never queued without bound.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ObservatoryConfig:
    max_events: int = 50_000
    max_age_s: float = 600.0


class Observatory:
    def __init__(self, config: ObservatoryConfig) -> None:
        self.config = config
        self._events: deque[dict[str, Any]] = deque(maxlen=config.max_events)
        self.recorded = 0
        self.dropped = 0

    def _age_out(self, now: float) -> None:
        horizon = now - self.config.max_age_s
        while self._events and self._events[0]["_t"] < horizon:
            self._events.popleft()

    async def record(self, events: list[dict[str, Any]], dropped_before: int = 0) -> None:
        now = time.time()
        self.dropped += dropped_before
        for event in events:
            self._events.append({**event, "_t": now})
        self.recorded += len(events)
        self._age_out(now)

    async def snapshot(self, since: float | None, limit: int, tenant_id: str | None) -> list[dict[str, Any]]:
        """Up to ``limit`` retained events newer than ``since``, oldest first (newest last), optionally of one tenant."""
        self._age_out(time.time())
        chosen = [
            {k: v for k, v in e.items() if k != "_t"}
            for e in self._events
            if (since is None or e["_t"] > since) and (tenant_id is None or e["tenant_id"] == tenant_id)
        ]
        return chosen[-limit:] if limit > 0 else []

    async def stats(self) -> dict[str, int]:
        return {"recorded": self.recorded, "dropped": self.dropped, "depth": len(self._events)}

    async def health(self) -> dict[str, int]:
        return {"events": len(self._events), "pid": os.getpid()}

    async def close(self) -> None:
        return None

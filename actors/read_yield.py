"""Walks yield to reads: how long a scene shard's wave waits between two of its parts.

A scene shard answers both the readers' searches and the walks' waves on one
event loop, and a backlog of walks (a burst of writes) keeps it and the
processes the waves go through busy on every core. A wave is answered in parts
(``actors.scene_shard.NEIGHBOUR_PART`` walks each), and between two parts it
waits: a turn of the loop when no one reads, ``pause_s`` when the shard
answered a search within ``window_s``. The pauses leave a core free for the
reader's next search and for the processes a recall goes through.

Guarantees:
- Nothing changes what a wave answers: only when its parts are computed (each
  walk's answer is still read from one state of the partition).
- Bounded: a wave of ``n`` walks waits at most ``ceil(n / part) * pause_s`` in
  all, however many reads come, so walks slow while reads go on and never stop.
- ``pause_s`` 0 turns it off (a turn of the loop between parts, as before).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class ReadYield:
    def __init__(self, pause_s: float, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.pause_s, self.window_s = pause_s, window_s
        self._clock = clock
        self._last_read = -math.inf
        self.pauses = 0  # pauses waves took (``memesh_walk_read_pauses_total``)

    def read(self) -> None:
        """A search was answered now."""
        self._last_read = self._clock()

    def pause(self) -> float:
        """Seconds a wave waits before its next part: ``pause_s`` while reads are recent, else 0."""
        if self.pause_s > 0 and self._clock() - self._last_read < self.window_s:
            self.pauses += 1
            return self.pause_s
        return 0.0

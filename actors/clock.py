"""The clock and random source the core receives as parameters."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime

from mesh.ids import MonotonicUuid7

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class IdSource:
    """UUIDv7 ids from a clock and ``os.urandom``, strictly increasing within this process."""

    def __init__(self, clock: Clock = utc_now, random: Callable[[int], bytes] = os.urandom) -> None:
        self._clock = clock
        self._random = random
        self._ids = MonotonicUuid7()

    def new(self) -> str:
        return self._ids.next_id(int(self._clock().timestamp() * 1000), self._random(10))

    def many(self, n: int) -> list[str]:
        return [self.new() for _ in range(n)]

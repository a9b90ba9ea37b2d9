"""Identifiers: UUIDv7 (RFC 9562), so that id order follows creation order.

Keyset pagination orders by id, so ids must sort in the order they were made.
:class:`MonotonicUuid7` guarantees that within one process, also for ids made
in the same millisecond: the 12-bit ``rand_a`` field is a counter (RFC 9562
section 6.2, method 1), re-seeded each new millisecond, and a counter overflow
borrows the next millisecond. The clock and random bits are parameters.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

_COUNTER_MAX = 0xFFF

Clock = Callable[[], datetime]
"""The wall clock a caller passes in (a runtime reads the real one; tests pass a fixed one)."""


def uuid7(unix_ms: int, random_bytes: bytes, counter: int | None = None) -> str:
    """A UUIDv7 string from a millisecond timestamp, 10 random bytes, and an optional 12-bit counter."""
    if len(random_bytes) < 10:
        raise ValueError("uuid7 needs 10 random bytes")
    rand = int.from_bytes(random_bytes[:10], "big")
    rand_a = ((rand >> 68) & _COUNTER_MAX) if counter is None else (counter & _COUNTER_MAX)
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= rand_a << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


class MonotonicUuid7:
    """Strictly increasing UUIDv7 strings from ``next_id(unix_ms, random_bytes)``."""

    def __init__(self) -> None:
        self._last_ms = -1
        self._counter = 0

    def next_id(self, unix_ms: int, random_bytes: bytes) -> str:
        if unix_ms > self._last_ms:
            self._last_ms = unix_ms
            self._counter = random_bytes[0] & 0x7F  # a random start leaves room to count up
        else:
            self._counter += 1
            if self._counter > _COUNTER_MAX:
                self._last_ms += 1
                self._counter = 0
        return uuid7(self._last_ms, random_bytes, self._counter)


def is_uuid(value: str) -> bool:
    """True when ``value`` is a canonical UUID string (any version)."""
    try:
        return str(uuid.UUID(value)) == value.lower()
    except (ValueError, AttributeError, TypeError):
        return False


class IdSource:
    """UUIDv7 ids from the given clock and random source, strictly increasing within this process."""

    def __init__(self, clock: Clock, random: Callable[[int], bytes]) -> None:
        self._clock = clock
        self._random = random
        self._ids = MonotonicUuid7()

    def new(self) -> str:
        return self._ids.next_id(int(self._clock().timestamp() * 1000), self._random(10))

    def many(self, n: int) -> list[str]:
        return [self.new() for _ in range(n)]

"""Identifiers: UUIDv7 (RFC 9562), so that id order follows creation order.

Keyset pagination orders by id, so ids must sort in the order they were made.
:class:`MonotonicUuid7` guarantees that within one process, also for ids made
in the same millisecond: the 12-bit ``rand_a`` field is a counter (RFC 9562
section 6.2, method 1), re-seeded each new millisecond, and a counter overflow
borrows the next millisecond. The clock and random bits are parameters.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime

from mesh.errors import ValidationFailed

_COUNTER_MAX = 0xFFF


NAME_EXCLUDED = (
    r"\u0000-\u001f\u007f-\u00a0\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u1680\u180e"
    r"\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u3000\ue000-\uf8ff\ufeff\ufff9-\ufffb"
)
"""The characters no project or tenant id may hold, as the body of a regular-expression class that Python,
ECMA-262 (the dialect OpenAPI names) and the Rust engine of jsonschema-rs read alike: the Basic Multilingual
Plane's controls, format characters, separators other than the space and private-use characters, which is
what ``str.isprintable`` refuses there less the unassigned code points (a list that moves with each Unicode
version). Characters beyond that plane are taken. The /v1 document states this class as the ids' ``pattern``,
so that an id the document calls valid is one the service takes; ``tests/unit/test_ids.py`` checks it against
``str.isprintable``. A lone surrogate (a JSON escape only: no UTF-8 text holds one) is refused as well, outside
the class, which no engine but Python's could read with surrogates in it (schemathesis dropped the pattern)."""
_NAME = re.compile(f"[^{NAME_EXCLUDED}]*")
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_name(value: object, max_chars: int) -> bool:
    """Whether ``value`` is 1 to ``max_chars`` characters, none of them in :data:`NAME_EXCLUDED` (what a
    project or tenant id is, and what a filter may name)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= max_chars
        and _NAME.fullmatch(value) is not None
        and _SURROGATE.search(value) is None
    )


def is_new_name(value: object, max_chars: int) -> bool:
    """Whether ``value`` may name a new project or tenant: :func:`is_name`, neither blank nor with a space at
    either end (``" "`` and ``"p "`` would be projects that look like none, or like ``p``). Names already
    stored are read as they are; this holds only what is made from now on."""
    return is_name(value, max_chars) and isinstance(value, str) and value == value.strip()


def check_project(project: str, max_chars: int, new: bool = False) -> None:
    """ValidationFailed unless ``project`` :func:`is_name` (what a filter may name); one that writes or opens a
    session (``new``) is also held to :func:`is_new_name`."""
    if not is_name(project, max_chars):
        raise ValidationFailed(f"project_id must be 1 to {max_chars} printable characters")
    if new and not is_new_name(project, max_chars):
        raise ValidationFailed("project_id must not be blank nor begin or end with a space")


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

"""Identifiers: UUIDv7 (RFC 9562), so that id order follows creation time.

Keyset pagination orders by id; with v7 ids that order is creation order.
The clock and the random bits are parameters, as everywhere in the core.
"""

from __future__ import annotations

import uuid


def uuid7(unix_ms: int, random_bytes: bytes) -> str:
    """A UUIDv7 string from a millisecond timestamp and at least 10 random bytes."""
    if len(random_bytes) < 10:
        raise ValueError("uuid7 needs 10 random bytes")
    rand = int.from_bytes(random_bytes[:10], "big")
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 68) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def is_uuid(value: str) -> bool:
    """True when ``value`` is a canonical UUID string (any version)."""
    try:
        return str(uuid.UUID(value)) == value.lower()
    except (ValueError, AttributeError, TypeError):
        return False

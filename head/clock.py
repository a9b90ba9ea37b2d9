"""The head's wall clock and id source: the one place the head reads real time and randomness."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from mesh.ids import Clock, IdSource


def utc_now() -> datetime:
    return datetime.now(UTC)


def system_ids(clock: Clock = utc_now) -> IdSource:
    """UUIDv7 ids from ``clock`` and ``os.urandom``."""
    return IdSource(clock, os.urandom)

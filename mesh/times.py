"""The one way memesh writes a time on the wire and in audit rows: RFC 3339, UTC, with a ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(ts: datetime) -> str:
    """``ts`` as RFC 3339 in UTC with a ``Z`` suffix (a naive ``ts`` is taken as UTC)."""
    aware = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
    return aware.isoformat().replace("+00:00", "Z")

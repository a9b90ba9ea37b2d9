"""The one way memesh writes a time on the wire and in audit rows: RFC 3339, UTC, with a ``Z``; and the one way
it reads one a client sent."""

from __future__ import annotations

import re
from datetime import UTC, datetime

# RFC 3339 date-time: a date, "T" (or "t" / a space), a time, an optional fraction, and "Z" or a numeric offset.
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+\-]\d{2}:\d{2})", re.ASCII)


def rfc3339(ts: datetime) -> str:
    """``ts`` as RFC 3339 in UTC with a ``Z`` suffix (a naive ``ts`` is taken as UTC)."""
    aware = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
    return aware.isoformat().replace("+00:00", "Z")


def parse_rfc3339(value: str) -> datetime:
    """The aware time an RFC 3339 date-time names (finer than microseconds truncated); ValueError for anything
    else: a date alone, no offset, a number, an impossible date."""
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ValueError("not an RFC 3339 date-time such as 2026-01-02T03:04:05Z")
    date, clock, fraction, offset = match.groups()
    if offset in ("Z", "z"):
        offset = "+00:00"
    return datetime.fromisoformat(f"{date}T{clock}{(fraction or '')[:7]}{offset}")

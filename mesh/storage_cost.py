"""What one stored record counts against its tenant's ``max_bytes`` quota.

The head reserves this size before a write and the actors that hold the
records count the same size, so both sides agree on a tenant's usage. Guarantees:
:func:`stored_bytes` depends only on the text and the vector width (UTF-8
length, four bytes per dimension, plus :data:`RECORD_OVERHEAD`), never on
where or when the record is stored.
"""

from __future__ import annotations

RECORD_OVERHEAD = 256  # bytes a stored record costs beyond its text and vector (ids, times, columns)


def stored_bytes(text: str, dims: int) -> int:
    """What one stored cell or beacon counts against its tenant's ``max_bytes`` quota."""
    return len(text.encode("utf-8", "surrogatepass")) + 4 * dims + RECORD_OVERHEAD

"""What the observatory holds and hands out: content-free hop events, numbered in arrival order."""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]
"""One hop event as the walk recorded it (ids, energies, outcome; never content)."""

Numbered = tuple[int, Event]
"""An event with its observatory sequence number."""

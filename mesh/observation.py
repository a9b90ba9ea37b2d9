"""What the observatory holds and hands out: content-free hop events, numbered in arrival order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from mesh.walk import HopEvent

Event = dict[str, Any]
"""One hop event as the walk recorded it (ids, energies, outcome; never content)."""

Numbered = tuple[int, Event]
"""An event with its observatory sequence number."""


class WalkTrace(NamedTuple):
    """One walk's hop events as the walk hands them over: what all of them share, once, and the events as
    the walk decided them. The observatory makes each event's fields from it (:func:`trace_event`) only
    when someone reads the event, so a walk pays for no per-event dictionary."""

    diff_id: str
    tenant_id: str
    origin_agent: str
    walk_layer: int
    salience: float
    ts: str
    hops: Sequence[HopEvent]


def trace_event(trace: WalkTrace, index: int) -> Event:
    """The ``index``-th event of ``trace`` with the fields docs/observatory.md lists (energies and relevance
    to 6 decimals, standing to 4)."""
    e = trace.hops[index]
    return {
        "diff_id": trace.diff_id,
        "from_node": e.from_node,
        "to_node": e.to_node,
        "hop_index": e.hop_index,
        "energy_before": round(e.energy_before, 6),
        "energy_after": round(e.energy_after, 6),
        "walk_layer": trace.walk_layer,
        "outcome": e.outcome.value,
        "relevance": round(e.relevance, 6),
        "standing": None if e.standing is None else round(e.standing, 4),
        "criterion": None if e.criterion is None else e.criterion.value,
        "salience": trace.salience,
        "ts": trace.ts,
        "tenant_id": trace.tenant_id,
        "origin_agent": trace.origin_agent,
    }

"""What the observatory holds and hands out: content-free hop events, numbered in arrival order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, overload

from mesh.walk import Criterion, HopEvent, Outcome

Event = dict[str, Any]
"""One hop event as the walk recorded it (ids, energies, outcome; never content)."""

Numbered = tuple[int, Event]
"""An event with its observatory sequence number."""


_OUTCOMES = tuple(Outcome)
_CRITERIA = (None, *Criterion)
_OUTCOME_CODE = {outcome: n for n, outcome in enumerate(_OUTCOMES)}
_CRITERION_CODE = {criterion: n for n, criterion in enumerate(_CRITERIA)}
_FIELDS = len(HopEvent._fields)


class PackedHops(Sequence[HopEvent]):
    """A walk's hop events as columns: one tuple a field, the outcome and criterion as small ints.

    Guarantees: ``PackedHops.of(events)`` reads back (by index, iteration, pickling) as events equal to
    ``events``, in order. It pickles as plain tuples of str, int, float and None, which the C pickler
    writes without a call back into Python per object; a list of ``HopEvent`` (a named tuple of enums)
    cost a walker about a fifth of its CPU to pickle through Ray's cloudpickle, and the observatory as
    much again to unpickle. An event object is made only when one is read.
    """

    __slots__ = ("_columns",)

    def __init__(self, columns: tuple[tuple[Any, ...], ...]) -> None:
        self._columns = columns

    @classmethod
    def of(cls, events: Sequence[HopEvent]) -> PackedHops:
        if not events:
            return cls(((),) * _FIELDS)
        columns = list(zip(*events, strict=True))
        columns[5] = tuple([_OUTCOME_CODE[o] for o in columns[5]])
        columns[8] = tuple([_CRITERION_CODE[c] for c in columns[8]])
        return cls(tuple(columns))

    def __len__(self) -> int:
        return len(self._columns[1])

    @overload
    def __getitem__(self, index: int) -> HopEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[HopEvent]: ...

    def __getitem__(self, index: int | slice) -> HopEvent | list[HopEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        f, t, h, before, after, outcome, relevance, standing, criterion = (column[index] for column in self._columns)
        return HopEvent(f, t, h, before, after, _OUTCOMES[outcome], relevance, standing, _CRITERIA[criterion])

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedHops, (self._columns,))


class WalkTrace(NamedTuple):
    """One walk's hop events as the walk hands them over: what all of them share, once, and the events as
    the walk decided them (a walk hands them over as :class:`PackedHops`). The observatory makes each
    event's fields from it (:func:`trace_event`) only when someone reads the event, so a walk pays for no
    per-event dictionary."""

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

"""Observatory: a bounded ring buffer of content-free hop events, with a long-poll.

Guarantees:
- At most ``max_events`` events, none older than ``max_age_s``; the oldest
  are evicted first.
- Events are never content: the walk hands over ids, energies and outcomes
  only, and they are stored and returned with exactly the fields it gave.
  A walk hands them over packed (``record_walks``: one ``WalkTrace`` a walk),
  and an event's fields are made from its trace only when it is read.
- Every event gets a sequence number, one more than the previous event's. The
  sequence starts at the actor's start time in microseconds, so a restarted
  actor (empty buffer) continues above where the old one stopped unless the
  old one recorded more than one event per microsecond of its life.
- Every event gets a receive stamp, the one ``since`` is compared with. It is
  never earlier than the event's own ``ts`` nor than an earlier event's
  stamp, so ``since=<ts of the last event seen>`` (``>=``) never skips a
  later event; it may repeat events that share that stamp.
- Recording is fire-and-forget for the walk; a saturated recording channel
  drops events and the walk reports them (``dropped``), never queued without
  bound.
- ``events_after`` answers at once when there are newer events and otherwise
  waits at most ``min(timeout_s, MAX_WAIT_S)``.
- ``forget`` (erasure) removes every event of the given diffs; the sequence
  numbers of the others do not change, and a forgotten event is not reported
  as evicted (a reader does not resync for it).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, NamedTuple

from mesh.observation import Event, Numbered, WalkTrace, trace_event

MAX_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class ObservatoryConfig:
    max_events: int = 50_000
    max_age_s: float = 600.0


class _Entry(NamedTuple):
    seq: int
    stamp: float  # receive time (epoch seconds), what ``since`` is compared with
    source: Event | WalkTrace  # the event as given, or the trace it is made from
    hop: int = 0  # in a trace: which of its events

    @property
    def event(self) -> Event:
        return trace_event(self.source, self.hop) if isinstance(self.source, WalkTrace) else self.source

    @property
    def tenant_id(self) -> Any:
        return self.source.tenant_id if isinstance(self.source, WalkTrace) else self.source.get("tenant_id")

    @property
    def diff_id(self) -> Any:
        return self.source.diff_id if isinstance(self.source, WalkTrace) else self.source.get("diff_id")


def _latest_ts(stamps: set[Any]) -> float:
    """The latest of a batch's ``ts`` as epoch seconds (0 when none parses)."""
    latest = 0.0
    for ts in stamps:
        if isinstance(ts, str):
            with contextlib.suppress(ValueError):
                latest = max(latest, datetime.fromisoformat(ts).timestamp())
    return latest


class Observatory:
    def __init__(self, config: ObservatoryConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._entries: deque[_Entry] = deque()
        self._seq = int(clock() * 1_000_000)  # the newest sequence number given out
        self._evicted_through = self._seq  # the newest sequence number evicted (by age or count)
        self._last_stamp = 0.0
        self._changed: asyncio.Event | None = None
        self.recorded = 0
        self.dropped = 0  # reported by the walks: their recording channel was saturated

    def _age_out(self, now: float) -> None:
        horizon = now - self.config.max_age_s
        while self._entries and self._entries[0].stamp < horizon:
            self._evicted_through = self._entries.popleft().seq

    def _evicted_before(self) -> int:
        """Every event up to this sequence number that was not forgotten was evicted unread by anyone still behind."""
        return self._evicted_through

    def _from(self, after_seq: int) -> int:
        """The buffer index of the first event newer than ``after_seq``."""
        return bisect.bisect_right(self._entries, after_seq, key=lambda entry: entry.seq)

    async def record(self, events: list[Event], dropped_before: int = 0) -> None:
        """Keep ``events`` as given (each one's own copy), in order."""
        self._keep([(dict(event), 0) for event in events], {e.get("ts") for e in events}, dropped_before)

    async def record_walks(self, traces: list[WalkTrace], dropped_before: int = 0) -> None:
        """Keep every event of ``traces``, walk by walk, each in the order its walk decided them: what ``record``
        of their fields (``mesh.observation.trace_event``) would keep."""
        sources = [(trace, i) for trace in traces for i in range(len(trace.hops))]
        self._keep(sources, {trace.ts for trace in traces if trace.hops}, dropped_before)

    def _keep(self, sources: Sequence[tuple[Event | WalkTrace, int]], stamps: set[Any], dropped_before: int) -> None:
        now = self._clock()
        self.dropped += dropped_before
        if sources:
            stamp = self._last_stamp = max(now, self._last_stamp, _latest_ts(stamps))
            for source, hop in sources:
                self._seq += 1
                self._entries.append(_Entry(self._seq, stamp, source, hop))
            while len(self._entries) > self.config.max_events:
                self._evicted_through = self._entries.popleft().seq
            self.recorded += len(sources)
            if self._changed is not None:
                self._changed.set()
                self._changed = None
        self._age_out(now)

    async def events_after(self, after_seq: int, limit: int, timeout_s: float) -> tuple[list[Numbered], int, int]:
        """Up to ``limit`` events newer than ``after_seq``, oldest first, as ``(seq, event)``.

        Returns ``(events, top_seq, evicted_before)``: ``top_seq`` is the newest
        sequence number given out, and a caller whose ``after_seq`` is below
        ``evicted_before`` has missed the events in between for good. With no
        newer event it waits up to ``timeout_s`` (at most ``MAX_WAIT_S``) for
        one; ``limit`` 0 answers at once with the two figures only.
        """
        wait = min(max(0.0, timeout_s), MAX_WAIT_S)
        if limit > 0 and wait > 0 and self._seq <= after_seq:
            if self._changed is None:
                self._changed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._changed.wait()
        self._age_out(self._clock())
        start = self._from(after_seq)
        chosen = [(e.seq, e.event) for e in islice(self._entries, start, start + max(0, limit))]
        return chosen, self._seq, self._evicted_before()

    async def replay_page(
        self, after_seq: int, upto: int, limit: int, since: float | None, tenant_id: str | None
    ) -> tuple[list[Numbered], int]:
        """Retained events with ``after_seq < seq <= upto``, received at or after ``since``, of one tenant or all.

        Returns up to ``limit`` of them, oldest first, and the sequence number
        the buffer was examined through: the next page starts after it, and the
        window is done when it reaches ``upto``.
        """
        self._age_out(self._clock())
        chosen: list[Numbered] = []
        for entry in islice(self._entries, self._from(after_seq), None):
            if entry.seq > upto:
                break
            if (since is None or entry.stamp >= since) and (tenant_id is None or entry.tenant_id == tenant_id):
                chosen.append((entry.seq, entry.event))
                if len(chosen) >= limit:
                    return chosen, entry.seq
        return chosen, max(upto, after_seq)

    async def snapshot(self, since: float | None, limit: int, tenant_id: str | None) -> list[Event]:
        """The newest ``limit`` retained events received at or after ``since``, of one tenant or all; newest last."""
        self._age_out(self._clock())
        chosen: list[Event] = []
        for entry in reversed(self._entries):
            if len(chosen) >= limit or (since is not None and entry.stamp < since):
                break  # stamps never decrease along the buffer
            if tenant_id is None or entry.tenant_id == tenant_id:
                chosen.append(entry.event)
        chosen.reverse()
        return chosen

    async def forget(self, diff_ids: list[str]) -> int:
        """Drop every retained event of these diffs (erasure); returns how many. Idempotent."""
        gone = set(diff_ids)
        kept = deque(entry for entry in self._entries if entry.diff_id not in gone)
        removed = len(self._entries) - len(kept)
        self._entries = kept
        return removed

    async def stats(self) -> dict[str, int]:
        self._age_out(self._clock())
        return {"recorded": self.recorded, "dropped": self.dropped, "depth": len(self._entries), "top_seq": self._seq}

    async def health(self) -> dict[str, int]:
        return {"events": len(self._entries), "pid": os.getpid()}

    async def close(self) -> None:
        return None

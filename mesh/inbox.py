"""An agent's inbox and the pull rules of spec sections 3 and 4.

Guarantees of :class:`AgentInbox`:
- ``delivery_seq`` is 1, 2, 3, ... per agent, assigned at enqueue; a delivery
  id seen before is not enqueued again (walk replays are idempotent).
- Only the committed prefix (``committed``) is ever visible to a pull.
- The cursor (acknowledged watermark) only moves forward.

Pull, in order:
1. ``ack`` above the cursor moves it to ``min(ack, served)``, where ``served``
   is the highest ``window_high`` a pull (or the stream) has handed out: what
   "the next call may acknowledge" (spec rule 6), so no ack reaches a delivery
   the agent was never shown. It is applied before the page is read. ``ack``
   at or below the cursor is a no-op. After a restart ``served`` is the
   committed top (what was stored before may have been seen).
2. The floor is ``since`` when given, else the cursor (strictly greater than).
3. The window is the next ``limit`` commit-stable deliveries above the floor
   (``limit`` 0 or absent means ``max_batch``; larger is clamped to it).
4. Items are the window's deliveries inside the caller's read scope, ordered
   by score (highest first, then sequence): display order only.
5. ``window_high`` is the last sequence of the window (the floor, capped at
   ``committed``, when the window is empty); ``has_more`` says a commit-stable
   delivery exists above it; ``window_low`` is its first sequence (0 when
   empty), so a window starting past ``floor + 1`` shows deliveries that left
   (retention, erasure). All describe the window, not the items.

Budget (:meth:`AgentInbox.enqueue_within`): a reached node (beacon or agent
node) gets at most ``limit`` deliveries per budget window among those that
merely stand out for it, and at most ``close_limit`` among close matches (the
two are counted apart, so a flood of inferred matches never crowds out a
direct hit, and direct hits are bounded too). When a new one finds its count
full, it displaces the lowest-scored delivery of that node, window and count
that the agent has not been served yet (committed, above the cursor and above
every window a pull or the stream has handed out), if it scores higher;
otherwise it is withheld. Either way the loser is counted, and every served
item of that node and window carries the count (``withheld``): nothing is
dropped silently, and what the agent has seen is never taken back. An agent
that pulls now and then gets the best of what arrived between its pulls; one
that streams gets the first that passed the walk's match rule.

Retention (:meth:`AgentInbox.trim`): acknowledged deliveries older than a
configured age leave the inbox, and past a cap the oldest deliveries leave
it, acknowledged first. Sequences, the cursor and ``committed`` never change,
so a page simply starts at the oldest delivery still held.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    seq: int
    delivery_id: str
    diff_id: str
    project_id: str
    score: float
    members: str  # the SeqInboxItem without its sequence (mesh.inbox_wire.item_members)
    delivered_at: float = 0.0  # epoch seconds; what the retention age is measured from

    @property
    def node_id(self) -> str:
        """The reached node (a delivery id is ``<diff id>:<node id>``)."""
        return self.delivery_id.partition(":")[2]


@dataclass(frozen=True, slots=True)
class Budget:
    """Per reached node and ``window_s`` seconds: at most ``limit`` deliveries that stand out for it and
    ``close_limit`` close matches (settings ``propagation``)."""

    limit: int = 4
    window_s: float = 3600.0
    close_limit: int = 32

    def of(self, close: bool) -> int:
        return self.close_limit if close else self.limit

    def window(self, delivered_at: float) -> int:
        return int(delivered_at // self.window_s)


MAX_WITHHELD_IDS = 4_096  # per node and window: what makes a replayed loser stay out


@dataclass(frozen=True, slots=True)
class PullPage:
    items: list[StoredDelivery]
    cursor: int
    window_high: int
    has_more: bool
    cursor_moved: bool
    window_low: int = 0  # the window's first sequence, read scope aside (0 when empty)


def effective_limit(limit: int | None, max_batch: int) -> int:
    """``limit`` 0 or absent selects ``max_batch``; a larger value is clamped down to it."""
    if not limit:
        return max_batch
    return min(limit, max_batch)


@dataclass(slots=True)
class AgentInbox:
    last_seq: int = 0
    committed: int = 0
    cursor: int = 0
    deliveries: list[StoredDelivery] = field(default_factory=list)
    _seqs: list[int] = field(default_factory=list)
    _ids: set[str] = field(default_factory=set)
    served: int = 0  # the highest window_high a pull (or the stream) has handed out: what an ack may reach
    _kept: dict[tuple[str, int, bool], list[StoredDelivery]] = field(default_factory=dict)
    _withheld: dict[tuple[str, int, bool], set[str]] = field(default_factory=dict)
    _latest_window: int = 0

    def has(self, delivery_id: str) -> bool:
        return delivery_id in self._ids

    def enqueue(
        self, delivery_id: str, diff_id: str, project_id: str, score: float, members: str, delivered_at: float = 0.0
    ) -> StoredDelivery | None:
        """Assign the next sequence; None when this delivery id is already here."""
        if delivery_id in self._ids:
            return None
        self.last_seq += 1
        stored = StoredDelivery(self.last_seq, delivery_id, diff_id, project_id, score, members, delivered_at)
        self._append(stored)
        return stored

    def enqueue_within(
        self,
        budget: Budget,
        delivery_id: str,
        diff_id: str,
        project_id: str,
        score: float,
        members: str,
        delivered_at: float,
        close: bool = False,
    ) -> tuple[StoredDelivery | None, StoredDelivery | None]:
        """``enqueue`` under the node budget (``close``: counted as a close match): (the stored delivery or
        None, the delivery it displaced or None)."""
        if delivery_id in self._ids:
            return None, None
        node_id = delivery_id.partition(":")[2]
        key = (node_id, budget.window(delivered_at), close)
        if delivery_id in self._withheld.get(key, ()):
            return None, None
        self._forget_windows_before(key[1])
        kept = self._kept.setdefault(key, [])
        displaced = None
        if len(kept) >= budget.of(close):
            unseen = max(self.cursor, self.served)
            replaceable = [d for d in kept if unseen < d.seq <= self.committed and d.delivery_id in self._ids]
            worst = min(replaceable, key=lambda d: (d.score, -d.seq), default=None)
            if worst is None or score <= worst.score:
                self._withhold(key, delivery_id)
                return None, None
            displaced = worst
            kept.remove(worst)
            self._drop(worst)
            self._withhold(key, worst.delivery_id)
        stored = self.enqueue(delivery_id, diff_id, project_id, score, members, delivered_at)
        if stored is not None:
            kept.append(stored)
        return stored, displaced

    def withheld(self, stored: StoredDelivery, budget: Budget) -> int:
        """How many deliveries of ``stored``'s node and window lost to the budget (0 when none)."""
        window = budget.window(stored.delivered_at)
        return sum(len(self._withheld.get((stored.node_id, window, close), ())) for close in (False, True))

    def _withhold(self, key: tuple[str, int, bool], delivery_id: str) -> None:
        ids = self._withheld.setdefault(key, set())
        if len(ids) < MAX_WITHHELD_IDS:
            ids.add(delivery_id)

    def _forget_windows_before(self, window: int) -> None:
        """Budget state of windows before the previous one leaves memory (bounded by live windows)."""
        if window <= self._latest_window:
            return
        self._latest_window = window
        for table in (self._kept, self._withheld):
            for key in [k for k in table if k[1] < window - 1]:
                del table[key]

    def _drop(self, stored: StoredDelivery) -> None:
        i = bisect.bisect_left(self._seqs, stored.seq)
        if i < len(self._seqs) and self._seqs[i] == stored.seq:
            del self._seqs[i]
            del self.deliveries[i]
        self._ids.discard(stored.delivery_id)

    def track(self, stored: StoredDelivery, budget: Budget, close: bool = False) -> None:
        """Count a reloaded delivery against its node's window (after ``restore``)."""
        key = (stored.node_id, budget.window(stored.delivered_at), close)
        self._forget_windows_before(key[1])
        if key[1] >= self._latest_window - 1:
            self._kept.setdefault(key, []).append(stored)

    def restore(self, stored: StoredDelivery) -> None:
        """Re-add a committed delivery on reload (any order; kept sorted)."""
        if stored.delivery_id in self._ids:
            return
        if self._seqs and stored.seq < self._seqs[-1]:
            i = bisect.bisect_left(self._seqs, stored.seq)
            self._seqs.insert(i, stored.seq)
            self.deliveries.insert(i, stored)
            self._ids.add(stored.delivery_id)
        else:
            self._append(stored)
        self.last_seq = max(self.last_seq, stored.seq)
        self.committed = max(self.committed, stored.seq)

    def _append(self, stored: StoredDelivery) -> None:
        self.deliveries.append(stored)
        self._seqs.append(stored.seq)
        self._ids.add(stored.delivery_id)

    def count_of(self, diff_ids: frozenset[str]) -> int:
        return sum(1 for d in self.deliveries if d.diff_id in diff_ids)

    def remove(self, diff_ids: frozenset[str]) -> int:
        """Erase every delivery of ``diff_ids``; sequences and the cursor are unchanged. Returns how many."""
        kept = [d for d in self.deliveries if d.diff_id not in diff_ids]
        removed = len(self.deliveries) - len(kept)
        if removed:
            self.deliveries = kept
            self._seqs = [d.seq for d in kept]
            self._ids = {d.delivery_id for d in kept}
        return removed

    def trim(self, now: float, acked_max_age_s: float, max_deliveries: int) -> tuple[list[StoredDelivery], int]:
        """Apply the retention policy; returns the deliveries dropped and how many of them were unacknowledged.

        First the acknowledged deliveries (``seq <= cursor``) delivered more than
        ``acked_max_age_s`` ago, oldest first, stopping at the first younger one;
        then, while more than ``max_deliveries`` are held, the oldest of the rest.
        Only committed deliveries are dropped.
        """
        acked = bisect.bisect_right(self._seqs, min(self.cursor, self.committed))
        cut = 0
        horizon = now - acked_max_age_s
        while cut < acked and self.deliveries[cut].delivered_at < horizon:
            cut += 1
        committed = bisect.bisect_right(self._seqs, self.committed)
        over = len(self.deliveries) - cut - max_deliveries
        if over > 0:
            cut = min(committed, cut + over)
        if cut == 0:
            return [], 0
        dropped = self.deliveries[:cut]
        self.deliveries = self.deliveries[cut:]
        self._seqs = self._seqs[cut:]
        self._ids.difference_update(d.delivery_id for d in dropped)
        return dropped, sum(1 for d in dropped if d.seq > self.cursor)

    @property
    def unacked(self) -> int:
        """Deliveries held above the acknowledged cursor (what the agent has not yet confirmed)."""
        return len(self._seqs) - bisect.bisect_right(self._seqs, self.cursor)

    def __len__(self) -> int:
        return len(self.deliveries)

    def commit(self, up_to: int) -> None:
        self.committed = max(self.committed, min(up_to, self.last_seq))

    def pull(
        self,
        since: int | None,
        ack: int | None,
        limit: int | None,
        max_batch: int,
        readable: Callable[[str], bool],
    ) -> PullPage:
        before = self.cursor
        if ack is not None:
            self.apply_ack(ack)
        floor = since if since is not None else self.cursor
        size = effective_limit(limit, max_batch)
        start = bisect.bisect_right(self._seqs, floor)
        end = bisect.bisect_right(self._seqs, self.committed)
        window = self.deliveries[start : min(end, start + size)]
        window_high = window[-1].seq if window else min(floor, self.committed)
        items = sorted((d for d in window if readable(d.project_id)), key=lambda d: (-d.score, d.seq))
        window_low = window[0].seq if window else 0
        self.served = max(self.served, window_high)
        return PullPage(items, self.cursor, window_high, self.committed > window_high, self.cursor != before, window_low)

    def apply_ack(self, ack: int) -> bool:
        """The cursor rule alone (also the stream's ack frames): up to ``ack``, clamped to ``served``, the
        highest ``window_high`` handed out (spec rule 6: what the next call may acknowledge); True when it
        moved."""
        if ack > self.cursor:
            moved = max(self.cursor, min(ack, self.served, self.committed))
            if moved != self.cursor:
                self.cursor = moved
                return True
        return False

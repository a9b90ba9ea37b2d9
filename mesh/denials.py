"""How often a refused caller is written to the audit log: one row a window per caller and door.

A Reader's key sent to the admin surfaces is refused at their role gate, and each refusal was an
``AuthzDenied`` row. At the Admin bucket's rate (20 a second) one key wrote 1.7 million rows a day into a
log that is kept for ever and verified whole. Now the first refusal of a (caller, surface) writes its row,
the refusals after it within ``window_s`` are only counted, and the next row written for that pair carries
the count (``repeated``); :meth:`DenialLog.pending` hands what is still counted to an orderly shutdown.

Guarantees: pure bookkeeping over an injected clock reading; every refusal is either written or counted
in the pair's next row; memory is bounded by the pairs seen within ``window_s`` plus ``max_pairs`` (the
oldest quiet pairs are written out first, through :meth:`pending`, never dropped silently).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

Pair = tuple[str, str]  # (agent id, surface)


@dataclass(slots=True)
class _Counted:
    written_at: float  # when the pair's last row was written
    last: Any  # what the caller said of the pair's latest refusal (its row's actor and target)
    since: int = 0  # refusals counted since that row


class DenialLog:
    def __init__(self, window_s: float = 60.0, max_pairs: int = 4096) -> None:
        self.window_s = window_s
        self.max_pairs = max_pairs
        self._pairs: OrderedDict[Pair, _Counted] = OrderedDict()

    def refused(self, pair: Pair, now: float, last: Any = None) -> int | None:
        """A refusal of ``pair`` at ``now`` (``last``: what :meth:`pending` hands back for it): None when it is
        only counted, else the row to write now, with the refusals counted since the pair's last row (0 for
        its first)."""
        counted = self._pairs.get(pair)
        if counted is not None and now - counted.written_at < self.window_s:
            counted.since += 1
            counted.last = last
            return None
        repeated = counted.since if counted is not None else 0
        self._pairs[pair] = _Counted(now, last)
        self._pairs.move_to_end(pair)
        return repeated

    def pending(self, now: float | None = None) -> list[tuple[Any, int]]:
        """The refusals counted and not yet written, as (the pair's ``last``, count), forgotten here: every
        pair's when ``now`` is None (a shutdown), else those of the oldest pairs whose window has passed while
        the table holds more than ``max_pairs``."""
        out: list[tuple[Any, int]] = []
        while self._pairs:
            pair, counted = next(iter(self._pairs.items()))
            if now is not None and (len(self._pairs) <= self.max_pairs or now - counted.written_at < self.window_s):
                break
            del self._pairs[pair]
            if counted.since:
                out.append((counted.last, counted.since))
        return out

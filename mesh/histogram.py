"""A histogram of observations kept as plain counts, to be merged across actors and heads.

Prometheus' histogram model: a count per upper bound ("le", inclusive) and one
above the last bound, the sum and the count of observations. It crosses the
actor seam as integer fields (:meth:`Histogram.fields`), so every actor's
``health`` stays ``dict[str, int]``; the head adds them up (:meth:`Histogram.add`)
and renders cumulative buckets (:meth:`Histogram.buckets`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

LATENCY_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_MICRO = 1_000_000  # sums cross the seam in millionths


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # one per bound, then one above the last
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def add(self, other: Histogram) -> None:
        """Add ``other`` (same bounds) into this one."""
        assert other.bounds == self.bounds
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf`` (what ``HistogramMetricFamily`` takes)."""
        running, out = 0, []
        for bound, n in zip((*(f"{b:g}" for b in self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out

    def fields(self, prefix: str) -> dict[str, int]:
        """This histogram as integer fields named ``{prefix}_{i}`` and ``{prefix}_sum_micro``."""
        out = {f"{prefix}_{i}": n for i, n in enumerate(self.counts)}
        out[f"{prefix}_sum_micro"] = round(self.total * _MICRO)
        return out

    @classmethod
    def of_fields(cls, bounds: tuple[float, ...], prefix: str, fields: dict[str, int]) -> Histogram:
        """The histogram :meth:`fields` wrote (absent fields count 0: an actor that does not keep it)."""
        counts = [int(fields.get(f"{prefix}_{i}", 0)) for i in range(len(bounds) + 1)]
        return cls(bounds, counts, fields.get(f"{prefix}_sum_micro", 0) / _MICRO)

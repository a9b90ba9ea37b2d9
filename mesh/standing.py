"""A leaf's standing: how far a diff's relevance stands above what the node usually sees.

Each leaf (beacon or agent node) keeps running statistics of the relevance of
its tenant's written cells to it: a decayed count, sum and sum of squares,
blended with a prior (``StandingPrior``: ``weight`` pseudo-writes of relevance
``mean`` and spread ``sd``) so a new node is judged sensibly from its first
write. A diff's *standing* for the node is ``(relevance - mean) / sd``. The
walk delivers a leaf when the standing reaches ``propagation.standout``
(:meth:`mesh.walk.EnergyPolicy.passes`).

Why: a fixed cosine gate means different things for different interests and
engines (a question scores its answer lower than a statement scores a
paraphrase). The node's own distribution says what a match means for it.

Guarantees: pure arithmetic on numpy arrays row-aligned with the owner's
:class:`~mesh.vector_index.VectorIndex`; :meth:`LeafStandings.fold` is the only
mutation, applied by the owner at a fixed point of a batch of walks (before its
first wave is answered), so every walk of a batch sees the same statistics
whatever the timing; a replayed walk does not fold again. The statistics hold
no vector and no text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
MIN_SD = 0.02  # a node whose writes all score alike still needs a real margin to stand out


@dataclass(frozen=True, slots=True)
class StandingPrior:
    """What a node is assumed to have seen before its first write (settings ``propagation.standing_*``).

    The defaults are all-MiniLM-L6-v2's relevance between unrelated texts (mean
    0.10, sd 0.09 over 1M interest/turn pairs of ``bench.convmem``), rounded up."""

    mean: float = 0.1
    sd: float = 0.1
    weight: float = 20.0
    half_life: float = 2_000.0  # writes: older writes weigh half as much after this many more

    @property
    def decay(self) -> float:
        return 0.5 ** (1.0 / self.half_life) if math.isfinite(self.half_life) and self.half_life > 0 else 1.0


class LeafStandings:
    """Running relevance statistics of a tenant's leaves, one row per index row."""

    def __init__(self, prior: StandingPrior, capacity: int = 256) -> None:
        self.prior = prior
        self.count: Floats = np.zeros(capacity, dtype=np.float64)
        self.total: Floats = np.zeros(capacity, dtype=np.float64)
        self.total_sq: Floats = np.zeros(capacity, dtype=np.float64)

    def _fit(self, rows: int) -> None:
        size = self.count.shape[0]
        if rows <= size:
            return
        grown = max(rows, size * 2)
        for name in ("count", "total", "total_sq"):
            old = getattr(self, name)
            new = np.zeros(grown, dtype=np.float64)
            new[:size] = old
            setattr(self, name, new)

    def reset(self, row: int) -> None:
        """A new node in ``row``: only the prior."""
        self._fit(row + 1)
        self.count[row] = self.total[row] = self.total_sq[row] = 0.0

    def restore(self, row: int, count: float, total: float, total_sq: float) -> None:
        self._fit(row + 1)
        self.count[row], self.total[row], self.total_sq[row] = count, total, total_sq

    def get(self, row: int) -> tuple[float, float, float]:
        return float(self.count[row]), float(self.total[row]), float(self.total_sq[row])

    def fold(self, relevance: npt.NDArray[np.floating]) -> None:
        """Add a batch of writes: ``relevance`` is rows x writes (every row of the index, in order)."""
        rows, writes = relevance.shape
        if writes == 0 or rows == 0:
            return
        self._fit(rows)
        keep = self.prior.decay**writes
        r = relevance.astype(np.float64, copy=False)
        self.count[:rows] = self.count[:rows] * keep + writes
        self.total[:rows] = self.total[:rows] * keep + r.sum(axis=1)
        self.total_sq[:rows] = self.total_sq[:rows] * keep + np.square(r).sum(axis=1)

    def moments(self, rows: npt.NDArray[np.intp]) -> tuple[Floats, Floats]:
        """(mean, sd) of ``rows``, the prior blended in."""
        p = self.prior
        n = self.count[rows] + p.weight
        mean = (self.total[rows] + p.weight * p.mean) / n
        second = (self.total_sq[rows] + p.weight * (p.sd**2 + p.mean**2)) / n
        sd = np.sqrt(np.maximum(second - np.square(mean), MIN_SD**2))
        return mean, sd

    def standing(self, rows: npt.NDArray[np.intp], relevance: npt.NDArray[np.floating]) -> Floats:
        """The standing of a diff of these ``relevance`` values for each of ``rows``."""
        mean, sd = self.moments(rows)
        result: Floats = (relevance.astype(np.float64) - mean) / sd
        return result

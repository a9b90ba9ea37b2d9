"""Reciprocal rank fusion of the dense and the lexical candidate lists.

A candidate at rank r (from 1) of a list earns ``weight / (rrf_k + r)``
there (Cormack, Clarke and Buettcher, SIGIR 2009). Its relevance is the sum
over both lists divided by the most any candidate can earn (first in both), so
it lies in (0, 1]: 1 for the cell both rankings put first. Ranks, not scores,
are fused, so BM25's unbounded scale never meets cosine's.

Guarantees: deterministic (ties by cosine, then id); a cell appears once; the
dense list alone (no lexical candidates) fuses to the dense order.
"""

from __future__ import annotations

from typing import Any, TypeVar

from mesh.model import Cell
from mesh.tuning import RetrievalTuning

Hits = list[tuple[Cell, float]]
H = TypeVar("H", bound=tuple[Any, ...])


def merge(parts: list[list[H]], k: int) -> list[H]:
    """Per-partition lists of ``(cell, score, ...)`` (each best first) merged into the ``k`` best overall:
    score, then id."""
    merged = [hit for part in parts for hit in part]
    merged.sort(key=lambda h: (-h[1], h[0].id))
    return merged[:k]


def fuse(dense: Hits, lexical: Hits, tuning: RetrievalTuning) -> list[tuple[Cell, float, float]]:
    """``(cell, cosine, relevance)`` for every cell of either list, most relevant first.

    ``dense`` is ``(cell, cosine)`` best first; ``lexical`` is ``(cell, cosine)`` in BM25 order, best first."""
    top = tuning.w_dense / (tuning.rrf_k + 1) + tuning.w_lexical / (tuning.rrf_k + 1)
    if top <= 0:
        return [(cell, sim, sim) for cell, sim in dense]
    earned: dict[str, float] = {}
    cosine: dict[str, tuple[Cell, float]] = {}
    for weight, hits in ((tuning.w_dense, dense), (tuning.w_lexical, lexical)):
        for rank, (cell, sim) in enumerate(hits, start=1):
            earned[cell.id] = earned.get(cell.id, 0.0) + weight / (tuning.rrf_k + rank)
            cosine[cell.id] = (cell, sim)
    fused = [(cell, sim, earned[cid] / top) for cid, (cell, sim) in cosine.items()]
    fused.sort(key=lambda t: (-t[2], -t[1], t[0].id))
    return fused

"""Tuning values of the mesh, with their documented defaults.

The settings class (``cluster.settings``) exposes every field; the core only
ever receives these frozen objects, never reads settings itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class SceneTuning:
    """How cells gather into scenes and how consolidation abstracts them.

    join_similarity: a new cell joins the nearest scene of its project when the
        cosine to its centroid is at least this, else it founds a scene.
    duplicate_similarity: live L0 cells of one scene at least this close are
        near-duplicates; consolidation abstracts each group into a Pattern.
    min_group: the smallest group consolidation abstracts.
    summary_members: how many members the extractive summary quotes.
    summary_chars: the longest quote taken from one member.
    max_members: the most cells one scene holds (live or not). A cell whose
        nearest scenes are full founds a new one, so every per-scene cost
        (consolidation is quadratic in it) stays bounded.
    """

    join_similarity: float = 0.55
    duplicate_similarity: float = 0.9
    min_group: int = 2
    summary_members: int = 3
    summary_chars: int = 240
    max_members: int = 4096


@dataclass(frozen=True, slots=True)
class RecallTuning:
    """How ``recall`` blends similarity with salience and recency.

    score = similarity * w_similarity + salience * w_salience
            + 2^(-age / recency_half_life_s) * w_recency,
    where age is the time since the node was last accessed. ``recall`` first
    takes the ``candidates_factor * k`` most similar nodes (at least
    ``min_candidates``), then re-ranks them by the blend.
    """

    w_similarity: float = 0.75
    w_salience: float = 0.15
    w_recency: float = 0.10
    recency_half_life_s: float = 7 * 24 * 3600.0
    candidates_factor: int = 4
    min_candidates: int = 32


class Ranking(StrEnum):
    """How ``query`` and ``recall`` rank: dense similarity fused with BM25, or dense similarity alone."""

    HYBRID = "hybrid"
    DENSE = "dense"


@dataclass(frozen=True, slots=True)
class RetrievalTuning:
    """How ``query`` and ``recall`` find candidates and rank them.

    ranking: the default when a request does not name one.
    rrf_k: reciprocal rank fusion's constant. A candidate at rank r (from 1) of
        a list scores weight / (rrf_k + r) there; its relevance is the sum over
        the dense and the lexical list, divided by the most any candidate could
        get (first in both), so it lies in (0, 1].
    w_dense, w_lexical: each list's weight in the fusion.
    lexical_candidates: how many of BM25's best (at most) join the fusion: its
        first few are strong evidence, its long tail mostly words in common
        that would push good dense answers down.
    bm25_k1, bm25_b: BM25's term-frequency saturation and length normalisation.
    The dense list is cut at the candidate pool before fusing (for ``query``
    ``max(candidates_factor * k, min_candidates)`` of the recall tuning, and
    for ``recall`` its own pool), the lexical list at the smaller of that pool
    and ``lexical_candidates``.
    """

    ranking: Ranking = Ranking.HYBRID
    rrf_k: int = 10
    w_dense: float = 1.0
    w_lexical: float = 1.0
    lexical_candidates: int = 5
    bm25_k1: float = 1.2
    bm25_b: float = 0.4

    def lexical_pool(self, pool: int) -> int:
        """How many BM25 candidates a search of ``pool`` dense ones fuses."""
        return max(1, min(pool, self.lexical_candidates))

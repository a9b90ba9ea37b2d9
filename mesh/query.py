"""Query filters and the recall blend."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from mesh.errors import MemeshError
from mesh.model import Cell, CellType, Layer, Vector
from mesh.tuning import RecallTuning, RetrievalTuning


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """Structural filter of ``query`` and ``recall``.

    ``tenant_id`` and ``source_agent`` are client conveniences: the server
    confines every read to the caller's tenant before this filter applies, so a
    ``tenant_id`` naming another tenant matches nothing.
    ``include_superseded`` lets a caller see abstracted cells (default: live only).
    """

    cell_types: frozenset[CellType] | None = None
    scene_id: str | None = None
    source_agent: str | None = None
    tenant_id: str | None = None
    layer: Layer | None = None
    project_ids: frozenset[str] | None = None
    include_superseded: bool = False

    def within(self, read_scope: frozenset[str]) -> NodeFilter:
        """This filter narrowed to a read scope (empty: the whole tenant, unchanged)."""
        if not read_scope:
            return self
        allowed = read_scope if self.project_ids is None else read_scope & self.project_ids
        return replace(self, project_ids=frozenset(allowed))


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One request's search of one partition: the ``k`` nearest cells of ``tenant_id`` passing ``flt``, and
    with ``terms`` (a hybrid ranking) also the best by BM25 of those terms (``tuning.lexical_pool(k)`` of them)."""

    tenant_id: str
    vector: Vector
    k: int
    flt: NodeFilter
    terms: tuple[str, ...] | None = None
    tuning: RetrievalTuning = field(default_factory=RetrievalTuning)


Touched = tuple[list[str], datetime]  # recall's access times for one shard: cell ids, and the time to record

# (dense, lexical): ``(cell, cosine)`` nearest first, and ``(cell, bm25, cosine)`` best BM25 first (empty for dense)
SearchAnswer = tuple[list[tuple[Cell, float]], list[tuple[Cell, float, float]]]
# a scene shard's answers to a batch of searches (a refusal in a request's place), and the tenants of the
# batch it holds no node of (``mesh.shard_absence``)
SearchReply = tuple[list[SearchAnswer | MemeshError], list[str]]


def answer_each(
    answer: Callable[[SearchRequest], SearchAnswer], requests: list[SearchRequest]
) -> list[SearchAnswer | MemeshError]:
    """Each request's ``answer``, in order, as if asked alone (its refusal in its place)."""
    answers: list[SearchAnswer | MemeshError] = []
    for request in requests:
        try:
            answers.append(answer(request))
        except MemeshError as exc:
            answers.append(exc)
    return answers


def recall_score(similarity: float, cell: Cell, now: datetime, tuning: RecallTuning) -> float:
    """The recall blend of similarity, salience and recency (see :class:`RecallTuning`)."""
    age = max(0.0, (now - cell.last_accessed).total_seconds())
    recency = math.pow(2.0, -age / tuning.recency_half_life_s) if tuning.recency_half_life_s > 0 else 0.0
    return tuning.w_similarity * similarity + tuning.w_salience * cell.salience + tuning.w_recency * recency


def rerank_for_recall(hits: list[tuple[Cell, float]], k: int, now: datetime, tuning: RecallTuning) -> list[tuple[Cell, float]]:
    """Re-rank similarity hits by the recall blend; ties go to the more similar, then the smaller id."""
    scored = [(cell, recall_score(sim, cell, now, tuning), sim) for cell, sim in hits]
    scored.sort(key=lambda t: (-t[1], -t[2], t[0].id))
    return [(cell, score) for cell, score, _ in scored[:k]]

"""The wire form of a wave's messages: plain tuples and one matrix for all their vectors.

A wave asks every owner for the nodes nearest each walk's frontier and gets back candidates, the scene
ones with their centroids. Pickled one by one (frozen dataclasses, each with its own small array), a
wave of 64 walks cost its owners more than their searches: about 16 ms of pickling per 1,000 candidates
on the machine we measured, against about 1 ms for the same content as tuples and one matrix.

Guarantees: :class:`WaveRequests` and :class:`WaveAnswers` are lists of the same objects as before; in
process nothing changes. Pickled (for Ray, and for the in-process directory's copies), they travel
packed and unpickle to equal objects, in the same order, with every empty answer kept (an owner that
found nothing for a frontier node says so) and every vector with the same values and dtype. Owners
(scene shards, beacon sets) answer with :class:`PackedAnswers`, built in that packed form (no
candidate object on the answering side), whose ``unpacked()`` is such a ``WaveAnswers``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mesh.walk import Candidate, NeighbourRequest, NodeKind

_KINDS = {kind.value: kind for kind in NodeKind}
Row = tuple[str, str, float, float, "str | None", "float | None", int]  # a candidate; its vector's row or -1


def _matrix(vectors: list[Any]) -> np.ndarray[Any, Any] | None:
    return np.stack(vectors) if vectors else None


def _one_kind(vectors: list[Any]) -> bool:
    """True when one matrix holds them all unchanged: a single dtype and shape (always, in a deployment of one
    engine); otherwise the message travels as plain objects, so no vector is cast or refused."""
    return len({(v.dtype, v.shape) for v in vectors}) <= 1


class WaveAnswers(list[dict[str, list[Candidate]]]):
    """One owner's answer to a wave: per request, per frontier node id, the candidates best first."""

    def __reduce__(self) -> tuple[Any, ...]:
        vectors: list[Any] = []
        rows: list[dict[str, list[Row]]] = []
        for answer in self:
            packed: dict[str, list[Row]] = {}
            for frontier_id, candidates in answer.items():
                out: list[Row] = []
                for c in candidates:
                    at = -1
                    if c.vector is not None:
                        at = len(vectors)
                        vectors.append(c.vector)
                    out.append((c.node_id, c.kind.value, c.similarity, c.relevance, c.agent_id, c.standing, at))
                packed[frontier_id] = out
            rows.append(packed)
        if not _one_kind(vectors):
            return (WaveAnswers, (list(self),))
        return (_answers, (rows, _matrix(vectors)))


def _answers(rows: list[dict[str, list[Row]]], matrix: np.ndarray[Any, Any] | None) -> WaveAnswers:
    return WaveAnswers(
        {
            frontier_id: [
                Candidate(node_id, _KINDS[kind], sim, rel, agent, None if at < 0 or matrix is None else matrix[at], standing)
                for node_id, kind, sim, rel, agent, standing, at in candidates
            ]
            for frontier_id, candidates in answer.items()
        }
        for answer in rows
    )


class PackedAnswers:
    """An answer to a wave in its travelling form: per request, per frontier node id, candidate rows
    (``Row``: a vector's row in ``matrix``, or -1), and one matrix of their vectors. What the walker reads
    is ``unpacked()``: equal candidates, in the same order, each vector a row of ``matrix``."""

    __slots__ = ("matrix", "rows")

    def __init__(self, rows: list[dict[str, list[Row]]], matrix: np.ndarray[Any, Any] | None) -> None:
        self.rows = rows
        self.matrix = matrix

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedAnswers, (self.rows, self.matrix))

    def unpacked(self) -> WaveAnswers:
        return _answers(self.rows, self.matrix)

    @classmethod
    def joined(cls, parts: list[PackedAnswers]) -> PackedAnswers:
        """One answer of parts made in order, each part's rows numbered after the earlier parts' matrices
        (``mesh.neighbours.neighbour_scene_parts``)."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls([], None)
        matrices = [p.matrix for p in parts if p.matrix is not None]
        matrix = np.concatenate(matrices) if len(matrices) > 1 else (matrices[0] if matrices else None)
        return cls([rows for p in parts for rows in p.rows], matrix)


class WaveRequests(list[NeighbourRequest]):
    """A wave's requests to one owner, one per walk."""

    def __reduce__(self) -> tuple[Any, ...]:
        vectors: list[Any] = []
        rows = []
        for r in self:
            vectors += [vector for _, vector in r.queries]
            vectors.append(r.diff_vector)
            rows.append(
                (r.tenant_id, [node_id for node_id, _ in r.queries], r.k, r.exclude_agent, r.leaf_k, r.observe, r.centroid_floor)
            )
        if not _one_kind(vectors):
            return (WaveRequests, (list(self),))
        return (_requests, (rows, _matrix(vectors)))


def _requests(rows: list[tuple[Any, ...]], matrix: np.ndarray[Any, Any] | None) -> WaveRequests:
    out = WaveRequests()
    at = 0
    for tenant_id, node_ids, k, exclude_agent, leaf_k, observe, centroid_floor in rows:
        assert matrix is not None  # every request carries its diff's vector
        queries = [(node_id, matrix[at + i]) for i, node_id in enumerate(node_ids)]
        at += len(node_ids)
        out.append(NeighbourRequest(tenant_id, queries, matrix[at], k, exclude_agent, leaf_k, observe, centroid_floor))
        at += 1
    return out

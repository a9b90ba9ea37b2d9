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

import inspect
from itertools import accumulate, repeat
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
    """An answer to a wave in its travelling form: columns, not one tuple per candidate.

    ``requests``: how many requests it answers. Then one entry per frontier node answered (an empty answer
    included), in the order the owner answered them: ``entries`` (its request's index), ``frontier_ids``,
    ``counts`` (its candidates). Then one entry per candidate, every frontier node's in turn: ``ids``,
    ``kinds`` (one kind for all, or one each), ``similarity``, ``relevance``, ``agents`` and ``standing``
    (None: None for all), ``at`` (its vector's row in ``matrix``, or -1; None: -1 for all). What the walker
    reads is ``unpacked()``: per request, per frontier node id in the order answered, the same candidates
    as the rows they stand for, each vector a row of ``matrix``. Pickled, the columns travel as a few lists
    and arrays: about half the time of the same content as tuples, both ways."""

    __slots__ = (
        "agents",
        "at",
        "counts",
        "entries",
        "frontier_ids",
        "ids",
        "kinds",
        "matrix",
        "relevance",
        "requests",
        "similarity",
        "standing",
    )

    def __init__(
        self,
        requests: int,
        entries: list[int],
        frontier_ids: list[str],
        counts: list[int],
        ids: list[str],
        kinds: str | list[str],
        similarity: list[float],
        relevance: list[float] | np.ndarray[Any, Any],
        agents: list[str | None] | None = None,
        standing: list[float | None] | None = None,
        at: np.ndarray[Any, Any] | None = None,
        matrix: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.requests, self.entries, self.frontier_ids, self.counts = requests, entries, frontier_ids, counts
        self.ids, self.kinds, self.similarity, self.relevance = ids, kinds, similarity, relevance
        self.agents, self.standing, self.at, self.matrix = agents, standing, at, matrix

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedAnswers, tuple(getattr(self, name) for name in _ARGUMENTS))

    @classmethod
    def of_rows(cls, rows: list[dict[str, list[Row]]], matrix: np.ndarray[Any, Any] | None = None) -> PackedAnswers:
        """The columns of ``rows`` (per request, per frontier node id, its candidates as ``Row`` tuples)."""
        flat = [row for answer in rows for found in answer.values() for row in found]
        columns = [list(column) for column in zip(*flat, strict=True)] if flat else [[] for _ in range(7)]
        ids, kinds, similarity, relevance, agents, standing, at = columns
        return cls(
            len(rows),
            [n for n, answer in enumerate(rows) for _ in answer],
            [frontier_id for answer in rows for frontier_id in answer],
            [len(found) for answer in rows for found in answer.values()],
            ids,
            kinds,
            similarity,
            relevance,
            agents,
            standing,
            np.array(at, dtype=np.int64),
            matrix,
        )

    def unpacked(self) -> WaveAnswers:
        matrix, n = self.matrix, len(self.ids)
        kinds = repeat(_KINDS[self.kinds], n) if isinstance(self.kinds, str) else map(_KINDS.__getitem__, self.kinds)
        at = repeat(-1, n) if self.at is None else np.asarray(self.at).tolist()
        vectors = (None if row < 0 or matrix is None else matrix[row] for row in at)
        relevance = self.relevance.tolist() if isinstance(self.relevance, np.ndarray) else self.relevance
        agents = repeat(None, n) if self.agents is None else self.agents
        standing = repeat(None, n) if self.standing is None else self.standing
        candidates = list(map(Candidate, self.ids, kinds, self.similarity, relevance, agents, vectors, standing))
        out = WaveAnswers({} for _ in range(self.requests))
        start = 0
        for request, frontier_id, count in zip(self.entries, self.frontier_ids, self.counts, strict=True):
            out[request][frontier_id] = candidates[start : start + count]
            start += count
        return out

    @classmethod
    def joined(cls, parts: list[PackedAnswers]) -> PackedAnswers:
        """One answer of parts made in order, each part answering the requests after the earlier parts' and
        numbering its rows after the earlier parts' matrices (``mesh.neighbours.neighbour_scene_parts``)."""
        if len(parts) == 1:
            return parts[0]
        n = [len(p.ids) for p in parts]
        before = list(accumulate((p.requests for p in parts), initial=0))
        return cls(
            before[-1],
            [entry + first for p, first in zip(parts, before, strict=False) for entry in p.entries],
            [frontier_id for p in parts for frontier_id in p.frontier_ids],
            [count for p in parts for count in p.counts],
            [i for p in parts for i in p.ids],
            _joined_kinds(parts, n),
            [s for p in parts for s in p.similarity],
            _joined_column([p.relevance for p in parts], n, 0.0) if parts else [],
            _joined_column([p.agents for p in parts], n, None),
            _joined_column([p.standing for p in parts], n, None),
            _joined_column([p.at for p in parts], n, -1),
            joined_matrix([p.matrix for p in parts]),
        )


_ARGUMENTS = tuple(inspect.signature(PackedAnswers).parameters)  # the constructor's, in its order: what __reduce__ gives


def _joined_kinds(parts: list[PackedAnswers], n: list[int]) -> str | list[str]:
    """The kinds of parts: one kind when every part with candidates names the same one, else one each."""
    named = {p.kinds for p, size in zip(parts, n, strict=True) if size and isinstance(p.kinds, str)}
    if len(named) <= 1 and all(isinstance(p.kinds, str) for p, size in zip(parts, n, strict=True) if size):
        return named.pop() if named else []
    return [k for p, size in zip(parts, n, strict=True) for k in (repeat(p.kinds, size) if isinstance(p.kinds, str) else p.kinds)]


def _joined_column(columns: list[Any], n: list[int], absent: Any) -> Any:
    """One column of parts: None when every part leaves it out, an array when every part gives one, else a list."""
    if all(c is None for c in columns):
        return None
    if all(isinstance(c, np.ndarray) for c in columns):
        return np.concatenate(columns)
    out: list[Any] = []
    for column, size in zip(columns, n, strict=True):
        out += [absent] * size if column is None else list(column.tolist() if isinstance(column, np.ndarray) else column)
    return out


def joined_matrix(matrices: list[np.ndarray[Any, Any] | None]) -> np.ndarray[Any, Any] | None:
    """The rows of ``matrices`` in order (those given: None is none), one alone as it is."""
    present = [m for m in matrices if m is not None]
    return np.concatenate(present) if len(present) > 1 else (present[0] if present else None)


class WaveRequests(list[NeighbourRequest]):
    """A wave's requests to one owner, one per walk."""

    def __reduce__(self) -> tuple[Any, ...]:
        vectors: list[Any] = []
        rows = []
        for r in self:
            vectors += [vector for _, vector in r.queries]
            vectors.append(r.diff_vector)
            rows.append(
                (
                    r.tenant_id,
                    [node_id for node_id, _ in r.queries],
                    r.k,
                    r.exclude_agent,
                    r.leaf_k,
                    r.observe,
                    r.centroid_floor,
                    r.keep,
                )
            )
        if not _one_kind(vectors):
            return (WaveRequests, (list(self),))
        return (_requests, (rows, _matrix(vectors)))


def _requests(rows: list[tuple[Any, ...]], matrix: np.ndarray[Any, Any] | None) -> WaveRequests:
    out = WaveRequests()
    at = 0
    for tenant_id, node_ids, k, exclude_agent, leaf_k, observe, centroid_floor, keep in rows:
        assert matrix is not None  # every request carries its diff's vector
        queries = [(node_id, matrix[at + i]) for i, node_id in enumerate(node_ids)]
        at += len(node_ids)
        out.append(NeighbourRequest(tenant_id, queries, matrix[at], k, exclude_agent, leaf_k, observe, centroid_floor, keep))
        at += 1
    return out

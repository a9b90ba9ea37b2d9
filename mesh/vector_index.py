"""Exact nearest-neighbour search over unit vectors held in memory.

A growable float32 matrix (rows never move, so a row number is a stable
handle), a live mask, and an id map. Search is one matrix-vector product plus
``argpartition``: about 15 ms over 100k x 384 on this machine's 2 cores,
against ~200 ms for a LanceDB brute-force scan (DESIGN.md section 4).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mesh.model import Vector

BoolMask = npt.NDArray[np.bool_]


class VectorIndex:
    """Rows of (id, unit vector). Guarantees: ``search`` returns live rows only,
    best first, ties broken by insertion order; ``upsert`` of an existing id
    replaces its vector in place."""

    def __init__(self, dims: int, capacity: int = 256) -> None:
        self.dims = dims
        self._matrix = np.zeros((max(capacity, 1), dims), dtype=np.float32)
        self._live = np.zeros(max(capacity, 1), dtype=np.bool_)
        self._ids: list[str] = []
        self._row: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._row

    @property
    def size(self) -> int:
        return len(self._ids)

    def row_of(self, node_id: str) -> int:
        return self._row[node_id]

    def id_at(self, row: int) -> str:
        return self._ids[row]

    def vector(self, node_id: str) -> Vector:
        row: Vector = self._matrix[self._row[node_id]]
        return row

    def upsert(self, node_id: str, vector: Vector, live: bool = True) -> int:
        """Insert or replace ``node_id``; returns its row."""
        if vector.shape != (self.dims,):
            raise ValueError(f"vector has shape {vector.shape}, index wants ({self.dims},)")
        row = self._row.get(node_id)
        if row is None:
            row = len(self._ids)
            if row == self._matrix.shape[0]:
                self._grow()
            self._ids.append(node_id)
            self._row[node_id] = row
        self._matrix[row] = vector
        self._live[row] = live
        return row

    def set_live(self, node_id: str, live: bool) -> None:
        row = self._row.get(node_id)
        if row is not None:
            self._live[row] = live

    def erase(self, node_id: str) -> None:
        """Zero ``node_id``'s vector and take it out of every search (its row stays, dead)."""
        row = self._row.get(node_id)
        if row is not None:
            self._matrix[row] = 0.0
            self._live[row] = False

    def similarity(self, node_ids: list[str], vector: Vector) -> npt.NDArray[np.float32]:
        """Cosine of ``vector`` with each of ``node_ids`` (one gather and one product)."""
        if not node_ids:
            return np.zeros(0, dtype=np.float32)
        rows = [self._row[n] for n in node_ids]
        result: npt.NDArray[np.float32] = self._matrix[rows] @ vector.astype(np.float32, copy=False)
        return result

    def live_mask(self) -> BoolMask:
        return self._live[: self.size]

    def scores(self, query: Vector) -> npt.NDArray[np.float32]:
        """Cosine of ``query`` with every row (dead rows included)."""
        n = self.size
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        return self._matrix[:n] @ query.astype(np.float32, copy=False)

    def search(self, query: Vector, k: int, mask: BoolMask | None = None) -> list[tuple[str, float]]:
        """The ``k`` live rows nearest ``query`` (optionally within ``mask``), best first."""
        n = self.size
        if n == 0 or k <= 0:
            return []
        allowed = self._live[:n] if mask is None else (self._live[:n] & mask)
        candidates = np.flatnonzero(allowed)
        if candidates.size == 0:
            return []
        sims = (
            self._matrix[candidates] @ query.astype(np.float32, copy=False)
            if candidates.size < n // 2
            else self.scores(query)[candidates]
        )
        top = self._top(sims, k)
        order = sorted(top.tolist(), key=lambda i: (-float(sims[i]), self._ids[int(candidates[i])]))[:k]
        return [(self._ids[int(candidates[i])], float(sims[i])) for i in order]

    def search_many(
        self, queries: npt.NDArray[np.float32], k: int, mask: BoolMask | None = None
    ) -> list[list[tuple[str, float]]]:
        """``search`` for every row of ``queries`` with one matrix product (what batched walks use)."""
        n = self.size
        if n == 0 or k <= 0 or len(queries) == 0:
            return [[] for _ in range(len(queries))]
        allowed = self._live[:n] if mask is None else (self._live[:n] & mask)
        rows = np.flatnonzero(allowed)
        if rows.size == 0:
            return [[] for _ in range(len(queries))]
        sims = self._matrix[rows] @ queries.astype(np.float32, copy=False).T  # rows x queries
        answers = []
        for j in range(len(queries)):
            column = sims[:, j]
            picked = sorted(self._top(column, k).tolist(), key=lambda i: (-float(column[i]), self._ids[int(rows[i])]))[:k]
            answers.append([(self._ids[int(rows[i])], float(column[i])) for i in picked])
        return answers

    @staticmethod
    def _top(sims: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
        """Positions of the ``k`` best scores, plus any tied with the k-th (the caller breaks ties by id)."""
        if k >= sims.size:
            return np.arange(sims.size)
        kth = np.partition(-sims, k - 1)[k - 1]
        return np.flatnonzero(-sims <= kth)

    def _grow(self) -> None:
        capacity = self._matrix.shape[0] * 2
        matrix = np.zeros((capacity, self.dims), dtype=np.float32)
        matrix[: self._matrix.shape[0]] = self._matrix
        live = np.zeros(capacity, dtype=np.bool_)
        live[: self._live.shape[0]] = self._live
        self._matrix, self._live = matrix, live

"""Search answers in their travelling form: a batch's cells as columns, not one pickled object each.

A scene shard answers a hybrid search of 10,000 cells with about 60 distinct
cells (the dense and the BM25 candidates overlap), each carrying its vector.
Pickled one :class:`~mesh.model.Cell` at a time that cost 0.2 ms to dump in
the shard and 0.3 ms to load in the head, on every read's path. Pickled as
:class:`SearchAnswers`, the batch's distinct cells travel once each, their
fields as lists and their vectors as one matrix.

Guarantees: what the other side loads is a plain list of the same answers in
the same order (a refusal in its place stays one), each cell equal field by
field, its vector of the same dtype and values and read-only (like every
vector read from storage); a cell that appears several times in the batch is
one object after loading, as it was before. Cells whose vectors differ in
dtype or shape (a client's vector beside the model's) travel one object each,
as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mesh.errors import MemeshError
from mesh.model import Cell, CellType, Layer
from mesh.query import SearchAnswer, SearchRequest

_TYPES = {kind.value: kind for kind in CellType}
_LAYERS = {layer.value: layer for layer in Layer}


class SearchAnswers(list[SearchAnswer | MemeshError]):
    """A scene shard's answers to one ``search_batch``, in order; pickles as columns (see the module)."""

    __slots__ = ()

    @classmethod
    def of(cls, requests: list[SearchRequest], answer: Callable[[SearchRequest], SearchAnswer]) -> SearchAnswers:
        """``answer`` of each request, in order; a request it refuses (a MemeshError) has the error in its place."""
        answers = cls()
        for request in requests:
            try:
                answers.append(answer(request))
            except MemeshError as exc:
                answers.append(exc)
        return answers

    def __reduce__(self) -> tuple[Any, ...]:
        packed = _packed(self)
        return (list, (list(self),)) if packed is None else (_unpacked, packed)


def _packed(answers: list[SearchAnswer | MemeshError]) -> tuple[Any, ...] | None:
    """``(shapes, columns, vectors, dtype, shape)``, or None when the cells cannot share one matrix."""
    where: dict[int, int] = {}
    cells: list[Cell] = []

    def at(cell: Cell) -> int:
        index = where.get(id(cell))
        if index is None:
            index = where[id(cell)] = len(cells)
            cells.append(cell)
        return index

    shapes: list[Any] = []
    for answer in answers:
        if isinstance(answer, MemeshError):
            shapes.append(answer)
            continue
        dense, lexical = answer
        shapes.append(
            (
                [at(cell) for cell, _ in dense],
                [similarity for _, similarity in dense],
                [at(cell) for cell, _, _ in lexical],
                [bm25 for _, bm25, _ in lexical],
                [similarity for _, _, similarity in lexical],
            )
        )
    if not cells:
        return None
    first = cells[0].embedding
    if any(cell.embedding.dtype != first.dtype or cell.embedding.shape != first.shape for cell in cells):
        return None
    columns = (
        [c.id for c in cells],
        [c.tenant_id for c in cells],
        [c.project_id for c in cells],
        [c.cell_type.value for c in cells],
        [c.content for c in cells],
        [c.salience for c in cells],
        [c.source_agent for c in cells],
        [c.created_at for c in cells],
        [c.last_accessed for c in cells],
        [c.layer.value for c in cells],
        [c.engine for c in cells],
        [c.scene_id for c in cells],
        [c.session_id for c in cells],
        [c.superseded_by for c in cells],
        [c.tombstone for c in cells],
    )
    vectors = np.stack([cell.embedding for cell in cells]).tobytes()
    return shapes, columns, vectors, first.dtype.str, first.shape


def _unpacked(
    shapes: list[Any], columns: tuple[list[Any], ...], vectors: bytes, dtype: str, shape: tuple[int, ...]
) -> list[SearchAnswer | MemeshError]:
    ids, tenants, projects, kinds, contents, saliences, agents, created, accessed, layers, engines = columns[:11]
    scenes, sessions, superseded, tombstones = columns[11:]
    matrix = np.frombuffer(vectors, dtype=np.dtype(dtype)).reshape((len(ids), *shape))
    cells = [
        Cell(
            ids[i],
            tenants[i],
            projects[i],
            _TYPES[kinds[i]],
            contents[i],
            saliences[i],
            agents[i],
            created[i],
            accessed[i],
            _LAYERS[layers[i]],
            matrix[i],
            engines[i],
            scenes[i],
            sessions[i],
            superseded[i],
            tombstones[i],
        )
        for i in range(len(ids))
    ]
    answers: list[SearchAnswer | MemeshError] = []
    for entry in shapes:
        if isinstance(entry, MemeshError):
            answers.append(entry)
            continue
        dense_at, dense_sim, lexical_at, lexical_bm25, lexical_sim = entry
        answers.append(
            (
                [(cells[i], s) for i, s in zip(dense_at, dense_sim, strict=True)],
                [(cells[i], b, s) for i, b, s in zip(lexical_at, lexical_bm25, lexical_sim, strict=True)],
            )
        )
    return answers

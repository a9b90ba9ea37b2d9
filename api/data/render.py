"""Hydrated nodes rendered straight to JSON bytes with orjson.

``query``, ``recall`` and cell writes answer lists of nodes with 384 floats
each; building a pydantic ``NodeOut`` per node and letting FastAPI serialise
it cost more than the search itself. These functions write the same JSON
(``NodeOut`` stays the documented response model in ``/openapi.json``).

Guarantees: the bytes parse to exactly ``NodeOut.of(cell).model_dump(mode="json")``
for every cell (tests/unit/test_render.py): the embedding's float32 values as
the same float64 numbers, times in RFC 3339 UTC with ``Z``, salience rounded
to 6 places.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from fastapi.responses import Response

from mesh.model import Cell

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def node(cell: Cell) -> dict[str, Any]:
    """The ``NodeOut`` fields of ``cell`` as orjson takes them (the embedding stays a numpy array)."""
    return {
        "id": cell.id,
        "tenant_id": cell.tenant_id,
        "embedding": cell.embedding.astype(np.float64),
        "node_type": {
            "Cell": {
                "project_id": cell.project_id,
                "session_id": cell.session_id,
                "embedding_engine": cell.engine,
                "tombstone": cell.tombstone,
            }
        },
        "cell_type": cell.cell_type.value,
        "content": cell.content,
        "salience": round(float(cell.salience), 6),
        "source_agent": cell.source_agent,
        "created_at": cell.created_at,
        "last_accessed": cell.last_accessed,
        "layer": cell.layer.value,
        "scene_id": cell.scene_id,
        "superseded_by": cell.superseded_by,
    }


def node_response(cell: Cell, status_code: int = 200) -> Response:
    """One node as a JSON response."""
    return Response(orjson.dumps(node(cell), option=_OPTIONS), status_code=status_code, media_type="application/json")


def nodes_response(cells: list[Cell], status_code: int = 200) -> Response:
    """A JSON array of nodes, in the given order."""
    return Response(
        orjson.dumps([node(cell) for cell in cells], option=_OPTIONS), status_code=status_code, media_type="application/json"
    )


def page_response(key: str, cells: list[Cell], next_cursor: str | None) -> Response:
    """A keyset page ``{key: [nodes], "next_cursor": ...}``."""
    body = {key: [node(cell) for cell in cells], "next_cursor": next_cursor}
    return Response(orjson.dumps(body, option=_OPTIONS), media_type="application/json")

"""The /v1 memory routes (cells: write, read, list, delete; retrieval; sessions; scenes): decode, one use case, encode.

Nodes are rendered to JSON bytes by :mod:`api.data.render` (``NodeOut`` documents them).
Authentication happened in the gate (:mod:`api.data.gate`); each route
charges its rate-limit bucket through its principal dependency
(:mod:`api.deps`: ``Reader`` the Read bucket, ``Writer`` the Write bucket;
a batch, ``Caller``, charges the Write bucket once per cell after its body is
read; a read of more than 100 nodes, a Read token more per 100 once its ``k`` or
``limit`` is read: ``Memesh.charge_read``).
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response
from pydantic import BeforeValidator

from api.cursors import decode_cursor, encode_cursor
from api.data.render import node_response, nodes_response, page_response
from api.data.schemas import (
    ERROR_RESPONSES,
    CellBatchIn,
    CellIn,
    CellListIn,
    CellListOut,
    ConsolidateIn,
    ConsolidationOut,
    NodeOut,
    OkOut,
    QueryIn,
    SceneListOut,
    SceneOut,
    SessionIn,
    SessionOut,
    decimal_digits,
)
from api.deps import Caller, Core, Reader, Writer
from mesh.model import NewCell
from mesh.query import NodeFilter

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


def new_cell(body: CellIn) -> NewCell:
    """The use case's cell of a validated ``CellIn`` (the gRPC data plane uses it too)."""
    return NewCell(
        content=body.content,
        cell_type=body.cell_type,
        salience=body.salience,
        layer=body.layer,
        project_id=body.project_id,
        session_id=str(body.session_id) if body.session_id else None,
        scene_id=str(body.scene_id) if body.scene_id else None,
        embedding=tuple(body.embedding) if body.embedding is not None else None,
    )


def node_filter(body: QueryIn) -> NodeFilter:
    """The use case's filter of a validated ``QueryIn`` (the gRPC data plane uses it too)."""
    f = body.filter
    return NodeFilter(
        cell_types=frozenset(f.cell_types) if f and f.cell_types is not None else None,
        scene_id=str(f.scene_id) if f and f.scene_id else None,
        source_agent=f.source_agent if f else None,
        tenant_id=f.tenant_id if f else None,
        layer=body.layer,
    )


@router.post("/cells", status_code=201, response_model=NodeOut, tags=["cells"], summary="Write one cell")
async def write_cell(body: CellIn, principal: Writer, core: Core) -> Response:
    (cell,) = await core.memory.write_cells(principal, [new_cell(body)])
    return node_response(cell, status_code=201)


@router.post("/cells:batch", status_code=201, response_model=list[NodeOut], tags=["cells"], summary="Write cells in order")
async def write_cells(body: CellBatchIn, principal: Caller, core: Core) -> Response:
    """Charged one token of the Write bucket per cell (a batch costs what its cells would one by one)."""
    core.charge_batch(principal, len(body.cells))
    cells = await core.memory.write_cells(principal, [new_cell(c) for c in body.cells])
    return nodes_response(cells, status_code=201)


@router.get("/cells", response_model=CellListOut, tags=["cells"], summary="List your tenant's cells (keyset pages)")
async def list_cells(params: Annotated[CellListIn, Query()], principal: Reader, core: Core) -> Response:
    """Cells in id order (creation order), filtered as ``query`` filters; live cells unless ``include_superseded``."""
    core.charge_read(principal, params.limit, charged=1)
    cells, more = await core.cells.list(principal, params.node_filter(), decode_cursor(params.cursor), params.limit)
    return page_response("cells", cells, encode_cursor(cells[-1].id) if more and cells else None)


@router.get("/cells/{cell_id}", response_model=NodeOut, tags=["cells"], summary="Read one cell")
async def get_cell(cell_id: UUID, principal: Reader, core: Core) -> Response:
    """Absent, deleted, erased and out-of-scope cells are all 404."""
    return node_response(await core.cells.get(principal, str(cell_id)))


@router.delete("/cells/{cell_id}", response_model=OkOut, tags=["cells"], summary="Delete a cell you wrote")
async def delete_cell(cell_id: UUID, principal: Writer, core: Core) -> OkOut:
    """A tombstone: the cell leaves query, recall and reads at once. The writer or an admin of the tenant;
    a second delete is a no-op (200), as spec section 3 says of a tombstoned node."""
    await core.cells.delete(principal, str(cell_id))
    return OkOut()


@router.post(
    "/query",
    response_model=list[NodeOut],
    tags=["retrieval"],
    summary="Most relevant live nodes: similarity fused with BM25, or similarity alone",
)
async def query(body: QueryIn, principal: Reader, core: Core) -> Response:
    core.charge_read(principal, body.k, charged=1)
    cells = await core.memory.query(principal, body.text, body.embedding, body.k, node_filter(body), body.ranking)
    return nodes_response(cells)


@router.post("/recall", response_model=list[NodeOut], tags=["retrieval"], summary="Relevance blended with salience and recency")
async def recall(body: QueryIn, principal: Reader, core: Core) -> Response:
    core.charge_read(principal, body.k, charged=1)
    cells = await core.memory.recall(principal, body.text, body.embedding, body.k, node_filter(body), body.ranking)
    return nodes_response(cells)


@router.post("/sessions", response_model=SessionOut, tags=["sessions"], summary="Open a working session")
async def open_session(body: SessionIn, principal: Writer, core: Core) -> SessionOut:
    session = await core.memory.open_session(principal, body.project_id)
    return SessionOut(session_id=UUID(session.id))


@router.delete("/sessions/{session_id}", response_model=OkOut, tags=["sessions"], summary="Close a session")
async def close_session(session_id: UUID, principal: Writer, core: Core) -> OkOut:
    await core.memory.close_session(principal, str(session_id))
    return OkOut()


@router.get("/scenes", response_model=SceneListOut, tags=["scenes"], summary="List scenes (keyset pages)")
async def list_scenes(
    principal: Reader,
    core: Core,
    project_id: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    cursor: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1), BeforeValidator(decimal_digits)] = 50,
) -> SceneListOut:
    core.charge_read(principal, limit, charged=1)
    scenes, more = await core.memory.list_scenes(principal, project_id, decode_cursor(cursor), limit)
    next_cursor = encode_cursor(scenes[-1].id) if more and scenes else None
    return SceneListOut(scenes=[SceneOut.of(s) for s in scenes], next_cursor=next_cursor)


@router.get("/scenes/{scene_id}", response_model=SceneOut, tags=["scenes"], summary="Read a scene")
async def get_scene(scene_id: UUID, principal: Reader, core: Core) -> SceneOut:
    return SceneOut.of(await core.memory.get_scene(principal, str(scene_id)))


@router.post(
    "/scenes/{scene_id}/consolidate",
    response_model=ConsolidationOut,
    tags=["scenes"],
    summary="Recompute a scene and abstract near-duplicates",
)
async def consolidate(
    scene_id: UUID, principal: Writer, core: Core, body: Annotated[ConsolidateIn | None, Body()] = None
) -> ConsolidationOut:
    """No body, or an empty object (any field in it is unknown: 422, as on every route)."""
    report = await core.memory.consolidate(principal, str(scene_id))
    return ConsolidationOut(
        scene_id=report.scene.id,
        patterns_created=[NodeOut.of(p) for p in report.patterns],
        cells_superseded=report.superseded,
        scene=SceneOut.of(report.scene),
    )

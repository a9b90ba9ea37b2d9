"""Arrow schemas of the stored tables and the conversions to domain records.

Decoding survives bad rows: every ``*_from_arrow`` decodes row by row, reads
timestamps as integers and clamps them into the range a ``datetime`` can hold
(a stored year 10000 must not stop a load), and skips a row it still cannot
decode (an unknown enum value, a non-finite vector) with a warning. A loader
therefore never refuses to start over one row; it reports how many it
skipped (input rows minus decoded records).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from actors.schemas import (
    AGENT_SCHEMA,
    DELIVERY_SCHEMA,
    SESSION_SCHEMA,
    agent_node_schema,
    beacon_schema,
    cell_schema,
    scene_schema,
)
from mesh.identity import Agent, AgentStatus, Role
from mesh.inbox import StoredDelivery
from mesh.model import AgentNode, Beacon, Cell, CellType, Layer, Scene, Session

log = logging.getLogger(__name__)
R = TypeVar("R")
D = TypeVar("D")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_US = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
_MAX_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z


def utc_from_micros(value: int) -> datetime:
    """A UTC datetime from epoch microseconds, clamped into 0001-01-01 .. 9999-12-31."""
    return _EPOCH + timedelta(microseconds=min(max(int(value), _MIN_US), _MAX_US))


def _plain_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``to_pylist`` with every timestamp column as epoch microseconds (ints never overflow)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, pc.cast(table.column(i), pa.int64()))
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _ts(value: int | None) -> datetime | None:
    return utc_from_micros(value) if value is not None else None


def _req_ts(value: int | None) -> datetime:
    if value is None:
        raise ValueError("a required timestamp is null")
    return utc_from_micros(value)


def decode_rows(kind: str, rows: Iterable[R], decode: Callable[[R], D]) -> list[D]:
    """``decode`` applied to every row; a row that fails is logged and left out."""
    out: list[D] = []
    for row in rows:
        try:
            out.append(decode(row))
        except (ValueError, TypeError, KeyError, OverflowError, AttributeError) as exc:
            log.warning("skipped an undecodable %s row: %s", kind, exc)
    return out


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def cells_to_arrow(cells: Iterable[Cell], dims: int) -> pa.Table:
    cells = list(cells)
    schema = cell_schema(dims)
    columns: dict[str, Any] = {
        name: [getattr(c, name) for c in cells]
        for name in (
            "id",
            "tenant_id",
            "project_id",
            "content",
            "salience",
            "source_agent",
            "created_at",
            "last_accessed",
            "scene_id",
            "session_id",
            "superseded_by",
            "tombstone",
            "engine",
        )
    }
    columns["cell_type"] = [c.cell_type.value for c in cells]
    columns["layer"] = [c.layer.value for c in cells]
    flat = np.concatenate([c.embedding for c in cells]).astype(np.float32) if cells else np.zeros(0, np.float32)
    columns["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), dims)
    return pa.table({f.name: columns[f.name] for f in schema}, schema=schema)


def _vectors(table: pa.Table, column: str, dtype: type[np.floating[Any]]) -> np.ndarray[Any, Any]:
    dims = table.schema.field(column).type.list_size
    flat = table.column(column).combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=dtype).reshape(-1, dims)


def _finite_vector(vector: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if not np.all(np.isfinite(vector)):
        raise ValueError("a stored vector is not finite")
    return np.ascontiguousarray(vector, dtype=np.float32)


def cells_from_arrow(table: pa.Table) -> list[Cell]:
    if table.num_rows == 0:
        return []
    vectors = _vectors(table, "embedding", np.float32)

    def decode(item: tuple[int, dict[str, Any]]) -> Cell:
        i, r = item
        return Cell(
            id=r["id"],
            tenant_id=r["tenant_id"],
            project_id=r["project_id"],
            cell_type=CellType(r["cell_type"]),
            content=r["content"],
            salience=min(1.0, max(0.0, float(r["salience"]))),
            source_agent=r["source_agent"],
            created_at=_req_ts(r["created_at"]),
            last_accessed=_req_ts(r["last_accessed"]),
            layer=Layer(r["layer"]),
            embedding=_finite_vector(vectors[i]),
            engine=r["engine"],
            scene_id=r["scene_id"],
            session_id=r["session_id"],
            superseded_by=r["superseded_by"],
            tombstone=bool(r["tombstone"]),
        )

    return decode_rows("cell", enumerate(_plain_rows(table.drop_columns(["embedding"]))), decode)


def scenes_to_arrow(scenes: Iterable[Scene], dims: int) -> pa.Table:
    rows = [
        {
            "id": s.id,
            "tenant_id": s.tenant_id,
            "project_id": s.project_id,
            "created_at": s.created_at,
            "summary": s.summary,
            "centroid": s.centroid.tolist() if s.live_count else [0.0] * dims,
        }
        for s in scenes
    ]
    return _table(rows, scene_schema(dims))


def scenes_from_arrow(table: pa.Table, dims: int) -> list[Scene]:
    def decode(r: dict[str, Any]) -> Scene:
        return Scene(
            id=r["id"],
            tenant_id=r["tenant_id"],
            project_id=r["project_id"],
            created_at=_req_ts(r["created_at"]),
            vector_sum=np.zeros(dims, dtype=np.float64),
            summary=r["summary"],
        )

    return decode_rows("scene", _plain_rows(table.drop_columns(["centroid"])), decode)


def agents_to_arrow(agents: Iterable[Agent]) -> pa.Table:
    rows = [
        {
            "id": a.id,
            "tenant_id": a.tenant_id,
            "display_name": a.display_name,
            "roles": sorted(r.value for r in a.roles),
            "status": a.status.value,
            "key_hash": a.key_hash,
            "read_scope": sorted(a.read_scope),
            "created_at": a.created_at,
            "updated_at": a.updated_at,
            "bootstrap": a.bootstrap,
        }
        for a in agents
    ]
    return _table(rows, AGENT_SCHEMA)


def agents_from_arrow(table: pa.Table) -> list[Agent]:
    def decode(r: dict[str, Any]) -> Agent:
        return Agent(
            id=r["id"],
            tenant_id=r["tenant_id"],
            display_name=r["display_name"],
            roles=frozenset(Role(x) for x in r["roles"]),
            status=AgentStatus(r["status"]),
            key_hash=r["key_hash"],
            created_at=_req_ts(r["created_at"]),
            updated_at=_req_ts(r["updated_at"]),
            read_scope=frozenset(r["read_scope"]),
            bootstrap=bool(r["bootstrap"]),
        )

    return decode_rows("agent", _plain_rows(table), decode)


def sessions_to_arrow(sessions: Iterable[Session]) -> pa.Table:
    rows = [
        {
            "id": s.id,
            "tenant_id": s.tenant_id,
            "agent_id": s.agent_id,
            "project_id": s.project_id,
            "opened_at": s.opened_at,
            "closed_at": s.closed_at,
        }
        for s in sessions
    ]
    return _table(rows, SESSION_SCHEMA)


def sessions_from_arrow(table: pa.Table) -> list[Session]:
    def decode(r: dict[str, Any]) -> Session:
        return Session(
            id=r["id"],
            tenant_id=r["tenant_id"],
            agent_id=r["agent_id"],
            project_id=r["project_id"],
            opened_at=_req_ts(r["opened_at"]),
            closed_at=_ts(r["closed_at"]),
        )

    return decode_rows("session", _plain_rows(table), decode)


def beacons_to_arrow(beacons: Iterable[Beacon], dims: int) -> pa.Table:
    beacons = list(beacons)
    schema = beacon_schema(dims)
    columns: dict[str, Any] = {
        name: [getattr(b, name) for b in beacons]
        for name in ("id", "tenant_id", "agent_id", "interest", "engine", "created_at", "expires_at", "removed")
    }
    flat = np.concatenate([b.embedding for b in beacons]).astype(np.float32) if beacons else np.zeros(0, np.float32)
    columns["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), dims)
    return pa.table({f.name: columns[f.name] for f in schema}, schema=schema)


def beacons_from_arrow(table: pa.Table) -> list[Beacon]:
    if table.num_rows == 0:
        return []
    vectors = _vectors(table, "embedding", np.float32)

    def decode(item: tuple[int, dict[str, Any]]) -> Beacon:
        i, r = item
        return Beacon(
            id=r["id"],
            tenant_id=r["tenant_id"],
            agent_id=r["agent_id"],
            interest=r["interest"],
            embedding=_finite_vector(vectors[i]),
            engine=r["engine"],
            created_at=_req_ts(r["created_at"]),
            expires_at=_ts(r["expires_at"]),
            removed=bool(r["removed"]),
        )

    return decode_rows("beacon", enumerate(_plain_rows(table.drop_columns(["embedding"]))), decode)


def agent_nodes_to_arrow(nodes: Iterable[AgentNode], dims: int) -> pa.Table:
    rows = [{"id": n.agent_id, "tenant_id": n.tenant_id, "count": n.count, "vector_sum": n.vector_sum.tolist()} for n in nodes]
    return _table(rows, agent_node_schema(dims))


def agent_nodes_from_arrow(table: pa.Table) -> list[AgentNode]:
    if table.num_rows == 0:
        return []
    sums = _vectors(table, "vector_sum", np.float64)

    def decode(item: tuple[int, dict[str, Any]]) -> AgentNode:
        i, r = item
        if not np.all(np.isfinite(sums[i])):
            raise ValueError("a stored agent-node sum is not finite")
        return AgentNode(agent_id=r["id"], tenant_id=r["tenant_id"], vector_sum=sums[i].copy(), count=max(0, int(r["count"])))

    return decode_rows("agent_node", enumerate(_plain_rows(table.drop_columns(["vector_sum"]))), decode)


def deliveries_to_arrow(rows: Iterable[tuple[str, StoredDelivery]]) -> pa.Table:
    return _table(
        [
            {
                "agent_id": agent_id,
                "seq": d.seq,
                "delivery_id": d.delivery_id,
                "diff_id": d.diff_id,
                "project_id": d.project_id,
                "score": d.score,
                "item_json": d.members,
                "delivered_at": int(d.delivered_at * 1_000_000),
            }
            for agent_id, d in rows
        ],
        DELIVERY_SCHEMA,
    )


def deliveries_from_arrow(table: pa.Table) -> list[tuple[str, StoredDelivery]]:
    def decode(r: dict[str, Any]) -> tuple[str, StoredDelivery]:
        at = r.get("delivered_at")
        stored = StoredDelivery(
            int(r["seq"]), r["delivery_id"], r["diff_id"], r["project_id"], float(r["score"]), r["item_json"], (at or 0) / 1e6
        )
        return r["agent_id"], stored

    return decode_rows("delivery", _plain_rows(table), decode)

"""Arrow schemas of the stored tables and the conversions to domain records."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from mesh.identity import Agent, AgentStatus, Role
from mesh.inbox import StoredDelivery
from mesh.model import AgentNode, Beacon, Cell, CellType, Layer, Scene, Session

_TS = pa.timestamp("us", tz="UTC")


def cell_schema(dims: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("tenant_id", pa.string(), nullable=False),
            pa.field("project_id", pa.string(), nullable=False),
            pa.field("cell_type", pa.string(), nullable=False),
            pa.field("content", pa.string(), nullable=False),
            pa.field("salience", pa.float32(), nullable=False),
            pa.field("source_agent", pa.string(), nullable=False),
            pa.field("created_at", _TS, nullable=False),
            pa.field("last_accessed", _TS, nullable=False),
            pa.field("layer", pa.string(), nullable=False),
            pa.field("scene_id", pa.string()),
            pa.field("session_id", pa.string()),
            pa.field("superseded_by", pa.string()),
            pa.field("tombstone", pa.bool_(), nullable=False),
            pa.field("engine", pa.string(), nullable=False),
            pa.field("embedding", pa.list_(pa.float32(), dims), nullable=False),
        ]
    )


def scene_schema(dims: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("tenant_id", pa.string(), nullable=False),
            pa.field("project_id", pa.string(), nullable=False),
            pa.field("created_at", _TS, nullable=False),
            pa.field("summary", pa.string(), nullable=False),
            pa.field("centroid", pa.list_(pa.float32(), dims), nullable=False),
        ]
    )


AGENT_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("display_name", pa.string(), nullable=False),
        pa.field("roles", pa.list_(pa.string()), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("key_hash", pa.string(), nullable=False),
        pa.field("read_scope", pa.list_(pa.string()), nullable=False),
        pa.field("created_at", _TS, nullable=False),
        pa.field("updated_at", _TS, nullable=False),
        pa.field("bootstrap", pa.bool_(), nullable=False),
    ]
)

SESSION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("project_id", pa.string(), nullable=False),
        pa.field("opened_at", _TS, nullable=False),
        pa.field("closed_at", _TS),
    ]
)


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


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


def cells_from_arrow(table: pa.Table) -> list[Cell]:
    if table.num_rows == 0:
        return []
    dims = table.schema.field("embedding").type.list_size
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, dims)
    rows = table.drop_columns(["embedding"]).to_pylist()
    return [
        Cell(
            id=r["id"],
            tenant_id=r["tenant_id"],
            project_id=r["project_id"],
            cell_type=CellType(r["cell_type"]),
            content=r["content"],
            salience=float(r["salience"]),
            source_agent=r["source_agent"],
            created_at=_utc(r["created_at"]),
            last_accessed=_utc(r["last_accessed"]),
            layer=Layer(r["layer"]),
            embedding=np.ascontiguousarray(vectors[i], dtype=np.float32),
            engine=r["engine"],
            scene_id=r["scene_id"],
            session_id=r["session_id"],
            superseded_by=r["superseded_by"],
            tombstone=bool(r["tombstone"]),
        )
        for i, r in enumerate(rows)
    ]


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
    return [
        Scene(
            id=r["id"],
            tenant_id=r["tenant_id"],
            project_id=r["project_id"],
            created_at=_utc(r["created_at"]),
            vector_sum=np.zeros(dims, dtype=np.float64),
            summary=r["summary"],
        )
        for r in table.drop_columns(["centroid"]).to_pylist()
    ]


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
    return [
        Agent(
            id=r["id"],
            tenant_id=r["tenant_id"],
            display_name=r["display_name"],
            roles=frozenset(Role(x) for x in r["roles"]),
            status=AgentStatus(r["status"]),
            key_hash=r["key_hash"],
            created_at=_utc(r["created_at"]),
            updated_at=_utc(r["updated_at"]),
            read_scope=frozenset(r["read_scope"]),
            bootstrap=bool(r["bootstrap"]),
        )
        for r in table.to_pylist()
    ]


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
    return [
        Session(
            id=r["id"],
            tenant_id=r["tenant_id"],
            agent_id=r["agent_id"],
            project_id=r["project_id"],
            opened_at=_utc(r["opened_at"]),
            closed_at=_utc(r["closed_at"]) if r["closed_at"] else None,
        )
        for r in table.to_pylist()
    ]


def beacon_schema(dims: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("tenant_id", pa.string(), nullable=False),
            pa.field("agent_id", pa.string(), nullable=False),
            pa.field("interest", pa.string(), nullable=False),
            pa.field("engine", pa.string(), nullable=False),
            pa.field("created_at", _TS, nullable=False),
            pa.field("expires_at", _TS),
            pa.field("removed", pa.bool_(), nullable=False),
            pa.field("embedding", pa.list_(pa.float32(), dims), nullable=False),
        ]
    )


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
    dims = table.schema.field("embedding").type.list_size
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, dims)
    return [
        Beacon(
            id=r["id"],
            tenant_id=r["tenant_id"],
            agent_id=r["agent_id"],
            interest=r["interest"],
            embedding=np.ascontiguousarray(vectors[i], dtype=np.float32),
            engine=r["engine"],
            created_at=_utc(r["created_at"]),
            expires_at=_utc(r["expires_at"]) if r["expires_at"] else None,
            removed=bool(r["removed"]),
        )
        for i, r in enumerate(table.drop_columns(["embedding"]).to_pylist())
    ]


def agent_node_schema(dims: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("tenant_id", pa.string(), nullable=False),
            pa.field("count", pa.int64(), nullable=False),
            pa.field("vector_sum", pa.list_(pa.float64(), dims), nullable=False),
        ]
    )


def agent_nodes_to_arrow(nodes: Iterable[AgentNode], dims: int) -> pa.Table:
    rows = [{"id": n.agent_id, "tenant_id": n.tenant_id, "count": n.count, "vector_sum": n.vector_sum.tolist()} for n in nodes]
    return _table(rows, agent_node_schema(dims))


def agent_nodes_from_arrow(table: pa.Table) -> list[AgentNode]:
    return [
        AgentNode(
            agent_id=r["id"], tenant_id=r["tenant_id"], vector_sum=np.asarray(r["vector_sum"], dtype=np.float64), count=r["count"]
        )
        for r in table.to_pylist()
    ]


DELIVERY_SCHEMA = pa.schema(
    [
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("delivery_id", pa.string(), nullable=False),
        pa.field("diff_id", pa.string(), nullable=False),
        pa.field("project_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("item_json", pa.string(), nullable=False),
    ]
)

CURSOR_SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("cursor", pa.int64(), nullable=False)])

PROPAGATED_SCHEMA = pa.schema([pa.field("cell_id", pa.string(), nullable=False)])


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
                "item_json": d.item_json,
            }
            for agent_id, d in rows
        ],
        DELIVERY_SCHEMA,
    )


def deliveries_from_arrow(table: pa.Table) -> list[tuple[str, StoredDelivery]]:
    return [
        (r["agent_id"], StoredDelivery(r["seq"], r["delivery_id"], r["diff_id"], r["project_id"], r["score"], r["item_json"]))
        for r in table.to_pylist()
    ]

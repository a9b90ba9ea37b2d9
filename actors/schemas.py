"""Every Arrow schema of memesh's tables, in one place (docs/storage.md lists the tables).

A schema may gain nullable columns (``LanceStore.table`` adds them to stored
tables, null-filled); any other change needs a migration. Vector columns are
fixed-size lists of float32 of the deployment's width.
"""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
"""Every timestamp column: microseconds since the epoch, UTC."""


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
            pa.field("created_at", TIMESTAMP, nullable=False),
            pa.field("last_accessed", TIMESTAMP, nullable=False),
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
            pa.field("created_at", TIMESTAMP, nullable=False),
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
        pa.field("created_at", TIMESTAMP, nullable=False),
        pa.field("updated_at", TIMESTAMP, nullable=False),
        pa.field("bootstrap", pa.bool_(), nullable=False),
    ]
)


SESSION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("project_id", pa.string(), nullable=False),
        pa.field("opened_at", TIMESTAMP, nullable=False),
        pa.field("closed_at", TIMESTAMP),
    ]
)


def beacon_schema(dims: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("tenant_id", pa.string(), nullable=False),
            pa.field("agent_id", pa.string(), nullable=False),
            pa.field("interest", pa.string(), nullable=False),
            pa.field("engine", pa.string(), nullable=False),
            pa.field("created_at", TIMESTAMP, nullable=False),
            pa.field("expires_at", TIMESTAMP),
            pa.field("removed", pa.bool_(), nullable=False),
            pa.field("embedding", pa.list_(pa.float32(), dims), nullable=False),
        ]
    )


def agent_node_schema(dims: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("tenant_id", pa.string(), nullable=False),
            pa.field("count", pa.int64(), nullable=False),
            pa.field("vector_sum", pa.list_(pa.float64(), dims), nullable=False),
        ]
    )


STANDING_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),  # a beacon id or an agent id
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("count", pa.float64(), nullable=False),
        pa.field("total", pa.float64(), nullable=False),
        pa.field("total_sq", pa.float64(), nullable=False),
    ]
)


DELIVERY_SCHEMA = pa.schema(
    [
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("delivery_id", pa.string(), nullable=False),
        pa.field("diff_id", pa.string(), nullable=False),
        pa.field("project_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("item_json", pa.string(), nullable=False),
        pa.field("delivered_at", TIMESTAMP),  # added after 0.1: null in older rows (retention then counts them as old)
    ]
)


CURSOR_SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("cursor", pa.int64(), nullable=False)])


PROPAGATED_SCHEMA = pa.schema([pa.field("cell_id", pa.string(), nullable=False)])


AUDIT_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("actor_agent", pa.string(), nullable=False),
        pa.field("actor_tenant", pa.string(), nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("prev_hash", pa.string(), nullable=False),
        pa.field("hash", pa.string(), nullable=False),
        pa.field("op_id", pa.string()),  # the caller's operation id (idempotency); not part of the chain
    ]
)


JOURNAL_SCHEMA = pa.schema(
    [
        pa.field("erase_id", pa.string(), nullable=False),
        pa.field("scope_kind", pa.string(), nullable=False),
        pa.field("scope_id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("actor_agent", pa.string(), nullable=False),
        pa.field("actor_tenant", pa.string(), nullable=False),
        pa.field("plan", pa.string(), nullable=False),  # JSON of the ErasePlan ("{}" once done)
        pa.field("counts", pa.string(), nullable=False),  # JSON of the EraseCounts
        pa.field("created_at", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("certificate", pa.string()),  # JSON {"counts", "digest", "erase_id", ...} once done
        pa.field("answered", pa.bool_(), nullable=False),
    ]
)


DESCRIPTOR_SCHEMA = pa.schema(
    [pa.field("agent_id", pa.string(), nullable=False), pa.field("descriptor", pa.string(), nullable=False)]
)


MANIFEST_SCHEMA = pa.schema([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False)])


SUBJECT_SCHEMA = pa.schema(
    [
        pa.field("subject", pa.string(), nullable=False),
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("bound_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

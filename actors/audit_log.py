"""AuditLog: the single writer of the hash-chained audit table.

Guarantees:
- ``append`` answers only after the row is committed; a failed commit raises,
  and the caller's operation must then report failure.
- Rows are chained in one sequence by this one actor (``mesh.audit``).
- ``verify`` recomputes the chain from storage, not from memory, so a row
  altered on disk is found.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import rfc8785

from actors.directory import Directory
from actors.storage import LanceStore, LoadOnce, RowTable
from mesh.audit import AuditKind, AuditRow, chain, verify
from mesh.identity import Principal

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
    ]
)


def jcs_sha256(fields: dict[str, Any]) -> str:
    """SHA-256 over the RFC 8785 canonical JSON of ``fields``."""
    return hashlib.sha256(rfc8785.dumps(fields)).hexdigest()


@dataclass(frozen=True, slots=True)
class AuditLogConfig:
    storage_uri: str
    cache_mb: int = 32


class AuditLog:
    def __init__(self, config: AuditLogConfig) -> None:
        self.config = config
        self._table: RowTable | None = None
        self._last: AuditRow | None = None
        self._lock = asyncio.Lock()
        self._ready = LoadOnce(self._load)

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage_uri, self.config.cache_mb << 20)
        self._table = await store.table("audit_log", AUDIT_SCHEMA)
        rows = await self._rows()
        self._last = max(rows, key=lambda r: r.seq) if rows else None

    async def _rows(self) -> list[AuditRow]:
        assert self._table is not None
        return [AuditRow(**r) for r in (await self._table.read_all()).to_pylist()]

    async def append(
        self, kind: str, actor_agent: str, actor_tenant: str, target: str, outcome: str, detail: dict[str, Any]
    ) -> AuditRow:
        """Chain and commit one row; answers once it is durable."""
        await self._ready()
        assert self._table is not None
        async with self._lock:  # one chain: rows are linked and committed in order
            row = chain(
                self._last,
                datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                AuditKind(kind),
                actor_agent,
                actor_tenant,
                target,
                outcome,
                rfc8785.dumps(detail).decode(),
                jcs_sha256,
            )
            await self._table.append(pa.Table.from_pylist([asdict(row)], schema=AUDIT_SCHEMA))
            self._last = row
            return row

    async def verify(self) -> dict[str, Any]:
        """Recompute the stored chain: ``{"ok", "rows", "first_bad_seq"}``."""
        await self._ready()
        rows = await self._rows()
        bad = verify(rows, jcs_sha256)
        return {"ok": bad is None, "rows": len(rows), "first_bad_seq": bad}

    async def rows(self, after: int, limit: int) -> list[AuditRow]:
        await self._ready()
        return sorted((r for r in await self._rows() if r.seq > after), key=lambda r: r.seq)[:limit]

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {"rows": self._last.seq if self._last else 0, "pid": os.getpid()}

    async def close(self) -> None:
        return None


async def record(
    directory: Directory, actor: Principal, kind: AuditKind, target: str, outcome: str, detail: dict[str, Any]
) -> None:
    """Write one control-plane audit row and return once it is durable; raises when it cannot be written,
    so the operation it records fails too. ``detail`` must hold no secret."""
    await directory.audit_log().call("append", kind.value, actor.agent_id, actor.tenant_id, target, outcome, detail)

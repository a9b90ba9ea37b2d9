"""Cells an agent manages by id: read one, list them in keyset pages, delete one it wrote.

Guarantees:
- Every read is confined to the caller's tenant and read scope: a cell of
  another tenant, outside the scope, absent, erased or deleted is the same
  NotFound (nothing tells them apart).
- A listing is a keyset page in id order (creation order for v7 ids) with the
  filters of ``query`` (project, cell types, layer, scene, source agent) and
  live cells only unless ``include_superseded``; pages never repeat or skip a
  cell that stayed stored while the caller paged.
- ``delete`` tombstones a cell: it leaves ``query``, ``recall``, listings and
  reads at once (the shard commits before the answer). Only the agent that
  wrote the cell (holding a write role) or an admin of its tenant deletes it
  (others in the tenant who can read it get Forbidden). The audit row
  (``NodeDeleted``, reason ``user_delete``) is durable before the tombstone,
  and the tombstone never runs across a reembed's switch. A deleted cell is
  gone: a second delete is NotFound. The content stays in storage until an
  operator's erase removes it (``docs/data-lifecycle.md``).
"""

from __future__ import annotations

import asyncio

from head.access_times import AccessTimes
from head.audit import record
from head.embedding import SwitchGate
from mesh.audit import AuditKind
from mesh.erasure import DeleteReason
from mesh.errors import Forbidden, NotFound, ValidationFailed
from mesh.identity import Principal
from mesh.model import Cell
from mesh.query import NodeFilter
from mesh.seam import Directory, scene_shards


class CellService:
    def __init__(self, directory: Directory, gate: SwitchGate, max_list: int, access: AccessTimes) -> None:
        self._dir = directory
        self._gate = gate
        self._max_list = max_list
        self._access = access  # recall's access times not sent yet: sent before a read, so it sees them

    async def get(self, principal: Principal, cell_id: str) -> Cell:
        """The caller's tenant's cell ``cell_id`` within its read scope (live or superseded); NotFound otherwise."""
        _, cell = await self._find(principal, cell_id)
        return cell

    async def list(self, principal: Principal, flt: NodeFilter, after: str | None, limit: int) -> tuple[list[Cell], bool]:
        """One keyset page of cells (id order) strictly after ``after``, and whether more follow."""
        if not 1 <= limit <= self._max_list:
            raise ValidationFailed(f"limit must be between 1 and {self._max_list}")
        flt = flt.within(principal.read_scope)
        shards = scene_shards(self._dir)
        await self._access.send_now(range(len(shards)))  # so the listing sees the recalls before it
        parts = await asyncio.gather(*(s.list_cells(principal.tenant_id, flt, after, limit + 1) for s in shards))
        cells = sorted((c for part in parts for c in part), key=lambda c: c.id)
        return cells[:limit], len(cells) > limit

    async def delete(self, principal: Principal, cell_id: str) -> None:
        """Tombstone a cell the caller wrote (or, as an admin, any cell of its tenant it can read). Deleting it
        again succeeds and changes nothing (spec section 3); to anyone else a tombstoned cell is not found."""
        shard, cell = await self._find(principal, cell_id, tombstoned=True)
        wrote_it = cell.source_agent == principal.agent_id and principal.can_write
        if not (wrote_it or principal.is_admin):
            if cell.tombstone:  # gone for every reader
                raise NotFound("cell not found")
            raise Forbidden("only the agent that wrote a cell, or an admin of its tenant, deletes it")
        if not cell.tombstone:  # a second delete is a no-op once the first is durable (spec section 3)
            detail = {"reason": DeleteReason.USER_DELETE.value, "tenant_id": cell.tenant_id, "node_kind": "cell"}
            await record(self._dir, principal, AuditKind.NODE_DELETED, cell_id, "ok", detail)
        async with self._gate.shared():
            await scene_shards(self._dir)[shard].delete_cell(cell_id)

    async def _find(self, principal: Principal, cell_id: str, tombstoned: bool = False) -> tuple[int, Cell]:
        shards = scene_shards(self._dir)
        await self._access.send_now(range(len(shards)))  # so the read sees the recalls before it
        found = await asyncio.gather(*(s.get_cell(principal.tenant_id, cell_id, tombstoned) for s in shards))
        for index, cell in enumerate(found):
            if cell is not None and principal.can_read_project(cell.project_id):
                return index, cell
        raise NotFound("cell not found")

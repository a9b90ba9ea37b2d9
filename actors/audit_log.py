"""AuditLog: the control plane's ledger, the hash-chained audit table and the erase journal.

Guarantees:
- ``append`` answers only after the row is committed; a failed commit raises,
  and the caller's operation must then report failure.
- ``append`` is idempotent by ``op_id``: a call replayed by Ray after a restart,
  or an erase resumed after a crash, finds its row and writes no second one.
- Rows are chained in one sequence by this one actor (``mesh.audit``); the
  table is compacted every ``optimize_every`` appends, so versions and
  manifests do not pile up.
- ``verify`` recomputes the chain from storage, not from memory, so a row
  altered on disk is found.
- The erase journal (:mod:`actors.erase_journal`) lives beside the chain, so
  an erase's ``Erased`` row and its journal entry have one writer.
- The maintenance slot (``begin_exclusive``): at most one reembed or online
  resize runs in the deployment, whichever head starts it, and no erase is
  journaled while a resize holds it (leases, so a head that dies mid-job
  frees it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import rfc8785

from actors.chores import LoadOnce
from actors.erase_journal import EraseJournal
from actors.schemas import AUDIT_SCHEMA
from actors.storage import LanceStore, RowTable, StorageConfig
from mesh.audit import AuditKind, AuditRow, chain, verify
from mesh.erasure import JournalEntry
from mesh.errors import Conflict, Unavailable
from mesh.times import rfc3339

_CHAIN_FIELDS = [f.name for f in fields(AuditRow)]
REMEMBERED_OPS = 100_000


def jcs_sha256(fields: dict[str, Any]) -> str:
    """SHA-256 over the RFC 8785 canonical JSON of ``fields``."""
    return hashlib.sha256(rfc8785.dumps(fields)).hexdigest()


@dataclass(frozen=True, slots=True)
class AuditLogConfig:
    storage: StorageConfig


class AuditLog:
    def __init__(self, config: AuditLogConfig) -> None:
        self.config = config
        self._table: RowTable | None = None
        self._last: AuditRow | None = None
        self._ops: OrderedDict[str, int] = OrderedDict()  # op id -> seq, the newest REMEMBERED_OPS
        self._lock = asyncio.Lock()
        self._ready = LoadOnce(self._load)
        self.journal = EraseJournal()
        self._slot: tuple[str, str, float] | None = None  # (what, holder, lease end): the maintenance slot

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage)
        self._table = await store.table("audit_log", AUDIT_SCHEMA)
        stored = await self._table.load()
        rows = [AuditRow(**r) for r in stored.select(_CHAIN_FIELDS).to_pylist()]
        self._last = max(rows, key=lambda r: r.seq) if rows else None
        ops = sorted(
            (
                (seq, op)
                for seq, op in zip(stored.column("seq").to_pylist(), stored.column("op_id").to_pylist(), strict=True)
                if op
            ),
        )
        for seq, op in ops[-REMEMBERED_OPS:]:
            self._ops[op] = seq
        await self.journal.load(store)

    async def _rows(self) -> list[AuditRow]:
        assert self._table is not None
        return [AuditRow(**r) for r in (await self._table.read_all()).select(_CHAIN_FIELDS).to_pylist()]

    async def append(
        self,
        kind: str,
        actor_agent: str,
        actor_tenant: str,
        target: str,
        outcome: str,
        detail: dict[str, Any],
        op_id: str | None = None,
    ) -> int:
        """Chain and commit one row; answers its ``seq`` once it is durable (the stored row's, when
        ``op_id`` was appended before)."""
        await self._ready()
        assert self._table is not None
        async with self._lock:  # one chain: rows are linked and committed in order
            if op_id is not None and op_id in self._ops:
                return self._ops[op_id]
            row = chain(
                self._last,
                rfc3339(datetime.now(UTC)),
                AuditKind(kind),
                actor_agent,
                actor_tenant,
                target,
                outcome,
                rfc8785.dumps(detail).decode(),
                jcs_sha256,
            )
            await self._table.append(pa.Table.from_pylist([{**asdict(row), "op_id": op_id}], schema=AUDIT_SCHEMA))
            self._last = row
            if op_id is not None:
                self._ops[op_id] = row.seq
                while len(self._ops) > REMEMBERED_OPS:
                    self._ops.popitem(last=False)
        await self._table.optimize_if_due(self.config.storage.optimize_every)
        return row.seq

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

    # ------------------------------------------------------------ erase journal
    async def journal_open(self, entry: JournalEntry) -> None:
        """Record an erase's intent (scope and plan) durably; idempotent by erase id. Unavailable (retry)
        while an online resize holds the maintenance slot: an erase's plan names shards by index."""
        await self._ready()
        if self._held_by("resize") and entry.erase_id not in self.journal.ids():
            raise Unavailable("partitions are moving between actors; retry the erase shortly")
        await self.journal.open(entry)

    def _held_by(self, what: str) -> bool:
        slot = self._slot
        return slot is not None and slot[0] == what and slot[2] > time.monotonic()

    async def begin_exclusive(self, what: str, holder: str, lease_s: float) -> None:
        """Take the deployment's one slot for long maintenance (``reembed``, ``resize``) for ``lease_s``
        seconds; the holder renews it by calling again. Conflict while another holder's lease runs, and
        for a resize also while an erase is not carried out (its plan names shards by index)."""
        await self._ready()
        slot = self._slot
        if slot is not None and slot[1] != holder and slot[2] > time.monotonic():
            raise Conflict(f"a {slot[0]} is running; try again when it ends")
        if what == "resize" and any(e.state != "done" for e in self.journal.unfinished()):
            raise Conflict("an erase is under way; resize when it is done")
        self._slot = (what, holder, time.monotonic() + lease_s)

    async def end_exclusive(self, holder: str) -> None:
        """Give the slot back (nothing when another holder has it)."""
        if self._slot is not None and self._slot[1] == holder:
            self._slot = None

    async def journal_finish(self, erase_id: str, certificate: dict[str, Any], row: dict[str, Any]) -> None:
        """Write the erase's ``Erased`` row (exactly once: ``op_id`` is the erase id), then mark the
        journal entry done with its certificate. A repeat after a crash between the two finds the row."""
        await self._ready()
        await self.append(**row, op_id=erase_id)
        await self.journal.finish(erase_id, json.dumps(certificate, sort_keys=True))

    async def journal_answered(self, erase_id: str) -> None:
        await self._ready()
        await self.journal.answered(erase_id)

    async def journal_unfinished(self) -> list[JournalEntry]:
        """Entries still pending, and done ones whose certificate no caller has received yet."""
        await self._ready()
        return self.journal.unfinished()

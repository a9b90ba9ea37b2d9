"""The erase journal: one row per erase, written before anything is removed.

Kept by the ``AuditLog`` actor (the control plane's one ledger writer) in the
``erase_journal`` table. A row holds ids, counts and the certificate, never
content: the plan names cells, diffs, beacons and agents by id.

Lifecycle of a row: ``open`` (state ``pending``: the scope, the plan and the
counts, durable before the first owner is asked to remove anything), then
``finish`` (state ``done`` with the signed certificate; the plan is dropped,
it is no longer needed), then ``answered`` once a caller has received the
certificate. Rows that are done and answered are deleted after
``KEEP_DONE_S``. Every write is an upsert by erase id, so each step is
idempotent.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from actors.schemas import JOURNAL_SCHEMA
from actors.storage import KeyedTable, LanceStore
from mesh.erasure import EraseCounts, ErasePlan, EraseScope, JournalEntry, ScopeKind

KEEP_DONE_S = 30 * 24 * 3600.0


def _row(entry: JournalEntry) -> dict[str, object]:
    return {
        "erase_id": entry.erase_id,
        "scope_kind": entry.scope.kind.value,
        "scope_id": entry.scope.id,
        "tenant_id": entry.scope.tenant_id or "",
        "actor_agent": entry.actor_agent,
        "actor_tenant": entry.actor_tenant,
        "plan": json.dumps(entry.plan.as_json()) if entry.state == "pending" else "{}",
        "counts": json.dumps(entry.counts.as_dict(), sort_keys=True),
        "created_at": entry.created_at,
        "state": entry.state,
        "certificate": json.dumps(entry.certificate, sort_keys=True) if entry.certificate is not None else None,
        "answered": entry.answered,
    }


def _entry(row: dict[str, object]) -> JournalEntry:
    plan = json.loads(str(row["plan"]))
    certificate = row.get("certificate")
    return JournalEntry(
        erase_id=str(row["erase_id"]),
        scope=EraseScope(ScopeKind(str(row["scope_kind"])), str(row["scope_id"]), str(row["tenant_id"])),
        actor_agent=str(row["actor_agent"]),
        actor_tenant=str(row["actor_tenant"]),
        plan=ErasePlan.from_json(plan) if plan else ErasePlan({}),
        counts=EraseCounts.from_dict(json.loads(str(row["counts"]))),
        created_at=str(row["created_at"]),
        state=str(row["state"]),
        certificate=json.loads(str(certificate)) if certificate else None,
        answered=bool(row["answered"]),
    )


class EraseJournal:
    """The journal rows in memory and in their table (one writer: the AuditLog actor)."""

    def __init__(self) -> None:
        self._table: KeyedTable | None = None
        self._entries: dict[str, JournalEntry] = {}

    async def load(self, store: LanceStore) -> None:
        self._table = await store.keyed("erase_journal", JOURNAL_SCHEMA, "erase_id")
        for row in (await self._table.load()).to_pylist():
            entry = _entry(row)
            self._entries[entry.erase_id] = entry
        await self._forget_old()

    async def _put(self, entry: JournalEntry) -> None:
        assert self._table is not None
        await self._table.write(pa.Table.from_pylist([_row(entry)], schema=JOURNAL_SCHEMA))
        self._entries[entry.erase_id] = entry

    async def open(self, entry: JournalEntry) -> None:
        if entry.erase_id not in self._entries:
            await self._put(entry)

    async def finish(self, erase_id: str, certificate_json: str) -> None:
        entry = self._entries[erase_id]
        if entry.state != "done":
            await self._put(replace(entry, state="done", plan=ErasePlan({}), certificate=json.loads(certificate_json)))

    async def answered(self, erase_id: str) -> None:
        entry = self._entries.get(erase_id)
        if entry is not None and not entry.answered:
            await self._put(replace(entry, answered=True))

    def ids(self) -> set[str]:
        return set(self._entries)

    def unfinished(self) -> list[JournalEntry]:
        return sorted((e for e in self._entries.values() if e.state != "done" or not e.answered), key=lambda e: e.erase_id)

    async def _forget_old(self) -> None:
        """Drop rows done and answered more than ``KEEP_DONE_S`` ago (they hold ids and counts only)."""
        assert self._table is not None
        horizon = datetime.now(UTC) - timedelta(seconds=KEEP_DONE_S)
        old = [
            e.erase_id
            for e in self._entries.values()
            if e.state == "done" and e.answered and datetime.fromisoformat(e.created_at.replace("Z", "+00:00")) < horizon
        ]
        if old:
            await self._table.delete(old)
            for erase_id in old:
                del self._entries[erase_id]

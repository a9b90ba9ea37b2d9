"""Data lifecycle use cases: node delete, and erase as a journaled operation with a signed certificate.

Guarantees:
- Authority (spec section 5): admins only; a ProjectAdmin acts inside its own
  tenant (a target in another tenant is refused with Forbidden and an
  ``AuthzDenied`` row, with nothing dispatched); an ``agent`` scope is for a
  ServiceAdmin only.
- Erase checks ``confirm`` against the scope's canonical label before it
  touches anything; a mismatch writes a ``Denied`` row and destroys nothing.
- A dry run resolves the plan and counts, and removes nothing.
- A real erase is journaled (:mod:`actors.erase_journal`):
  1. plan: every owner resolves, by id, what it holds of the scope; the scene
     shards stop the walks of those cells, so the deliveries counted are all
     there will be;
  2. the intent (scope, plan, counts) is written durably before anything is
     removed;
  3. every owner carries out its part by id (scene shards, then inbox shards,
     beacon sets, the registry's sessions and the observatory, then the
     writers' agent nodes recomputed from the cells that remain), each step
     idempotent and each leaving no byte of the erased rows in a data file;
  4. only then is the certificate signed, and the ``Erased`` audit row written
     exactly once (its op id is the erase id) with the journal marked done.
  The work runs in a task of its own: a request that times out (504) or is
  cancelled does not stop it, a failed step is retried with backoff until
  every owner is done, and after a crash ``resume`` (run at start) carries
  every pending erase to the end. A repeated request for the same scope joins
  the erase under way, or receives the certificate of one that finished
  without anyone receiving it.
- A node delete writes its audit row first (a tombstone can be retried), and
  reports success only once the row is durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from head.audit import record
from head.embedding import SwitchGate
from head.erasure_signing import ErasureSigner
from mesh.audit import AuditKind
from mesh.erasure import (
    DeleteReason,
    EraseCounts,
    ErasePlan,
    EraseScope,
    JournalEntry,
    ScopeKind,
    Selector,
    ShardErasePlan,
    check_confirm,
)
from mesh.errors import Forbidden, MemeshError, NotFound, Unavailable
from mesh.identity import Agent, Principal, require_admin
from mesh.ids import Clock, IdSource
from mesh.model import WriterSums, merge_writer_sums
from mesh.seam import Directory, beacon_sets, inbox_shards, scene_shards
from mesh.times import rfc3339

log = logging.getLogger(__name__)
RETRY_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class ErasureCertificate:
    counts: EraseCounts
    digest: str | None  # None for a dry run
    erase_id: str | None = None


@dataclass(frozen=True, slots=True)
class _Node:
    delete: Callable[[str], Awaitable[bool]]  # the owner's delete_cell or delete_beacon
    tenant_id: str
    is_cell: bool  # else a beacon


@dataclass(frozen=True, slots=True)
class _Target:
    """A resolved scope: whose data it is and what each owner must match."""

    tenant_id: str
    selector: Selector
    beacon_ids: tuple[str, ...] = ()
    agent_id: str | None = None  # agent scope: its inbox, beacons, node and sessions go too
    sessions: bool = False  # a project or agent scope also erases its sessions


def _certificate(entry: JournalEntry) -> ErasureCertificate:
    assert entry.certificate is not None
    return ErasureCertificate(entry.counts, str(entry.certificate["digest"]), entry.erase_id)


class DataService:
    def __init__(self, directory: Directory, ids: IdSource, clock: Clock, signer: ErasureSigner | None, gate: SwitchGate) -> None:
        """``gate`` is the embedder's: deletes and erasures never run across a reembed's switch."""
        self._dir = directory
        self._ids = ids
        self._clock = clock
        self._signer = signer
        self._gate = gate
        self._published: list[dict[str, Any]] = []
        self._running: dict[tuple[str, str], tuple[str, asyncio.Task[JournalEntry]]] = {}  # key -> (tenant, task)
        self._unclaimed: dict[tuple[str, str], JournalEntry] = {}  # finished, certificate not yet received

    async def publish_key(self) -> None:
        """Record this head's receipt key with the deployment's (every key ever used stays published)."""
        if self._signer is None:
            return
        (public,) = self._signer.jwks()["keys"]
        self._published = await self._dir.registry().remember_erasure_key(public)

    @property
    def public_keys(self) -> dict[str, Any]:
        """Every public key the deployment's receipts were signed with (this head's when not yet recorded)."""
        if self._published:
            return {"keys": list(self._published)}
        if self._signer is None:
            raise Unavailable("this head has no erasure signing key")
        return self._signer.jwks()

    # ------------------------------------------------------------------ delete
    async def delete_node(self, actor: Principal, node_id: str, reason: DeleteReason) -> None:
        """Tombstone a cell or remove a beacon; a second delete is a no-op that still succeeds."""
        require_admin(actor)
        node = await self._locate(node_id)
        await self._authorize_tenant(actor, node.tenant_id, node_id, "delete")
        detail = {"reason": reason.value, "tenant_id": node.tenant_id, "node_kind": "cell" if node.is_cell else "beacon"}
        await record(self._dir, actor, AuditKind.NODE_DELETED, node_id, "ok", detail)
        async with self._gate.shared():
            await node.delete(node_id)

    async def _locate(self, node_id: str) -> _Node:
        """The owner holding ``node_id`` (a cell or a beacon) and its tenant; NotFound when none does."""
        shards, sets = scene_shards(self._dir), beacon_sets(self._dir)
        cells, beacons = await asyncio.gather(
            asyncio.gather(*(s.locate(node_id) for s in shards)), asyncio.gather(*(b.locate(node_id) for b in sets))
        )
        for shard, cell in zip(shards, cells, strict=True):
            if cell is not None:
                return _Node(shard.delete_cell, cell[0], is_cell=True)
        for beacon_set, tenant_id in zip(sets, beacons, strict=True):
            if tenant_id is not None:
                return _Node(beacon_set.delete_beacon, tenant_id, is_cell=False)
        raise NotFound("node not found")

    async def _authorize_tenant(self, actor: Principal, tenant_id: str, target: str, action: str) -> None:
        if actor.is_service_admin or actor.tenant_id == tenant_id:
            return
        await record(self._dir, actor, AuditKind.AUTHZ_DENIED, target, "denied", {"action": action})
        raise Forbidden("the target belongs to another tenant")

    # ------------------------------------------------------------------- erase
    async def erase(self, actor: Principal, scope: EraseScope, confirm: str, dry_run: bool) -> ErasureCertificate:
        require_admin(actor)
        if scope.kind is ScopeKind.AGENT and not actor.is_service_admin:
            await record(self._dir, actor, AuditKind.AUTHZ_DENIED, scope.label, "denied", {"action": "erase"})
            raise Forbidden("only a ServiceAdmin erases an agent scope")
        try:
            check_confirm(scope, confirm)
        except MemeshError:
            await record(self._dir, actor, AuditKind.DENIED, scope.label, "denied", {"action": "erase", "reason": "confirm"})
            raise
        if not dry_run:
            # A repeat of an erase under way joins it; one that finished unanswered hands over its certificate.
            key = JournalEntry.key_of(scope, scope.tenant_id or actor.tenant_id)
            running = self._running.get(key)
            if running is not None:
                await self._authorize_tenant(actor, running[0], scope.label, "erase")
                return await self._claim(await asyncio.shield(running[1]))
            unclaimed = self._unclaimed.get(key)
            if unclaimed is not None:
                await self._authorize_tenant(actor, unclaimed.scope.tenant_id or "", scope.label, "erase")
                return await self._claim(unclaimed)
        target = await self._resolve(actor, scope)
        await self._authorize_tenant(actor, target.tenant_id, scope.label, "erase")
        resolved = EraseScope(scope.kind, scope.id, target.tenant_id)
        if dry_run:
            async with self._dir.gate.operation(), self._gate.shared():
                _, counts = await self._plan(target, quiesce=False)
            return ErasureCertificate(counts, None)
        if self._signer is None:
            raise Unavailable("this head has no erasure signing key")
        task = self._start(resolved, self._erase_new(actor, target, resolved))
        entry = await asyncio.shield(task)  # a timeout ends this wait, never the erase
        return await self._claim(entry)

    def _start(self, scope: EraseScope, work: Coroutine[Any, Any, JournalEntry]) -> asyncio.Task[JournalEntry]:
        key = JournalEntry.key_of(scope, scope.tenant_id or "")

        async def run() -> JournalEntry:
            try:
                async with self._dir.gate.operation():  # the plan names shards by index: one layout throughout
                    entry = await work
            finally:
                self._running.pop(key, None)
            self._unclaimed[key] = entry  # until a caller receives it
            return entry

        task = asyncio.get_running_loop().create_task(run())
        self._running[key] = (scope.tenant_id or "", task)
        return task

    async def _claim(self, entry: JournalEntry) -> ErasureCertificate:
        """Hand ``entry``'s certificate to this caller and record that a caller received it."""
        if self._unclaimed.get(entry.key) is entry:
            del self._unclaimed[entry.key]
        try:
            await self._dir.audit_log().journal_answered(entry.erase_id)
        except MemeshError:
            log.warning("could not record that erase %s was answered", entry.erase_id, exc_info=True)
        return _certificate(entry)

    async def _erase_new(self, actor: Principal, target: _Target, scope: EraseScope) -> JournalEntry:
        async with self._gate.shared():
            plan, counts = await self._plan(target, quiesce=True)
            entry = JournalEntry(
                erase_id=self._ids.new(),
                scope=scope,
                actor_agent=actor.agent_id,
                actor_tenant=actor.tenant_id,
                plan=plan,
                counts=counts,
                created_at=rfc3339(self._clock()),
            )
            await self._dir.audit_log().journal_open(entry)  # the intent is durable before anything goes
        return await self._carry_out(entry)

    async def resume(self) -> int:
        """Carry every pending erase of the journal to its end (in the background) and keep the
        certificates no caller received; returns how many erases were resumed. Run at start."""
        entries: list[JournalEntry] = await self._dir.audit_log().journal_unfinished()
        resumed = 0
        for entry in entries:
            if entry.state == "done":
                self._unclaimed[entry.key] = entry
            elif entry.key not in self._running:
                self._start(entry.scope, self._carry_out(entry))
                resumed += 1
        if resumed:
            log.warning("resuming %d erase(s) left unfinished", resumed)
        return resumed

    async def wait_idle(self, timeout_s: float) -> None:
        """Until no erase runs (tests, orderly shutdown)."""
        if self._running:
            await asyncio.wait({task for _, task in self._running.values()}, timeout=timeout_s)

    async def _carry_out(self, entry: JournalEntry) -> JournalEntry:
        """Every owner's part, then the certificate and the audit row; retried until it succeeds."""
        delay = 0.5
        while True:
            try:
                async with self._gate.shared():
                    await self._execute(entry)
                return await self._certify(entry)
            except MemeshError as exc:
                log.warning("erase %s: %s (%s); retrying in %.1f s", entry.erase_id, exc.message, exc.code, delay)
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)

    async def _certify(self, entry: JournalEntry) -> JournalEntry:
        assert self._signer is not None
        erased_at = rfc3339(self._clock())
        claims = entry.counts.as_claims(entry.scope, entry.erase_id, erased_at, entry.actor_agent)
        certificate = {"erase_id": entry.erase_id, "digest": self._signer.sign(claims), "counts": entry.counts.as_dict()}
        row = {
            "kind": AuditKind.ERASED.value,
            "actor_agent": entry.actor_agent,
            "actor_tenant": entry.actor_tenant,
            "target": entry.scope.label,
            "outcome": "ok",
            "detail": {"erase_id": entry.erase_id, **entry.counts.as_dict()},
        }
        await self._dir.audit_log().journal_finish(entry.erase_id, certificate, row)
        return replace(entry, state="done", certificate=certificate)

    async def _resolve(self, actor: Principal, scope: EraseScope) -> _Target:
        if scope.kind is ScopeKind.AGENT:
            agent: Agent = await self._dir.registry().get(scope.id)
            selector = Selector(agent.tenant_id, agent_id=agent.id)
            return _Target(agent.tenant_id, selector, agent_id=agent.id, sessions=True)
        if scope.kind is ScopeKind.PROJECT:
            tenant_id = scope.tenant_id or actor.tenant_id
            return _Target(tenant_id, Selector(tenant_id, project_id=scope.id), sessions=True)
        node = await self._locate(scope.id)
        if node.is_cell:
            return _Target(node.tenant_id, Selector(node.tenant_id, cell_ids=frozenset({scope.id})))
        return _Target(node.tenant_id, Selector(node.tenant_id), beacon_ids=(scope.id,))

    async def _plan(self, target: _Target, quiesce: bool) -> tuple[ErasePlan, EraseCounts]:
        """Every owner's part by id, and the counts the certificate carries (nothing is removed)."""
        spec = self._dir.spec
        shards: dict[int, ShardErasePlan] = {}
        selector = target.selector
        if selector.cell_ids or selector.project_id or selector.agent_id:
            answers = await asyncio.gather(
                *(self._dir.scene_shard(i).erase_plan(selector, quiesce) for i in range(spec.scene_shards))
            )
            shards = dict(enumerate(answers))
        session_scope = (target.tenant_id, selector.project_id, target.agent_id) if target.sessions else None
        plan = ErasePlan(shards, target.beacon_ids, target.agent_id, session_scope)
        diff_ids, writers = plan.diff_ids, plan.writers
        deliveries = await asyncio.gather(
            *(self._dir.inbox_shard(i).erase_count(diff_ids, target.agent_id) for i in range(spec.inbox_shards))
        )
        beacon_counts = await asyncio.gather(
            *(
                self._dir.beacon_set(i).erase_count(target.agent_id, list(target.beacon_ids), writers)
                for i in range(spec.beacon_sets)
            )
        )
        sessions = 0
        if session_scope is not None:
            sessions = await self._dir.registry().erase_sessions(*session_scope, True)
        owners = len(shards) + spec.inbox_shards + spec.beacon_sets + (session_scope is not None) + bool(diff_ids)
        counts = EraseCounts(
            nodes_removed=sum(p.nodes_removed for p in shards.values()) + sum(n for n, _ in beacon_counts),
            diffs_removed=len(diff_ids),
            deliveries_removed=sum(deliveries),
            sessions_removed=sessions,
            aggregates_recomputed=sum(p.aggregates_recomputed for p in shards.values()) + sum(a for _, a in beacon_counts),
            tombstones_propagated=owners,
        )
        return plan, counts

    async def _execute(self, entry: JournalEntry) -> None:
        """Every owner removes its part of the plan, by id (each step idempotent)."""
        plan, spec = entry.plan, self._dir.spec
        await asyncio.gather(*(self._dir.scene_shard(i).erase_cells(part) for i, part in plan.shards.items() if part.cell_ids))
        diff_ids = plan.diff_ids
        steps: list[Coroutine[Any, Any, object]] = [shard.erase(diff_ids, plan.agent_id) for shard in inbox_shards(self._dir)]
        if plan.beacon_ids or plan.agent_id:
            steps += [beacons.erase(plan.agent_id, list(plan.beacon_ids)) for beacons in beacon_sets(self._dir)]
        if plan.session_scope is not None:
            steps.append(self._dir.registry().erase_sessions(*plan.session_scope, False))
        if diff_ids:
            steps.append(self._dir.observatory().forget(diff_ids))
        await asyncio.gather(*steps)
        writers = [w for w in plan.writers if w != plan.agent_id]
        if writers:
            tenant_id = entry.scope.tenant_id or ""
            parts: list[WriterSums] = await asyncio.gather(
                *(self._dir.scene_shard(i).writer_sums(tenant_id, writers) for i in range(spec.scene_shards))
            )
            sums = merge_writer_sums(parts)
            await asyncio.gather(
                *(self._dir.beacon_set(i).set_agent_sums(tenant_id, sums, writers) for i in range(spec.beacon_sets))
            )

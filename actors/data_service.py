"""Data lifecycle use cases: node delete and erase with signed certificates.

Guarantees:
- Authority (spec section 5): admins only; a ProjectAdmin acts inside its own
  tenant (a target in another tenant is refused with Forbidden and an
  ``AuthzDenied`` row, with nothing dispatched); an ``agent`` scope is for a
  ServiceAdmin only.
- Erase checks ``confirm`` against the scope's canonical label before it
  touches anything; a mismatch writes a ``Denied`` row and destroys nothing.
- A dry run only counts. A real erase removes the data from every place it
  lives, in this order: scene shards (cells, their propagation records, scene
  aggregates recomputed, emptied scenes), then every inbox shard (deliveries of
  the erased diffs, and for an agent scope its inbox and cursor), the beacon
  sets (beacons, the agent node, writers' running means), the registry
  (sessions) and the observatory (events of the erased diffs); each owner also
  purges older table versions, so the rows leave the files.
- Every mutation writes its audit row and reports success only once the row
  is durable. Delete writes its row first (a tombstone can be retried); an
  erase cannot be undone, so its row follows the erase and carries the erase
  id and counts (the id is also in the signed receipt), and a failed row fails
  the request (a repeated erase then finds nothing and
  is certified with zero counts).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from actors.audit_log import record
from actors.clock import Clock, IdSource
from actors.directory import ActorRef, Directory
from actors.embedding import SwitchGate
from actors.erasure_signing import ErasureSigner
from actors.scene_shard import ShardErasure
from mesh.audit import AuditKind
from mesh.erasure import DeleteReason, EraseCounts, EraseScope, ScopeKind, Selector, check_confirm
from mesh.errors import Forbidden, MemeshError, NotFound, Unavailable
from mesh.identity import Agent, Principal, require_admin
from mesh.model import merge_writer_sums

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ErasureCertificate:
    counts: EraseCounts
    digest: str | None  # None for a dry run


@dataclass(frozen=True, slots=True)
class _Node:
    owner: ActorRef
    tenant_id: str
    is_cell: bool  # else a beacon


@dataclass(frozen=True, slots=True)
class _Target:
    """A resolved scope: whose data it is and what each owner must match."""

    tenant_id: str
    selector: Selector
    beacon_ids: tuple[str, ...] = ()
    agent_id: str | None = None  # agent scope: its inbox, beacons, node and sessions go too


class DataService:
    def __init__(self, directory: Directory, ids: IdSource, clock: Clock, signer: ErasureSigner | None, gate: SwitchGate) -> None:
        """``gate`` is the embedder's: deletes and erasures never run across a reembed's switch."""
        self._dir = directory
        self._ids = ids
        self._clock = clock
        self._signer = signer
        self._gate = gate
        self._published: list[dict[str, Any]] = []

    async def publish_key(self) -> None:
        """Record this head's receipt key with the deployment's (every key ever used stays published)."""
        if self._signer is None:
            return
        (public,) = self._signer.jwks()["keys"]
        self._published = await self._dir.registry().call("remember_erasure_key", public)

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
            await node.owner.call("delete_cell" if node.is_cell else "delete_beacon", node_id)

    async def _locate(self, node_id: str) -> _Node:
        """The owner holding ``node_id`` (a cell or a beacon) and its tenant; NotFound when none does."""
        spec = self._dir.spec
        shards = [self._dir.scene_shard(i) for i in range(spec.scene_shards)]
        sets = [self._dir.beacon_set(i) for i in range(spec.beacon_sets)]
        answers = await asyncio.gather(*(s.call("locate", node_id) for s in shards), *(b.call("locate", node_id) for b in sets))
        for n, answer in enumerate(answers):
            if answer is None:
                continue
            if n < len(shards):
                return _Node(shards[n], answer[0], is_cell=True)
            return _Node(sets[n - len(shards)], answer, is_cell=False)
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
        target = await self._resolve(actor, scope)
        await self._authorize_tenant(actor, target.tenant_id, scope.label, "erase")
        async with self._gate.shared():
            counts = await self._erase(target, dry_run)
        if dry_run:
            return ErasureCertificate(counts, None)
        erased_at = self._clock().isoformat().replace("+00:00", "Z")
        resolved = EraseScope(scope.kind, scope.id, target.tenant_id)
        claims = counts.as_claims(resolved, self._ids.new(), erased_at, actor.agent_id)
        if self._signer is None:
            raise Unavailable("this head has no erasure signing key")
        digest = self._signer.sign(claims)
        await record(self._dir, actor, AuditKind.ERASED, scope.label, "ok", {"erase_id": claims["erase_id"], **counts.as_dict()})
        return ErasureCertificate(counts, digest)

    async def _resolve(self, actor: Principal, scope: EraseScope) -> _Target:
        if scope.kind is ScopeKind.AGENT:
            agent: Agent = await self._dir.registry().call("get", scope.id)
            return _Target(agent.tenant_id, Selector(agent.tenant_id, agent_id=agent.id), agent_id=agent.id)
        if scope.kind is ScopeKind.PROJECT:
            tenant_id = scope.tenant_id or actor.tenant_id
            return _Target(tenant_id, Selector(tenant_id, project_id=scope.id))
        node = await self._locate(scope.id)
        if node.is_cell:
            return _Target(node.tenant_id, Selector(node.tenant_id, cell_ids=frozenset({scope.id})))
        return _Target(node.tenant_id, Selector(node.tenant_id), beacon_ids=(scope.id,))

    async def _erase(self, target: _Target, dry_run: bool) -> EraseCounts:
        spec = self._dir.spec
        counts = EraseCounts()
        shard_parts: list[ShardErasure] = []
        if target.selector.cell_ids or target.selector.project_id or target.selector.agent_id:
            shard_parts = await asyncio.gather(
                *(self._dir.scene_shard(i).call("erase", target.selector, dry_run) for i in range(spec.scene_shards))
            )
        diff_ids: list[str] = []
        for part in shard_parts:
            counts.add(part.counts)
            diff_ids += part.diff_ids
        writers = merge_writer_sums(part.writers for part in shard_parts)
        owners = [
            *(self._dir.inbox_shard(i).call("erase", diff_ids, target.agent_id, dry_run) for i in range(spec.inbox_shards)),
            *(
                self._dir.beacon_set(i).call("erase", target.agent_id, list(target.beacon_ids), writers, dry_run)
                for i in range(spec.beacon_sets)
            ),
        ]
        for part_counts in await asyncio.gather(*owners):
            counts.add(part_counts)
        if target.selector.project_id is not None or target.agent_id is not None:
            counts.sessions_removed = await self._dir.registry().call(
                "erase_sessions", target.tenant_id, target.selector.project_id, target.agent_id, dry_run
            )
            counts.tombstones_propagated += 1
        if diff_ids:
            if not dry_run:
                await self._dir.observatory().call("forget", diff_ids)
            counts.tombstones_propagated += 1
        return counts

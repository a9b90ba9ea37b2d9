"""Erasure and deletion: scopes, canonical labels, reasons, and the counts a certificate reports.

Guarantees:
- A scope's canonical label is ``node:<uuid>``, ``project:<id>`` or
  ``agent:<id>`` (spec section 4, rule 6); :func:`check_confirm` refuses any
  other confirm value before anything is touched.
- A project scope names a project *inside one tenant* (project ids are only
  unique per tenant); the tenant defaults to the caller's own.
- :class:`EraseCounts` adds up the answers of every owner; ``as_claims`` is
  what the signed digest covers.
- An erase is resolved into an :class:`ErasePlan` of ids before anything is
  removed; the plan and the counts are journaled (:class:`JournalEntry`), so
  the erase can be carried out again, by id, until every owner is done.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from mesh.errors import ValidationFailed
from mesh.ids import is_name


class ScopeKind(StrEnum):
    NODE = "node"
    PROJECT = "project"
    AGENT = "agent"


class DeleteReason(StrEnum):
    USER_DELETE = "user_delete"
    RETENTION = "retention"
    SUPERSEDED = "superseded"


@dataclass(frozen=True, slots=True)
class EraseScope:
    """What an erase removes. ``tenant_id`` is the tenant of a project scope (None for the others
    until the target is found)."""

    kind: ScopeKind
    id: str
    tenant_id: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind.value}:{self.id}"


def parse_scope(kind: str, scope_id: str, tenant_id: str | None) -> EraseScope:
    """A validated scope: a node id must be a UUID; ids and a project scope's tenant id are 1 to 128
    characters a project id may hold (:func:`mesh.ids.is_name`, so every project that can be written can
    be erased, and no erase is certified for a tenant that cannot exist)."""
    try:
        parsed = ScopeKind(kind)
    except ValueError:
        raise ValidationFailed("scope.kind must be node, project or agent") from None
    if not is_name(scope_id, 128):
        raise ValidationFailed("scope.id must be 1 to 128 printable characters")
    if parsed is ScopeKind.NODE:
        try:
            scope_id = str(uuid.UUID(scope_id))
        except ValueError:
            raise ValidationFailed("a node scope's id must be a UUID") from None
    if tenant_id is not None and parsed is not ScopeKind.PROJECT:
        raise ValidationFailed("scope.tenant_id applies to project scopes only")
    if tenant_id is not None and not is_name(tenant_id, 128):  # as a tenant's id is held everywhere else
        raise ValidationFailed("scope.tenant_id must be 1 to 128 printable characters")
    return EraseScope(parsed, scope_id, tenant_id)


def check_confirm(scope: EraseScope, confirm: str) -> None:
    """ValidationFailed unless ``confirm`` is exactly the scope's canonical label."""
    if confirm != scope.label:
        raise ValidationFailed(f"confirm must equal the scope's canonical label {scope.label!r}")


def parse_reason(reason: str | None) -> DeleteReason:
    if reason is None:
        return DeleteReason.USER_DELETE
    try:
        return DeleteReason(reason)
    except ValueError:
        raise ValidationFailed("reason must be user_delete, retention or superseded") from None


@dataclass(frozen=True, slots=True)
class Selector:
    """What an owner matches, once the scope is resolved: cells by id, by (tenant, project), or by writer."""

    tenant_id: str
    cell_ids: frozenset[str] = frozenset()
    project_id: str | None = None
    agent_id: str | None = None

    def matches(self, tenant_id: str, cell_id: str, project_id: str, source_agent: str) -> bool:
        if tenant_id != self.tenant_id:
            return False
        if self.agent_id is not None:
            return source_agent == self.agent_id
        if self.project_id is not None:
            return project_id == self.project_id
        return cell_id in self.cell_ids


@dataclass(frozen=True, slots=True)
class ShardErasePlan:
    """What one scene shard holds of an erase, resolved before anything is removed.

    ``cell_ids``: the matching cells and every Pattern abstracting one;
    ``scene_ids``: the scenes they sit in (emptied ones are removed, the
    others rewritten with fresh aggregates); ``revive_ids``: members of an
    erased Pattern that become live again; ``diff_ids``: the diffs those
    cells started; ``writers``: agents whose agent nodes must be recomputed.
    Executing a plan is idempotent: it names ids, not a query.
    """

    cell_ids: tuple[str, ...] = ()
    scene_ids: tuple[str, ...] = ()
    revive_ids: tuple[str, ...] = ()
    diff_ids: tuple[str, ...] = ()
    writers: tuple[str, ...] = ()
    nodes_removed: int = 0
    aggregates_recomputed: int = 0

    def as_json(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardErasePlan:
        return cls(
            cell_ids=tuple(data["cell_ids"]),
            scene_ids=tuple(data["scene_ids"]),
            revive_ids=tuple(data["revive_ids"]),
            diff_ids=tuple(data["diff_ids"]),
            writers=tuple(data["writers"]),
            nodes_removed=int(data["nodes_removed"]),
            aggregates_recomputed=int(data["aggregates_recomputed"]),
        )


@dataclass(slots=True)
class EraseCounts:
    """The certificate's counts (spec section 2, "Erasure certificate")."""

    nodes_removed: int = 0
    diffs_removed: int = 0
    deliveries_removed: int = 0
    sessions_removed: int = 0
    aggregates_recomputed: int = 0
    tombstones_propagated: int = 0

    def add(self, other: EraseCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> EraseCounts:
        return cls(**{f.name: int(data.get(f.name, 0)) for f in fields(cls)})

    def as_claims(self, scope: EraseScope, erase_id: str, erased_at: str, actor_agent: str) -> dict[str, Any]:
        """The receipt the digest signs: what was erased, when, by whom, and how much."""
        return {
            "erase_id": erase_id,
            "scope": {"kind": scope.kind.value, "id": scope.id, "tenant_id": scope.tenant_id},
            "label": scope.label,
            "erased_at": erased_at,
            "actor_agent": actor_agent,
            "counts": self.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class ErasePlan:
    """Every owner's part of one erase, resolved before anything is removed (what the journal keeps).

    ``shards`` maps a scene shard's index to its plan; ``beacon_ids`` and
    ``agent_id`` say what the beacon sets remove (an agent scope also removes
    that agent's inbox, beacons, node and sessions); ``session_scope`` is the
    (tenant, project, agent) whose sessions go, or None.
    """

    shards: dict[int, ShardErasePlan]
    beacon_ids: tuple[str, ...] = ()
    agent_id: str | None = None
    session_scope: tuple[str, str | None, str | None] | None = None

    @property
    def diff_ids(self) -> list[str]:
        return sorted({d for plan in self.shards.values() for d in plan.diff_ids})

    @property
    def writers(self) -> list[str]:
        return sorted({w for plan in self.shards.values() for w in plan.writers})

    def as_json(self) -> dict[str, Any]:
        return {
            "shards": {str(i): plan.as_json() for i, plan in self.shards.items()},
            "beacon_ids": list(self.beacon_ids),
            "agent_id": self.agent_id,
            "session_scope": list(self.session_scope) if self.session_scope is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErasePlan:
        scope = data.get("session_scope")
        return cls(
            shards={int(i): ShardErasePlan.from_json(p) for i, p in data["shards"].items()},
            beacon_ids=tuple(data["beacon_ids"]),
            agent_id=data["agent_id"],
            session_scope=(scope[0], scope[1], scope[2]) if scope is not None else None,
        )


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One erase as the journal holds it: its intent first (``pending``, with the plan and the counts
    the certificate will carry), then ``done`` with the signed certificate. ``answered`` records that a
    caller received the certificate (an unanswered one is handed to the next request for the scope)."""

    erase_id: str
    scope: EraseScope  # resolved: ``tenant_id`` is set
    actor_agent: str
    actor_tenant: str
    plan: ErasePlan
    counts: EraseCounts
    created_at: str  # RFC 3339
    state: str = "pending"  # pending | done
    certificate: dict[str, Any] | None = None
    answered: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.key_of(self.scope, self.scope.tenant_id or "")

    @staticmethod
    def key_of(scope: EraseScope, tenant_id: str) -> tuple[str, str]:
        """What identifies "the same erase" for a repeated request: the label, and for a project scope its
        tenant (node and agent ids are unique service-wide)."""
        return scope.label, tenant_id if scope.kind is ScopeKind.PROJECT else ""

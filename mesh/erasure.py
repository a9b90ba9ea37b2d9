"""Erasure and deletion: scopes, canonical labels, reasons, and the counts a certificate reports.

Guarantees:
- A scope's canonical label is ``node:<uuid>``, ``project:<id>`` or
  ``agent:<id>`` (spec section 4, rule 6); :func:`check_confirm` refuses any
  other confirm value before anything is touched.
- A project scope names a project *inside one tenant* (project ids are only
  unique per tenant); the tenant defaults to the caller's own.
- :class:`EraseCounts` adds up the answers of every owner; ``as_claims`` is
  what the signed digest covers.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from mesh.errors import ValidationFailed


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
    """A validated scope: a node id must be a UUID; ids are 1 to 128 printable characters."""
    try:
        parsed = ScopeKind(kind)
    except ValueError:
        raise ValidationFailed("scope.kind must be node, project or agent") from None
    if not scope_id or len(scope_id) > 128 or not scope_id.isprintable():
        raise ValidationFailed("scope.id must be 1 to 128 printable characters")
    if parsed is ScopeKind.NODE:
        try:
            scope_id = str(uuid.UUID(scope_id))
        except ValueError:
            raise ValidationFailed("a node scope's id must be a UUID") from None
    if tenant_id is not None and parsed is not ScopeKind.PROJECT:
        raise ValidationFailed("scope.tenant_id applies to project scopes only")
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

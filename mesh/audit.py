"""The audit chain: every control-plane mutation leaves one hash-chained row.

Each row's ``hash`` is a digest of the row without its hash, which includes
``prev_hash``, the hash of the row before (64 zeros for the first). The digest
is a parameter (the actors pass SHA-256 over RFC 8785 canonical JSON), so this
module stays free of serialisation libraries. Altering, removing or reordering any stored row
breaks every hash after it, so :func:`verify` names the first broken row.
Rows never hold a secret: callers pass ids and outcomes, never key material.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

Digest = Callable[[dict[str, Any]], str]

GENESIS = "0" * 64


class AuditKind(StrEnum):
    """The spec's named kinds, and the lifecycle kinds memesh adds."""

    AUTH_SUCCESS = "AuthSuccess"
    AUTH_FAILURE = "AuthFailure"
    AUTHZ_DENIED = "AuthzDenied"
    DENIED = "Denied"
    DESCRIPTOR_SET = "DescriptorSet"
    DESCRIPTOR_IMPORT = "DescriptorImport"
    NODE_DELETED = "NodeDeleted"
    ERASED = "Erased"
    REEMBED_STARTED = "ReembedStarted"
    REEMBED_FINISHED = "ReembedFinished"
    AGENT_ISSUED = "AgentIssued"
    AGENT_REVOKED = "AgentRevoked"
    AGENT_SUSPENDED = "AgentSuspended"
    AGENT_REINSTATED = "AgentReinstated"
    AGENT_ROTATED = "AgentRotated"
    SUBJECT_BOUND = "SubjectBound"  # an OIDC subject now logs in to the console as an agent
    PARTITIONS_RESIZED = "PartitionsResized"  # an online resize moved virtual partitions between actors


@dataclass(frozen=True, slots=True)
class AuditRow:
    seq: int
    ts: str  # RFC 3339
    kind: str
    actor_agent: str
    actor_tenant: str
    target: str
    outcome: str  # "ok", "denied", or "failed" (a job that ended in failure)
    detail: str  # canonical JSON of non-secret facts
    prev_hash: str
    hash: str


def chain(
    prev: AuditRow | None,
    ts: str,
    kind: AuditKind,
    actor_agent: str,
    actor_tenant: str,
    target: str,
    outcome: str,
    detail: str,
    digest: Digest,
) -> AuditRow:
    """The next row after ``prev`` (None: the first row). ``detail`` is canonical JSON of non-secret facts."""
    fields: dict[str, Any] = {
        "seq": (prev.seq + 1) if prev else 1,
        "ts": ts,
        "kind": kind.value,
        "actor_agent": actor_agent,
        "actor_tenant": actor_tenant,
        "target": target,
        "outcome": outcome,
        "detail": detail,
        "prev_hash": prev.hash if prev else GENESIS,
    }
    return AuditRow(**fields, hash=digest(fields))


def verify(rows: list[AuditRow], digest: Digest) -> int | None:
    """The ``seq`` of the first row whose position, link or hash is wrong; None when the chain holds."""
    prev_hash, expected = GENESIS, 1
    for row in sorted(rows, key=lambda r: r.seq):
        fields = {k: v for k, v in asdict(row).items() if k != "hash"}
        if row.seq != expected or row.prev_hash != prev_hash or digest(fields) != row.hash:
            return row.seq
        prev_hash, expected = row.hash, expected + 1
    return None

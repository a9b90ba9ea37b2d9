"""The head's one way to write a control-plane audit row."""

from __future__ import annotations

import uuid
from typing import Any

from mesh.audit import AuditKind
from mesh.identity import Principal
from mesh.seam import Directory


async def record(
    directory: Directory,
    actor: Principal,
    kind: AuditKind,
    target: str,
    outcome: str,
    detail: dict[str, Any],
    op_id: str | None = None,
) -> None:
    """Write one control-plane audit row and return once it is durable; raises when it cannot be written,
    so the operation it records fails too. ``detail`` must hold no secret. A fresh ``op_id`` makes the
    append exactly-once under Ray's retries."""
    op = op_id or uuid.uuid4().hex
    await directory.audit_log().append(kind.value, actor.agent_id, actor.tenant_id, target, outcome, detail, op)

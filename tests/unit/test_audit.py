"""The hash-chained audit log: pure chain, actor over real LanceDB, and what it records."""

from __future__ import annotations

import json
from dataclasses import replace

import lancedb
import pytest

from actors.audit_log import jcs_sha256
from head.facade import Memesh
from mesh.audit import AuditKind, chain, verify
from mesh.errors import Forbidden
from mesh.identity import Principal, Role
from tests.unit.conftest import ADMIN


def test_the_chain_finds_the_first_altered_removed_or_reordered_row() -> None:
    rows = []
    for i in range(5):
        rows.append(
            chain(
                rows[-1] if rows else None,
                f"2026-01-0{i + 1}T00:00:00Z",
                AuditKind.AGENT_ISSUED,
                "a",
                "t",
                f"x{i}",
                "ok",
                "{}",
                jcs_sha256,
            )
        )
    assert verify(rows, jcs_sha256) is None
    assert verify([*rows[:2], replace(rows[2], target="forged"), *rows[3:]], jcs_sha256) == 3
    assert verify([*rows[:1], *rows[2:]], jcs_sha256) == 3  # a removed row breaks the sequence
    # Storage order carries no meaning (LanceDB may move rows); reordering means swapping seq values:
    assert verify([rows[0], replace(rows[2], seq=2), replace(rows[1], seq=3), *rows[3:]], jcs_sha256) == 2
    assert verify([*rows[:4], replace(rows[4], hash="0" * 64)], jcs_sha256) == 5


async def test_lifecycle_and_denials_are_audited_without_secrets(core: Memesh, tmp_path: object) -> None:
    issued = await core.identity.issue(ADMIN, "t1", "w", ["Writer"])
    await core.identity.apply(ADMIN, issued.agent.id, "rotate")
    project_admin = Principal(
        agent_id="00000000-0000-7000-8000-0000000000aa", tenant_id="t2", roles=frozenset({Role.PROJECT_ADMIN})
    )
    with pytest.raises(Forbidden):
        await core.identity.apply(project_admin, issued.agent.id, "revoke")
    rows = await core.directory.audit_log().rows(0, 100)
    assert [(r.kind, r.outcome) for r in rows] == [("AgentIssued", "ok"), ("AgentRotated", "ok"), ("AuthzDenied", "denied")]
    assert rows[2].actor_tenant == "t2" and rows[2].target == issued.agent.id
    text = json.dumps([r.__dict__ if hasattr(r, "__dict__") else [getattr(r, f) for f in r.__slots__] for r in rows])
    assert issued.plaintext_secret not in text and "msh_" not in text
    assert (await core.identity.verify_audit(ADMIN))["ok"] is True


async def test_a_row_altered_in_storage_is_detected(core: Memesh) -> None:
    for name in ("a", "b", "c"):
        await core.identity.issue(ADMIN, "t1", name, ["Writer"])
    shard = core.directory.audit_log().target  # type: ignore[attr-defined]
    uri = shard.config.storage.uri
    db = lancedb.connect(uri)
    db.open_table("audit_log").update(where="seq = 2", values={"target": "someone-else"})
    verdict = await core.identity.verify_audit(ADMIN)
    assert verdict == {"ok": False, "rows": 3, "first_bad_seq": 2}
    with pytest.raises(Forbidden):
        await core.identity.verify_audit(Principal("w", "t1", frozenset({Role.WRITER})))
    project_admin = Principal("pa", "t1", frozenset({Role.PROJECT_ADMIN}))  # the chain's row count spans every tenant
    with pytest.raises(Forbidden, match="ServiceAdmin"):
        await core.identity.verify_audit(project_admin)
    denied = (await core.directory.audit_log().rows(0, 100))[-1]
    assert (denied.kind, denied.outcome, denied.target) == ("AuthzDenied", "denied", "audit")

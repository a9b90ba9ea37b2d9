"""Federated subjects (OIDC subject -> agent): registry, identity rules, bootstrap, audit rows.

In-process core over real LanceDB under tmp_path; no Ray.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from cluster.compose import start_core
from head.facade import Memesh
from mesh.audit import AuditKind
from mesh.errors import Conflict, Forbidden, NotFound, ValidationFailed
from mesh.identity import AgentStatus, Principal, Role
from tests.unit.conftest import ADMIN, in_process_settings


async def _rows(core: Memesh) -> list[dict[str, str]]:
    rows = await core.directory.audit_log().rows(0, 1000)
    return [{"kind": r.kind, "actor": r.actor_agent, "target": r.target, "outcome": r.outcome, "detail": r.detail} for r in rows]


async def test_issue_with_a_subject_binds_it_and_audits(core: Memesh) -> None:
    issued = await core.identity.issue(ADMIN, "acme", "alice", ["ProjectAdmin"], oidc_subject="alice@idp")
    principal = await core.identity.principal_for_subject("alice@idp")
    assert principal is not None and principal.agent_id == issued.agent.id and principal.tenant_id == "acme"
    bound = [r for r in await _rows(core) if r["kind"] == AuditKind.SUBJECT_BOUND]
    assert bound == [
        {
            "kind": "SubjectBound",
            "actor": ADMIN.agent_id,
            "target": issued.agent.id,
            "outcome": "ok",
            "detail": '{"subject":"alice@idp"}',
        }
    ]
    assert await core.identity.principal_for_subject("nobody") is None
    assert await core.identity.principal_for_subject("") is None


async def test_binding_is_idempotent_and_never_moves_a_live_subject(core: Memesh) -> None:
    first = (await core.identity.issue(ADMIN, "acme", "one", ["Writer"], oidc_subject="sub-1")).agent
    second = (await core.identity.issue(ADMIN, "acme", "two", ["Writer"])).agent
    assert (await core.identity.bind_subject(ADMIN, "sub-1", first.id)).id == first.id  # the same pair again: no change
    with pytest.raises(Conflict):
        await core.identity.bind_subject(ADMIN, "sub-1", second.id)
    agents_before = await core.directory.registry().list_agents(None, None, 100)
    with pytest.raises(Conflict):
        await core.identity.issue(ADMIN, "acme", "three", ["Writer"], oidc_subject="sub-1")  # refused before issuing
    assert await core.directory.registry().list_agents(None, None, 100) == agents_before
    await core.identity.apply(ADMIN, first.id, "suspend")
    with pytest.raises(Conflict):
        await core.identity.bind_subject(ADMIN, "sub-1", second.id)  # a suspended holder keeps it
    await core.identity.apply(ADMIN, first.id, "revoke")
    await core.identity.bind_subject(ADMIN, "sub-1", second.id)  # a revoked holder releases it
    principal = await core.identity.principal_for_subject("sub-1")
    assert principal is not None and principal.agent_id == second.id
    with pytest.raises(NotFound):
        await core.identity.bind_subject(ADMIN, "sub-2", "no-such-agent")
    with pytest.raises(ValidationFailed):
        await core.identity.bind_subject(ADMIN, "x" * 256, second.id)


async def test_only_an_active_agent_logs_in(core: Memesh) -> None:
    agent = (await core.identity.issue(ADMIN, "acme", "op", ["ProjectAdmin"], oidc_subject="op")).agent
    await core.identity.apply(ADMIN, agent.id, "suspend")
    assert await core.identity.principal_for_subject("op") is None
    await core.identity.apply(ADMIN, agent.id, "reinstate")
    assert await core.identity.principal_for_subject("op") is not None
    await core.identity.apply(ADMIN, agent.id, "revoke")
    assert await core.identity.principal_for_subject("op") is None


async def test_tenant_rules_for_binding(core: Memesh) -> None:
    project_admin = Principal("pa", "acme", frozenset({Role.PROJECT_ADMIN}))
    own = (await core.identity.issue(ADMIN, "acme", "own", ["Writer"])).agent
    foreign = (await core.identity.issue(ADMIN, "globex", "foreign", ["Writer"])).agent
    service = (await core.identity.issue(ADMIN, "acme", "root", ["ServiceAdmin"])).agent
    await core.identity.bind_subject(project_admin, "own-sub", own.id)
    with pytest.raises(Forbidden):
        await core.identity.bind_subject(project_admin, "foreign-sub", foreign.id)
    with pytest.raises(Forbidden):
        await core.identity.bind_subject(project_admin, "root-sub", service.id)  # only a ServiceAdmin grants ServiceAdmin
    with pytest.raises(Forbidden):
        await core.identity.bind_subject(Principal("w", "acme", frozenset({Role.WRITER})), "w-sub", own.id)
    denied = [r for r in await _rows(core) if r["kind"] == AuditKind.AUTHZ_DENIED]
    assert [(r["target"], r["outcome"]) for r in denied] == [(foreign.id, "denied"), (service.id, "denied")]
    assert await core.identity.principal_for_subject("foreign-sub") is None


async def test_login_rows_name_the_subject_and_hold_no_secret(core: Memesh) -> None:
    agent = (await core.identity.issue(ADMIN, "acme", "op", ["ProjectAdmin"], oidc_subject="op")).agent
    principal = await core.identity.principal_for_subject("op")
    assert principal is not None
    await core.identity.record_login("op", "ok", {"agent_id": agent.id}, principal)
    await core.identity.record_login("stranger", "denied", {"reason": "no_active_identity"})
    await core.identity.record_login(None, "denied", {"reason": "state_mismatch"})
    with pytest.raises(ValueError):
        await core.identity.record_login("op", "ok", {})
    rows = [r for r in await _rows(core) if r["kind"] in (AuditKind.AUTH_SUCCESS, AuditKind.AUTH_FAILURE)]
    assert [(r["kind"], r["actor"], r["target"], r["outcome"]) for r in rows] == [
        ("AuthSuccess", agent.id, "op", "ok"),
        ("AuthFailure", "stranger", "stranger", "denied"),
        ("AuthFailure", "anonymous", "anonymous", "denied"),
    ]
    assert json.loads(rows[1]["detail"]) == {"method": "oidc", "reason": "no_active_identity"}
    assert (await core.identity.verify_audit(ADMIN))["ok"] is True


async def test_the_bootstrap_subject_is_bound_once_across_restarts(make_core: Callable[..., Memesh], tmp_path: object) -> None:
    settings = in_process_settings(tmp_path / "data", admin={"bootstrap_oidc_subject": "root-operator"})  # type: ignore[operator]
    first = make_core(admin={"bootstrap_oidc_subject": "root-operator"})
    await start_core(first, settings)
    principal = await first.identity.principal_for_subject("root-operator")
    assert principal is not None and principal.roles == frozenset({Role.SERVICE_ADMIN}) and principal.tenant_id == "system"
    agent = await first.identity.get(principal, principal.agent_id)
    assert agent.display_name == "bootstrap-operator" and not agent.bootstrap
    assert await first.identity.ensure_bootstrap_subject("root-operator") is False
    await first.close()

    second = make_core(admin={"bootstrap_oidc_subject": "root-operator"})
    await start_core(second, settings)
    again = await second.identity.principal_for_subject("root-operator")
    assert again == principal
    agents = await second.directory.registry().list_agents(None, None, 100)
    assert sum(a.display_name == "bootstrap-operator" for a in agents) == 1
    assert sum(r["kind"] == AuditKind.SUBJECT_BOUND for r in await _rows(second)) == 1
    # A revoked bootstrap operator stays revoked across a restart.
    await second.identity.apply(ADMIN, principal.agent_id, "revoke")
    assert await second.identity.ensure_bootstrap_subject("root-operator") is False
    stored = await second.directory.registry().get(principal.agent_id)
    assert stored.status is AgentStatus.REVOKED
    await second.close()


async def test_a_bootstrap_subject_squatted_by_a_lesser_agent_does_not_stop_the_start(
    make_core: Callable[..., Memesh], tmp_path: object
) -> None:
    """Review M9: a squatted bootstrap subject stopped the start. Data written before the subject was
    reserved must still start, and the squatter must never receive the first operator's logins."""
    core = make_core()  # no bootstrap subject configured yet: nothing is reserved
    project_admin = Principal("00000000-0000-7000-8000-0000000000a1", "acme", frozenset({Role.PROJECT_ADMIN}))
    squatter = await core.identity.issue(project_admin, "acme", "squat", ["Writer"], oidc_subject="first-operator")
    settings = in_process_settings(tmp_path / "data", admin={"bootstrap_oidc_subject": "first-operator"})  # type: ignore[operator]
    core.identity._bootstrap_subject = "first-operator"  # as a head started with that setting holds it
    await start_core(core, settings)  # serves
    assert await core.identity.principal_for_subject("first-operator") is None  # ...but not as the squatter
    await core.identity.apply(ADMIN, squatter.agent.id, "revoke")
    await start_core(core, settings)  # revoked: the subject goes to a new ServiceAdmin
    principal = await core.identity.principal_for_subject("first-operator")
    assert principal is not None and principal.is_service_admin and principal.agent_id != squatter.agent.id
    await core.close()


async def test_the_bootstrap_subject_is_reserved_for_a_service_admin(make_core: Callable[..., Memesh]) -> None:
    """Review M9: once the bootstrap operator's agent was revoked, any ProjectAdmin could bind its subject."""
    core = make_core(admin={"bootstrap_oidc_subject": "first-operator"})
    project_admin = Principal("00000000-0000-7000-8000-0000000000a1", "acme", frozenset({Role.PROJECT_ADMIN}))
    with pytest.raises(Forbidden, match="reserved"):
        await core.identity.issue(project_admin, "acme", "squat", ["Writer"], oidc_subject="first-operator")
    writer = await core.identity.issue(project_admin, "acme", "w", ["Writer"])
    with pytest.raises(Forbidden, match="reserved"):
        await core.identity.bind_subject(project_admin, "first-operator", writer.agent.id)
    with pytest.raises(Forbidden, match="reserved"):  # not even a ServiceAdmin binds it to a lesser agent
        await core.identity.bind_subject(ADMIN, "first-operator", writer.agent.id)
    rows = [r for r in await core.directory.audit_log().rows(0, 1000) if r.kind == "AuthzDenied"]
    assert len(rows) == 3 and all("reserved" in r.detail for r in rows)
    await core.close()

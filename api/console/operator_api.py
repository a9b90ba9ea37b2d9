"""The operator REST API under ``/admin/api``: agents, descriptors, data lifecycle, jobs, partitions.

Every route sits behind the admin session gate (:mod:`api.console.gate`): by
the time a handler runs, the console session was checked (401 / 403 first,
even for a malformed body), the Admin bucket was charged, and the operator's
principal is the ``Operator`` dependency (:mod:`api.deps`). Handlers decode,
call one use case of the facade, and encode; authority, tenancy and audit
live in the use cases. The published erasure-receipt keys
(``public_router``) need no session.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator

from api.console.schemas import (
    AgentIssueIn,
    AgentListOut,
    AgentOut,
    CertificateOut,
    CredentialOut,
    DescriptorImportIn,
    EraseIn,
    JobOut,
    JobStartedOut,
    NodeDeleteIn,
    PartitionsOut,
    PartitionsResizeIn,
)
from api.cursors import decode_cursor, encode_cursor
from api.data.schemas import decimal_digits
from api.deps import Core, Operator
from mesh.erasure import parse_reason, parse_scope
from mesh.errors import ValidationFailed

router = APIRouter(prefix="/admin/api")


async def _no_body(request: Request) -> None:
    """A route that takes no body: none, or ``{}``. A body that is not JSON is 400, any other JSON 422 (the
    lifecycle routes revoked, suspended and rotated on ``{{`` or ``[1,2]``)."""
    raw = (await request.body()).strip()
    if not raw:
        return
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValidationFailed("the body is not valid JSON") from None
    if value != {}:
        raise ValidationFailed("this request takes no body (send none, or {})", shape=True)


NoBody = Depends(_no_body)


# ------------------------------------------------------------------ agents
@router.get("/agents", response_model=AgentListOut)
async def list_agents(
    operator: Operator,
    core: Core,
    cursor: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=500), BeforeValidator(decimal_digits)] = 50,
) -> AgentListOut:
    agents, more = await core.identity.list(operator, decode_cursor(cursor), limit)
    next_cursor = encode_cursor(agents[-1].id) if more and agents else None
    return AgentListOut(agents=[AgentOut.of(a) for a in agents], next_cursor=next_cursor)


@router.get("/agents/{agent_id}", response_model=AgentOut)
async def get_agent(agent_id: UUID, operator: Operator, core: Core) -> AgentOut:
    return AgentOut.of(await core.identity.get(operator, str(agent_id)))


@router.post("/agents", response_model=CredentialOut)
async def issue_agent(body: AgentIssueIn, operator: Operator, core: Core) -> CredentialOut:
    issued = await core.identity.issue(
        operator, body.tenant_id, body.display_name, body.roles, body.read_scope, body.credential_kind, body.oidc_subject
    )
    return CredentialOut(agent_id=issued.agent.id, plaintext_secret=issued.plaintext_secret)


@router.post("/agents/{agent_id}/revoke", dependencies=[NoBody], status_code=204)
async def revoke_agent(agent_id: UUID, operator: Operator, core: Core) -> Response:
    await core.identity.apply(operator, str(agent_id), "revoke")
    return Response(status_code=204)


@router.post("/agents/{agent_id}/suspend", dependencies=[NoBody], status_code=204)
async def suspend_agent(agent_id: UUID, operator: Operator, core: Core) -> Response:
    await core.identity.apply(operator, str(agent_id), "suspend")
    return Response(status_code=204)


@router.post("/agents/{agent_id}/reinstate", dependencies=[NoBody], status_code=204)
async def reinstate_agent(agent_id: UUID, operator: Operator, core: Core) -> Response:
    await core.identity.apply(operator, str(agent_id), "reinstate")
    return Response(status_code=204)


@router.post("/agents/{agent_id}/rotate", dependencies=[NoBody], response_model=CredentialOut)
async def rotate_agent(agent_id: UUID, operator: Operator, core: Core) -> CredentialOut:
    agent, plaintext = await core.identity.apply(operator, str(agent_id), "rotate")
    assert plaintext is not None
    return CredentialOut(agent_id=agent.id, plaintext_secret=plaintext)


# -------------------------------------------------------------- descriptors
@router.get("/agents/{agent_id}/descriptor")
async def get_descriptor(agent_id: UUID, operator: Operator, core: Core) -> dict[str, Any]:
    return (await core.descriptors.get(operator, str(agent_id))).to_json()


@router.put("/agents/{agent_id}/descriptor")
async def put_descriptor(agent_id: UUID, operator: Operator, core: Core, body: Annotated[Any, Body()]) -> dict[str, Any]:
    """Sets or replaces the descriptor: the descriptor's own JSON form without ``origin``."""
    return (await core.descriptors.put(operator, str(agent_id), body)).to_json()


@router.post("/agents/{agent_id}/descriptor/import")
async def import_descriptor(agent_id: UUID, body: DescriptorImportIn, operator: Operator, core: Core) -> dict[str, Any]:
    descriptor = await core.descriptors.import_document(
        operator, str(agent_id), body.format, body.document, body.verification_jwks, body.provider
    )
    return descriptor.to_json()


# ------------------------------------------------------------ data lifecycle
@router.post("/nodes/{node_id}/delete", status_code=204)
async def delete_node(
    node_id: str, operator: Operator, core: Core, body: Annotated[NodeDeleteIn | None, Body()] = None
) -> Response:
    scope = parse_scope("node", node_id, None)  # a node id must be a UUID (400 otherwise)
    await core.data.delete_node(operator, scope.id, parse_reason(body.reason if body else None))
    return Response(status_code=204)


@router.post("/erase", response_model=CertificateOut)
async def erase(body: EraseIn, operator: Operator, core: Core) -> CertificateOut:
    scope = parse_scope(body.scope.kind, body.scope.id, body.scope.tenant_id)
    certificate = await core.data.erase(operator, scope, body.confirm, body.dry_run)
    return CertificateOut.of(certificate.counts, certificate.digest)


@router.post("/reembed", response_model=JobStartedOut, dependencies=[NoBody])
async def start_reembed(operator: Operator, core: Core) -> JobStartedOut:
    """No body (rule 10): the engine comes from the ``embedding`` settings; ``{}`` is tolerated."""
    job = await core.reembed.start(operator)
    return JobStartedOut(job_id=job.job_id)


@router.get("/jobs/{job_id}", response_model=JobOut)
async def job_state(job_id: UUID, operator: Operator, core: Core) -> JobOut:
    return JobOut.of(core.reembed.job(operator, str(job_id)))


@router.get("/audit/verify")
async def verify_audit(operator: Operator, core: Core) -> dict[str, Any]:
    """Walk the audit hash chain (an admin): ``{ok, rows, first_bad_seq}`` (gRPC's VerifyAudit)."""
    result: dict[str, Any] = await core.identity.verify_audit(operator)
    return {"ok": result["ok"], "rows": result["rows"], "first_bad_seq": result["first_bad_seq"]}


# --------------------------------------------------------------- partitions
@router.get("/partitions", response_model=PartitionsOut)
async def partitions(operator: Operator, core: Core) -> PartitionsOut:
    """The partition layout in force and the last moves (a ServiceAdmin: the layout spans every tenant)."""
    return PartitionsOut.of(await core.resizer.in_force(operator))


@router.post("/partitions/resize", response_model=PartitionsOut)
async def resize_partitions(body: PartitionsResizeIn, operator: Operator, core: Core) -> PartitionsOut:
    """Move virtual partitions while serving (gRPC's ResizePartitions; docs/operations.md)."""
    return PartitionsOut.of(await core.resizer.resize(operator, body.wanted()))


# ------------------------------------------------------- published keys (no session)
public_router = APIRouter()


@public_router.get("/.well-known/memesh-erasure-keys.json", include_in_schema=False)
async def erasure_keys(core: Core) -> Any:
    """The public key set that verifies every erasure certificate's digest (no key, no session)."""
    return JSONResponse(core.data.public_keys, headers={"Cache-Control": "public, max-age=300"})

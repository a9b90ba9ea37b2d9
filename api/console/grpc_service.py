"""The gRPC AdminService: the agent lifecycle and data lifecycle over the facade.

Every call is admitted by :func:`api.admission.admit_grpc` (the
``x-service-key`` metadata, one token of the Admin bucket), then refused
before any dispatch unless its principal is an admin (an ``AuthzDenied``
audit row), then runs one use case. Errors map through the one table in
:mod:`api.errors` (UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from api.admission import admit_grpc
from api.console.schemas import AgentOut
from api.cursors import decode_cursor, encode_cursor
from api.errors import grpc_status
from api.grpc_data.undecodable import UndecodableRequests
from api.grpc_data.wire import uuid_field
from head.facade import Bucket, Memesh
from memesh_proto import admin_pb2, admin_pb2_grpc
from mesh.erasure import parse_reason, parse_scope
from mesh.errors import MemeshError, ValidationFailed
from mesh.identity import Agent, Principal
from mesh.times import rfc3339

T = TypeVar("T")


def agent_record(agent: Agent) -> admin_pb2.AgentRecord:
    """The agent record of the REST API, as a message (the same fields; never a secret)."""
    return admin_pb2.AgentRecord(**AgentOut.of(agent).model_dump())


async def refuse(context: grpc.aio.ServicerContext, exc: MemeshError) -> NoReturn:
    """End an admin call with ``exc``: the table's status, details ``"<code>: <message>"``."""
    await context.abort(grpc_status(exc), f"{exc.code}: {exc.message}")
    raise AssertionError("context.abort returned")  # unreachable: abort raises


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
    def __init__(self, memesh: Memesh) -> None:
        self.memesh = memesh

    async def _run(self, context: grpc.aio.ServicerContext, work: Callable[[Principal], Awaitable[T]]) -> T:
        try:
            principal = await admit_grpc(self.memesh, context, Bucket.ADMIN)
            await self.memesh.role_gate.refuse_non_admin(principal, "admin_grpc", "AdminService")
            return await work(principal)
        except MemeshError as exc:
            await refuse(context, exc)

    async def IssueAgent(self, request: admin_pb2.IssueAgentRequest, context: Any) -> admin_pb2.IssuedCredential:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.IssuedCredential:
            issued = await self.memesh.identity.issue(
                p,
                request.tenant_id,
                request.display_name,
                list(request.roles),
                list(request.read_scope),
                request.credential_kind or "api_key_hash",
                oidc_subject=request.oidc_subject or None,
            )
            return admin_pb2.IssuedCredential(agent_id=issued.agent.id, plaintext_secret=issued.plaintext_secret)

        return await self._run(context, work)

    async def ListAgents(self, request: admin_pb2.ListAgentsRequest, context: Any) -> admin_pb2.ListAgentsResponse:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.ListAgentsResponse:
            if request.limit < 0:
                raise ValidationFailed("limit must not be negative")
            agents, more = await self.memesh.identity.list(p, decode_cursor(request.cursor or None), request.limit or 50)
            next_cursor = encode_cursor(agents[-1].id) if more and agents else ""  # REST's cursors: one rule for both
            return admin_pb2.ListAgentsResponse(agents=[agent_record(a) for a in agents], next_cursor=next_cursor)

        return await self._run(context, work)

    async def GetAgent(self, request: admin_pb2.AgentRef, context: Any) -> admin_pb2.AgentRecord:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.AgentRecord:
            return agent_record(await self.memesh.identity.get(p, uuid_field(request.agent_id, "agent_id")))

        return await self._run(context, work)

    async def _lifecycle(self, action: str, request: admin_pb2.AgentRef, context: Any) -> admin_pb2.Empty:
        async def work(p: Principal) -> admin_pb2.Empty:
            await self.memesh.identity.apply(p, uuid_field(request.agent_id, "agent_id"), action)
            return admin_pb2.Empty()

        return await self._run(context, work)

    async def RevokeAgent(self, request: admin_pb2.AgentRef, context: Any) -> admin_pb2.Empty:  # noqa: N802
        return await self._lifecycle("revoke", request, context)

    async def SuspendAgent(self, request: admin_pb2.AgentRef, context: Any) -> admin_pb2.Empty:  # noqa: N802
        return await self._lifecycle("suspend", request, context)

    async def ReinstateAgent(self, request: admin_pb2.AgentRef, context: Any) -> admin_pb2.Empty:  # noqa: N802
        return await self._lifecycle("reinstate", request, context)

    async def RotateAgent(self, request: admin_pb2.AgentRef, context: Any) -> admin_pb2.IssuedCredential:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.IssuedCredential:
            agent, plaintext = await self.memesh.identity.apply(p, uuid_field(request.agent_id, "agent_id"), "rotate")
            assert plaintext is not None
            return admin_pb2.IssuedCredential(agent_id=agent.id, plaintext_secret=plaintext)

        return await self._run(context, work)

    async def VerifyAudit(self, request: admin_pb2.Empty, context: Any) -> admin_pb2.AuditVerifyResponse:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.AuditVerifyResponse:
            result = await self.memesh.identity.verify_audit(p)
            return admin_pb2.AuditVerifyResponse(ok=result["ok"], rows=result["rows"], first_bad_seq=result["first_bad_seq"] or 0)

        return await self._run(context, work)

    async def DeleteNode(self, request: admin_pb2.DeleteNodeRequest, context: Any) -> admin_pb2.Empty:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.Empty:
            scope = parse_scope("node", request.node_id, None)
            await self.memesh.data.delete_node(p, scope.id, parse_reason(request.reason or None))
            return admin_pb2.Empty()

        return await self._run(context, work)

    async def Erase(self, request: admin_pb2.EraseRequest, context: Any) -> admin_pb2.ErasureCertificate:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.ErasureCertificate:
            scope = parse_scope(request.scope_kind, request.scope_id, request.scope_tenant_id or None)
            certificate = await self.memesh.data.erase(p, scope, request.confirm, request.dry_run)
            return admin_pb2.ErasureCertificate(**certificate.counts.as_dict(), digest=certificate.digest or "")

        return await self._run(context, work)

    async def StartReembed(self, request: admin_pb2.Empty, context: Any) -> admin_pb2.JobRef:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.JobRef:
            return admin_pb2.JobRef(job_id=(await self.memesh.reembed.start(p)).job_id)

        return await self._run(context, work)

    async def GetJob(self, request: admin_pb2.JobRef, context: Any) -> admin_pb2.Job:  # noqa: N802
        async def work(p: Principal) -> admin_pb2.Job:
            job = self.memesh.reembed.job(p, uuid_field(request.job_id, "job_id"))
            return admin_pb2.Job(
                job_id=job.job_id,
                status=job.status,
                nodes_processed=job.nodes_processed,
                nodes_total=job.nodes_total,
                engine=job.engine,
                started_at=rfc3339(job.started_at),
                finished_at=rfc3339(job.finished_at) if job.finished_at else "",
            )

        return await self._run(context, work)

    async def ResizePartitions(  # noqa: N802
        self, request: admin_pb2.ResizePartitionsRequest, context: Any
    ) -> admin_pb2.ResizePartitionsResponse:
        async def work(p: Principal) -> admin_pb2.ResizePartitionsResponse:
            asked = {"scene_shard": request.scene_shards, "beacon_set": request.beacon_sets, "inbox_shard": request.inbox_shards}
            settled = await self.memesh.resizer.resize(p, {kind: n for kind, n in asked.items() if n})
            counts = settled.layout.counts
            moves = [
                admin_pb2.PartitionMove(
                    kind=m.kind,
                    count_from=m.count_from,
                    count_to=m.count_to,
                    partitions=m.partitions,
                    rows=m.rows,
                    seconds=m.seconds,
                )
                for m in settled.moves
            ]
            return admin_pb2.ResizePartitionsResponse(
                scene_shards=counts["scene_shard"],
                beacon_sets=counts["beacon_set"],
                inbox_shards=counts["inbox_shard"],
                epoch=settled.layout.epoch,
                moves=moves,
            )

        return await self._run(context, work)


def admin_interceptors(memesh: Memesh) -> list[grpc.aio.ServerInterceptor]:
    """The admin listener's interceptors: a body that is not its message is ``validation`` (after the key and
    the admin role, as every call), never gRPC's UNKNOWN."""

    async def admins_only(principal: Principal) -> None:
        await memesh.role_gate.refuse_non_admin(principal, "admin_grpc", "AdminService")

    return [UndecodableRequests(memesh, Bucket.ADMIN, admins_only, refuse)]


def add_admin_service(server: grpc.aio.Server, memesh: Memesh) -> None:
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(memesh), server)

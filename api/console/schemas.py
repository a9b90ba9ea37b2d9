"""Wire models of the operator API under ``/admin/api`` (spec sections 2 and 4).

Request models forbid unknown fields and use strict types (a wrong type is a
422 shape error, an out-of-range value a 400), as on ``/v1``. The agent record
never carries a secret; only issue and rotate answer with ``plaintext_secret``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from head.reembed import ReembedJob
from mesh.erasure import EraseCounts
from mesh.identity import Agent
from mesh.layout import Settled
from mesh.sharding import VIRTUAL_PARTITIONS
from mesh.times import rfc3339


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentIssueIn(_Request):
    display_name: StrictStr = Field(min_length=1, max_length=64)
    tenant_id: StrictStr = Field(min_length=1, max_length=128)
    credential_kind: Literal["api_key_hash"] = "api_key_hash"
    roles: list[StrictStr] = Field(min_length=1, max_length=4)
    read_scope: list[StrictStr] | None = Field(
        None, max_length=500, description="Readable projects; empty means the whole tenant."
    )
    oidc_subject: StrictStr | None = Field(
        None, min_length=1, max_length=255, description="An OIDC subject that then logs in to the console as this agent."
    )


class AgentOut(BaseModel):
    agent_id: str
    tenant_id: str
    display_name: str
    roles: list[str]
    status: str
    read_scope: list[str]
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, agent: Agent) -> AgentOut:
        return cls(
            agent_id=agent.id,
            tenant_id=agent.tenant_id,
            display_name=agent.display_name,
            roles=sorted(r.value for r in agent.roles),
            status=agent.status.value,
            read_scope=sorted(agent.read_scope),
            created_at=rfc3339(agent.created_at),
            updated_at=rfc3339(agent.updated_at),
        )


class AgentListOut(BaseModel):
    agents: list[AgentOut]
    next_cursor: str | None


class CredentialOut(BaseModel):
    """The only answer that ever carries a plaintext secret (issue and rotate)."""

    agent_id: str
    plaintext_secret: str


class DescriptorImportIn(_Request):
    format: Literal["a2a", "acp"] = Field(description="An A2A agent card (v1.0 or v0.3 shape) or an ACP agent document.")
    document: dict[str, Any]
    verification_jwks: dict[str, Any] | None = Field(None, description="Keys that must verify a signed card (never fetched).")
    provider: StrictStr | None = Field(None, min_length=1, max_length=128, description="A free-form label of the source.")


class NodeDeleteIn(_Request):
    reason: Literal["user_delete", "retention", "superseded"] | None = None


class EraseScopeIn(_Request):
    kind: Literal["node", "project", "agent"]
    id: StrictStr = Field(min_length=1, max_length=128)
    tenant_id: StrictStr | None = Field(
        None, min_length=1, max_length=128, description="A project scope's tenant; the caller's own when absent."
    )


class EraseIn(_Request):
    scope: EraseScopeIn
    confirm: StrictStr = Field(max_length=256)
    dry_run: StrictBool = Field(description="Required: an erase is never real by omission.")


class CertificateOut(BaseModel):
    nodes_removed: int
    diffs_removed: int
    deliveries_removed: int
    sessions_removed: int
    aggregates_recomputed: int
    tombstones_propagated: int
    digest: str | None = Field(description="A compact JWS (Ed25519) over the receipt; absent on a dry run.")

    @classmethod
    def of(cls, counts: EraseCounts, digest: str | None) -> CertificateOut:
        return cls(**counts.as_dict(), digest=digest)


class JobStartedOut(BaseModel):
    job_id: str


class JobOut(BaseModel):
    job_id: str
    status: Literal["running", "succeeded", "failed"]
    nodes_processed: int
    nodes_total: int
    engine: str
    started_at: str
    finished_at: str | None

    @classmethod
    def of(cls, job: ReembedJob) -> JobOut:
        return cls(
            job_id=job.job_id,
            status=job.status,  # type: ignore[arg-type]
            nodes_processed=job.nodes_processed,
            nodes_total=job.nodes_total,
            engine=job.engine,
            started_at=rfc3339(job.started_at),
            finished_at=rfc3339(job.finished_at) if job.finished_at else None,
        )


class PartitionsResizeIn(_Request):
    """The actors each partitioned kind should have (a kind left out keeps its count)."""

    scene_shards: int | None = Field(None, ge=1, le=1024, strict=True)
    beacon_sets: int | None = Field(None, ge=1, le=1024, strict=True)
    inbox_shards: int | None = Field(None, ge=1, le=1024, strict=True)

    def wanted(self) -> dict[str, int]:
        asked = {"scene_shard": self.scene_shards, "beacon_set": self.beacon_sets, "inbox_shard": self.inbox_shards}
        return {kind: n for kind, n in asked.items() if n is not None}


class PartitionMoveOut(BaseModel):
    kind: Literal["scene_shard", "beacon_set", "inbox_shard"]
    count_from: int
    count_to: int
    partitions: int
    rows: int
    seconds: float


class PartitionsOut(BaseModel):
    """The layout in force, and the moves this head's last resize (or its start) made."""

    scene_shards: int
    beacon_sets: int
    inbox_shards: int
    epoch: int
    virtual_partitions: int
    moves: list[PartitionMoveOut]

    @classmethod
    def of(cls, settled: Settled) -> PartitionsOut:
        counts = settled.layout.counts
        moves = [
            PartitionMoveOut(
                kind=m.kind,  # type: ignore[arg-type]
                count_from=m.count_from,
                count_to=m.count_to,
                partitions=m.partitions,
                rows=m.rows,
                seconds=round(m.seconds, 3),
            )
            for m in settled.moves
        ]
        return cls(
            scene_shards=counts["scene_shard"],
            beacon_sets=counts["beacon_set"],
            inbox_shards=counts["inbox_shard"],
            epoch=settled.layout.epoch,
            virtual_partitions=VIRTUAL_PARTITIONS,
            moves=moves,
        )

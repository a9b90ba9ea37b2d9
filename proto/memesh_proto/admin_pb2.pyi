from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentRef(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class AgentRecord(_message.Message):
    __slots__ = ("agent_id", "tenant_id", "display_name", "roles", "status", "read_scope", "created_at", "updated_at")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    READ_SCOPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    tenant_id: str
    display_name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    status: str
    read_scope: _containers.RepeatedScalarFieldContainer[str]
    created_at: str
    updated_at: str
    def __init__(self, agent_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., display_name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., status: _Optional[str] = ..., read_scope: _Optional[_Iterable[str]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class IssueAgentRequest(_message.Message):
    __slots__ = ("display_name", "tenant_id", "credential_kind", "roles", "read_scope", "oidc_subject")
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_KIND_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    READ_SCOPE_FIELD_NUMBER: _ClassVar[int]
    OIDC_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    display_name: str
    tenant_id: str
    credential_kind: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    read_scope: _containers.RepeatedScalarFieldContainer[str]
    oidc_subject: str
    def __init__(self, display_name: _Optional[str] = ..., tenant_id: _Optional[str] = ..., credential_kind: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., read_scope: _Optional[_Iterable[str]] = ..., oidc_subject: _Optional[str] = ...) -> None: ...

class IssuedCredential(_message.Message):
    __slots__ = ("agent_id", "plaintext_secret")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PLAINTEXT_SECRET_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    plaintext_secret: str
    def __init__(self, agent_id: _Optional[str] = ..., plaintext_secret: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("cursor", "limit")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    limit: int
    def __init__(self, cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "next_cursor")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentRecord]
    next_cursor: str
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AuditVerifyResponse(_message.Message):
    __slots__ = ("ok", "rows", "first_bad_seq")
    OK_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    FIRST_BAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    rows: int
    first_bad_seq: int
    def __init__(self, ok: _Optional[bool] = ..., rows: _Optional[int] = ..., first_bad_seq: _Optional[int] = ...) -> None: ...

class DeleteNodeRequest(_message.Message):
    __slots__ = ("node_id", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class EraseRequest(_message.Message):
    __slots__ = ("scope_kind", "scope_id", "scope_tenant_id", "confirm", "dry_run")
    SCOPE_KIND_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    scope_kind: str
    scope_id: str
    scope_tenant_id: str
    confirm: str
    dry_run: bool
    def __init__(self, scope_kind: _Optional[str] = ..., scope_id: _Optional[str] = ..., scope_tenant_id: _Optional[str] = ..., confirm: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ErasureCertificate(_message.Message):
    __slots__ = ("nodes_removed", "diffs_removed", "deliveries_removed", "sessions_removed", "aggregates_recomputed", "tombstones_propagated", "digest")
    NODES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    DIFFS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    AGGREGATES_RECOMPUTED_FIELD_NUMBER: _ClassVar[int]
    TOMBSTONES_PROPAGATED_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    nodes_removed: int
    diffs_removed: int
    deliveries_removed: int
    sessions_removed: int
    aggregates_recomputed: int
    tombstones_propagated: int
    digest: str
    def __init__(self, nodes_removed: _Optional[int] = ..., diffs_removed: _Optional[int] = ..., deliveries_removed: _Optional[int] = ..., sessions_removed: _Optional[int] = ..., aggregates_recomputed: _Optional[int] = ..., tombstones_propagated: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "status", "nodes_processed", "nodes_total", "engine", "started_at", "finished_at")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NODES_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: str
    nodes_processed: int
    nodes_total: int
    engine: str
    started_at: str
    finished_at: str
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[str] = ..., nodes_processed: _Optional[int] = ..., nodes_total: _Optional[int] = ..., engine: _Optional[str] = ..., started_at: _Optional[str] = ..., finished_at: _Optional[str] = ...) -> None: ...

class ResizePartitionsRequest(_message.Message):
    __slots__ = ("scene_shards", "beacon_sets", "inbox_shards")
    SCENE_SHARDS_FIELD_NUMBER: _ClassVar[int]
    BEACON_SETS_FIELD_NUMBER: _ClassVar[int]
    INBOX_SHARDS_FIELD_NUMBER: _ClassVar[int]
    scene_shards: int
    beacon_sets: int
    inbox_shards: int
    def __init__(self, scene_shards: _Optional[int] = ..., beacon_sets: _Optional[int] = ..., inbox_shards: _Optional[int] = ...) -> None: ...

class PartitionMove(_message.Message):
    __slots__ = ("kind", "count_from", "count_to", "partitions", "rows", "seconds")
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FROM_FIELD_NUMBER: _ClassVar[int]
    COUNT_TO_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    count_from: int
    count_to: int
    partitions: int
    rows: int
    seconds: float
    def __init__(self, kind: _Optional[str] = ..., count_from: _Optional[int] = ..., count_to: _Optional[int] = ..., partitions: _Optional[int] = ..., rows: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class ResizePartitionsResponse(_message.Message):
    __slots__ = ("scene_shards", "beacon_sets", "inbox_shards", "epoch", "moves")
    SCENE_SHARDS_FIELD_NUMBER: _ClassVar[int]
    BEACON_SETS_FIELD_NUMBER: _ClassVar[int]
    INBOX_SHARDS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    scene_shards: int
    beacon_sets: int
    inbox_shards: int
    epoch: int
    moves: _containers.RepeatedCompositeFieldContainer[PartitionMove]
    def __init__(self, scene_shards: _Optional[int] = ..., beacon_sets: _Optional[int] = ..., inbox_shards: _Optional[int] = ..., epoch: _Optional[int] = ..., moves: _Optional[_Iterable[_Union[PartitionMove, _Mapping]]] = ...) -> None: ...

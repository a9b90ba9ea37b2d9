from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class View(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VIEW_UNSPECIFIED: _ClassVar[View]
    BASIC: _ClassVar[View]
    FULL: _ClassVar[View]
VIEW_UNSPECIFIED: View
BASIC: View
FULL: View

class CellPayload(_message.Message):
    __slots__ = ("project_id", "session_id", "embedding_engine", "tombstone")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_ENGINE_FIELD_NUMBER: _ClassVar[int]
    TOMBSTONE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    session_id: str
    embedding_engine: str
    tombstone: bool
    def __init__(self, project_id: _Optional[str] = ..., session_id: _Optional[str] = ..., embedding_engine: _Optional[str] = ..., tombstone: _Optional[bool] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "tenant_id", "embedding", "cell", "cell_type", "content", "salience", "source_agent", "created_at", "last_accessed", "layer", "scene_id", "superseded_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    CELL_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SALIENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_AGENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCESSED_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant_id: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    cell: CellPayload
    cell_type: str
    content: str
    salience: float
    source_agent: str
    created_at: str
    last_accessed: str
    layer: str
    scene_id: str
    superseded_by: str
    def __init__(self, id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ..., cell: _Optional[_Union[CellPayload, _Mapping]] = ..., cell_type: _Optional[str] = ..., content: _Optional[str] = ..., salience: _Optional[float] = ..., source_agent: _Optional[str] = ..., created_at: _Optional[str] = ..., last_accessed: _Optional[str] = ..., layer: _Optional[str] = ..., scene_id: _Optional[str] = ..., superseded_by: _Optional[str] = ...) -> None: ...

class CellInput(_message.Message):
    __slots__ = ("content", "cell_type", "salience", "layer", "project_id", "session_id", "scene_id", "embedding")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CELL_TYPE_FIELD_NUMBER: _ClassVar[int]
    SALIENCE_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    content: str
    cell_type: str
    salience: float
    layer: str
    project_id: str
    session_id: str
    scene_id: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, content: _Optional[str] = ..., cell_type: _Optional[str] = ..., salience: _Optional[float] = ..., layer: _Optional[str] = ..., project_id: _Optional[str] = ..., session_id: _Optional[str] = ..., scene_id: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ...) -> None: ...

class WriteCellRequest(_message.Message):
    __slots__ = ("cell", "include_embedding")
    CELL_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    cell: CellInput
    include_embedding: bool
    def __init__(self, cell: _Optional[_Union[CellInput, _Mapping]] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class WriteCellResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: Node
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class WriteCellsRequest(_message.Message):
    __slots__ = ("cells", "include_embedding")
    CELLS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    cells: _containers.RepeatedCompositeFieldContainer[CellInput]
    include_embedding: bool
    def __init__(self, cells: _Optional[_Iterable[_Union[CellInput, _Mapping]]] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class WriteCellsResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class CellRef(_message.Message):
    __slots__ = ("cell_id", "include_embedding")
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    cell_id: str
    include_embedding: bool
    def __init__(self, cell_id: _Optional[str] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class ListCellsRequest(_message.Message):
    __slots__ = ("project_id", "cell_types", "layer", "scene_id", "source_agent", "include_superseded", "page_token", "page_size", "include_embedding")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_TYPES_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_AGENT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    cell_types: _containers.RepeatedScalarFieldContainer[str]
    layer: str
    scene_id: str
    source_agent: str
    include_superseded: bool
    page_token: str
    page_size: int
    include_embedding: bool
    def __init__(self, project_id: _Optional[str] = ..., cell_types: _Optional[_Iterable[str]] = ..., layer: _Optional[str] = ..., scene_id: _Optional[str] = ..., source_agent: _Optional[str] = ..., include_superseded: _Optional[bool] = ..., page_token: _Optional[str] = ..., page_size: _Optional[int] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class ListCellsResponse(_message.Message):
    __slots__ = ("cells", "next_page_token")
    CELLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    cells: _containers.RepeatedCompositeFieldContainer[Node]
    next_page_token: str
    def __init__(self, cells: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ("cell_types", "scene_id", "source_agent", "tenant_id")
    CELL_TYPES_FIELD_NUMBER: _ClassVar[int]
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_AGENT_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    cell_types: _containers.RepeatedScalarFieldContainer[str]
    scene_id: str
    source_agent: str
    tenant_id: str
    def __init__(self, cell_types: _Optional[_Iterable[str]] = ..., scene_id: _Optional[str] = ..., source_agent: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class RetrieveRequest(_message.Message):
    __slots__ = ("text", "embedding", "k", "filter", "layer", "view", "include_embedding", "ranking")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    text: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    k: int
    filter: Filter
    layer: str
    view: View
    include_embedding: bool
    ranking: str
    def __init__(self, text: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ..., k: _Optional[int] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., layer: _Optional[str] = ..., view: _Optional[_Union[View, str]] = ..., include_embedding: _Optional[bool] = ..., ranking: _Optional[str] = ...) -> None: ...

class Hit(_message.Message):
    __slots__ = ("node_id", "distance", "node")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    distance: float
    node: Node
    def __init__(self, node_id: _Optional[str] = ..., distance: _Optional[float] = ..., node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class RetrieveResponse(_message.Message):
    __slots__ = ("hits", "distance_metric")
    HITS_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_METRIC_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[Hit]
    distance_metric: str
    def __init__(self, hits: _Optional[_Iterable[_Union[Hit, _Mapping]]] = ..., distance_metric: _Optional[str] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class PlaceBeaconRequest(_message.Message):
    __slots__ = ("interest", "expires_at", "ttl_s")
    INTEREST_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    interest: str
    expires_at: str
    ttl_s: float
    def __init__(self, interest: _Optional[str] = ..., expires_at: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class PlaceBeaconResponse(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class RemoveBeaconRequest(_message.Message):
    __slots__ = ("beacon_id",)
    BEACON_ID_FIELD_NUMBER: _ClassVar[int]
    beacon_id: str
    def __init__(self, beacon_id: _Optional[str] = ...) -> None: ...

class Scene(_message.Message):
    __slots__ = ("id", "tenant_id", "project_id", "centroid", "summary", "created_at", "member_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CENTROID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant_id: str
    project_id: str
    centroid: _containers.RepeatedScalarFieldContainer[float]
    summary: str
    created_at: str
    member_count: int
    def __init__(self, id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., project_id: _Optional[str] = ..., centroid: _Optional[_Iterable[float]] = ..., summary: _Optional[str] = ..., created_at: _Optional[str] = ..., member_count: _Optional[int] = ...) -> None: ...

class GetSceneRequest(_message.Message):
    __slots__ = ("scene_id", "include_embedding")
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    scene_id: str
    include_embedding: bool
    def __init__(self, scene_id: _Optional[str] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class ListScenesRequest(_message.Message):
    __slots__ = ("project_id", "page_token", "page_size", "include_embedding")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_token: str
    page_size: int
    include_embedding: bool
    def __init__(self, project_id: _Optional[str] = ..., page_token: _Optional[str] = ..., page_size: _Optional[int] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class ListScenesResponse(_message.Message):
    __slots__ = ("scenes", "next_page_token")
    SCENES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scenes: _containers.RepeatedCompositeFieldContainer[Scene]
    next_page_token: str
    def __init__(self, scenes: _Optional[_Iterable[_Union[Scene, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ConsolidateSceneRequest(_message.Message):
    __slots__ = ("scene_id", "include_embedding")
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    scene_id: str
    include_embedding: bool
    def __init__(self, scene_id: _Optional[str] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class ConsolidateSceneResponse(_message.Message):
    __slots__ = ("scene_id", "patterns_created", "cells_superseded", "scene")
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERNS_CREATED_FIELD_NUMBER: _ClassVar[int]
    CELLS_SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    scene_id: str
    patterns_created: _containers.RepeatedCompositeFieldContainer[Node]
    cells_superseded: _containers.RepeatedScalarFieldContainer[str]
    scene: Scene
    def __init__(self, scene_id: _Optional[str] = ..., patterns_created: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., cells_superseded: _Optional[_Iterable[str]] = ..., scene: _Optional[_Union[Scene, _Mapping]] = ...) -> None: ...

class DiffProvenance(_message.Message):
    __slots__ = ("tenant_id", "project_id", "origin_agent", "scene_id", "session_id", "created_at")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_AGENT_FIELD_NUMBER: _ClassVar[int]
    SCENE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    project_id: str
    origin_agent: str
    scene_id: str
    session_id: str
    created_at: str
    def __init__(self, tenant_id: _Optional[str] = ..., project_id: _Optional[str] = ..., origin_agent: _Optional[str] = ..., scene_id: _Optional[str] = ..., session_id: _Optional[str] = ..., created_at: _Optional[str] = ...) -> None: ...

class Diff(_message.Message):
    __slots__ = ("id", "cell_id", "content", "cell_type", "layer", "salience", "energy", "embedding_engine", "provenance", "embedding")
    ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CELL_TYPE_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    SALIENCE_FIELD_NUMBER: _ClassVar[int]
    ENERGY_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_ENGINE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    id: str
    cell_id: str
    content: str
    cell_type: str
    layer: str
    salience: float
    energy: float
    embedding_engine: str
    provenance: DiffProvenance
    embedding: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, id: _Optional[str] = ..., cell_id: _Optional[str] = ..., content: _Optional[str] = ..., cell_type: _Optional[str] = ..., layer: _Optional[str] = ..., salience: _Optional[float] = ..., energy: _Optional[float] = ..., embedding_engine: _Optional[str] = ..., provenance: _Optional[_Union[DiffProvenance, _Mapping]] = ..., embedding: _Optional[_Iterable[float]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("score", "hops", "energy", "delivered_at", "node_id", "node_kind", "standing", "criterion", "withheld")
    SCORE_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_KIND_FIELD_NUMBER: _ClassVar[int]
    STANDING_FIELD_NUMBER: _ClassVar[int]
    CRITERION_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    score: float
    hops: int
    energy: float
    delivered_at: str
    node_id: str
    node_kind: str
    standing: float
    criterion: str
    withheld: int
    def __init__(self, score: _Optional[float] = ..., hops: _Optional[int] = ..., energy: _Optional[float] = ..., delivered_at: _Optional[str] = ..., node_id: _Optional[str] = ..., node_kind: _Optional[str] = ..., standing: _Optional[float] = ..., criterion: _Optional[str] = ..., withheld: _Optional[int] = ...) -> None: ...

class SeqInboxItem(_message.Message):
    __slots__ = ("delivery_seq", "diff", "delivery")
    DELIVERY_SEQ_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    delivery_seq: int
    diff: Diff
    delivery: Delivery
    def __init__(self, delivery_seq: _Optional[int] = ..., diff: _Optional[_Union[Diff, _Mapping]] = ..., delivery: _Optional[_Union[Delivery, _Mapping]] = ...) -> None: ...

class PullInboxRequest(_message.Message):
    __slots__ = ("since", "ack", "limit", "include_embedding")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    since: int
    ack: int
    limit: int
    include_embedding: bool
    def __init__(self, since: _Optional[int] = ..., ack: _Optional[int] = ..., limit: _Optional[int] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class PullInboxResponse(_message.Message):
    __slots__ = ("items", "cursor", "window_high", "has_more")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    WINDOW_HIGH_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[SeqInboxItem]
    cursor: int
    window_high: int
    has_more: bool
    def __init__(self, items: _Optional[_Iterable[_Union[SeqInboxItem, _Mapping]]] = ..., cursor: _Optional[int] = ..., window_high: _Optional[int] = ..., has_more: _Optional[bool] = ...) -> None: ...

class StreamInboxRequest(_message.Message):
    __slots__ = ("since", "include_embedding")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    since: int
    include_embedding: bool
    def __init__(self, since: _Optional[int] = ..., include_embedding: _Optional[bool] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("window_high", "cursor")
    WINDOW_HIGH_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    window_high: int
    cursor: int
    def __init__(self, window_high: _Optional[int] = ..., cursor: _Optional[int] = ...) -> None: ...

class Resync(_message.Message):
    __slots__ = ("reason", "resume_after")
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESUME_AFTER_FIELD_NUMBER: _ClassVar[int]
    reason: str
    resume_after: int
    def __init__(self, reason: _Optional[str] = ..., resume_after: _Optional[int] = ...) -> None: ...

class InboxEvent(_message.Message):
    __slots__ = ("item", "progress", "resync")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    item: SeqInboxItem
    progress: Progress
    resync: Resync
    def __init__(self, item: _Optional[_Union[SeqInboxItem, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., resync: _Optional[_Union[Resync, _Mapping]] = ...) -> None: ...

class AckInboxRequest(_message.Message):
    __slots__ = ("ack",)
    ACK_FIELD_NUMBER: _ClassVar[int]
    ack: int
    def __init__(self, ack: _Optional[int] = ...) -> None: ...

class AckInboxResponse(_message.Message):
    __slots__ = ("cursor",)
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    def __init__(self, cursor: _Optional[int] = ...) -> None: ...

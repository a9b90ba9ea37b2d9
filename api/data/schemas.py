"""Wire models of the /v1 data plane (JSON, spec section 2).

Request models forbid unknown fields and use strict scalar types, so a wrong
type is a shape error (422) rather than a silent coercion.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr, model_validator
from pydantic_core import PydanticCustomError

from mesh.ids import is_name
from mesh.model import Cell, CellType, Layer, Scene
from mesh.query import NodeFilter
from mesh.times import parse_rfc3339
from mesh.tuning import Ranking

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def decimal_digits(value: Any) -> Any:
    """A query parameter's integer is written in decimal digits (an optional ``-``): pydantic's lax parsing
    also read ``3_0`` as 30, ``2.0`` as 2 and ``+3`` as 3."""
    if isinstance(value, str) and not (value.isascii() and value.lstrip("-").isdigit() and value.count("-") <= 1):
        raise PydanticCustomError("int_parsing", "Input should be a whole number written in decimal digits")
    return value


# Beside a Query(): Annotated[int, Query(...), BeforeValidator(decimal_digits)], in that order, or the
# schema shows the Query's bounds as unknown keys.
QueryInt = Annotated[int, BeforeValidator(decimal_digits)]
StrictFloat = Annotated[float, Field(strict=True)]
Salience = Annotated[float, Field(ge=0.0, le=1.0, strict=True)]
Vector = list[StrictFloat]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CellIn(_Request):
    content: StrictStr = Field(min_length=1)
    cell_type: CellType
    salience: Salience = 0.5
    layer: Layer | None = None
    project_id: StrictStr | None = Field(None, min_length=1, max_length=128)
    session_id: UUID | None = None
    scene_id: UUID | None = None
    embedding: Vector | None = Field(
        None, description="Optional caller-supplied vector; its length must be the service's dimension."
    )


class CellBatchIn(_Request):
    cells: list[CellIn] = Field(min_length=1)


class FilterIn(_Request):
    cell_types: list[CellType] | None = None
    scene_id: UUID | None = None
    source_agent: StrictStr | None = None
    tenant_id: StrictStr | None = None


class QueryIn(_Request):
    """Give exactly one of ``text`` and ``embedding``."""

    text: StrictStr | None = Field(None, min_length=1, description="At most limits.max_text_chars (8,192) characters.")
    embedding: Vector | None = None
    k: StrictInt = Field(10, ge=1, description="At most limits.max_k (1,000).")
    filter: FilterIn | None = None
    layer: Layer | None = None
    ranking: Ranking | None = Field(
        None,
        description=(
            "`hybrid`: dense similarity fused with BM25 over cell content (reciprocal rank fusion); "
            "`dense`: similarity alone, nearest first. Default: the server's retrieval.ranking (hybrid). "
            "A query by `embedding` has no text, so it is always dense."
        ),
    )

    @model_validator(mode="after")
    def _text_or_embedding(self) -> QueryIn:
        """Neither is a missing required field (422); both is a bad value (400, from the use case)."""
        if self.text is None and self.embedding is None:
            raise PydanticCustomError("missing", "give text or embedding")
        return self


class SessionIn(_Request):
    project_id: StrictStr = Field(min_length=1, max_length=128)


class SessionOut(BaseModel):
    session_id: UUID


class OkOut(BaseModel):
    ok: Literal[True] = True


class CellPayload(BaseModel):
    project_id: str
    session_id: str | None
    embedding_engine: str
    tombstone: bool


class NodeOut(BaseModel):
    """A hydrated knowledge node. ``node_type`` is ``{"Cell": {...}}`` for cells."""

    id: str
    tenant_id: str
    embedding: list[float]
    node_type: dict[str, CellPayload] | Literal["Scene"]
    cell_type: CellType
    content: str
    salience: float
    source_agent: str
    created_at: datetime
    last_accessed: datetime
    layer: Layer
    scene_id: str | None
    superseded_by: str | None

    @classmethod
    def of(cls, cell: Cell) -> NodeOut:
        return cls.model_construct(
            id=cell.id,
            tenant_id=cell.tenant_id,
            embedding=cell.embedding.tolist(),
            node_type={
                "Cell": CellPayload.model_construct(
                    project_id=cell.project_id, session_id=cell.session_id, embedding_engine=cell.engine, tombstone=cell.tombstone
                )
            },
            cell_type=cell.cell_type,
            content=cell.content,
            salience=round(float(cell.salience), 6),
            source_agent=cell.source_agent,
            created_at=cell.created_at,
            last_accessed=cell.last_accessed,
            layer=cell.layer,
            scene_id=cell.scene_id,
            superseded_by=cell.superseded_by,
        )


class SceneOut(BaseModel):
    id: str
    tenant_id: str
    project_id: str
    centroid: list[float]
    summary: str
    created_at: datetime
    member_count: int = Field(description="Live member cells.")

    @classmethod
    def of(cls, scene: Scene) -> SceneOut:
        return cls.model_construct(
            id=scene.id,
            tenant_id=scene.tenant_id,
            project_id=scene.project_id,
            centroid=scene.centroid.tolist(),
            summary=scene.summary,
            created_at=scene.created_at,
            member_count=scene.live_count,
        )


class SceneListOut(BaseModel):
    scenes: list[SceneOut]
    next_cursor: str | None


def _printable(value: str) -> str:
    """A project id as a filter may name it (:func:`mesh.ids.is_name`; a written cell's is checked the same way)."""
    if not is_name(value, 128):
        raise PydanticCustomError("project_id", "project_id must be 1 to 128 printable characters")
    return value


class CellListIn(BaseModel):
    """The filters of ``GET /v1/cells`` (query parameters; ``query``'s filter members) and its keyset page.

    Unknown parameters are ignored, as on every GET route."""

    project_id: Annotated[str, AfterValidator(_printable)] | None = Field(None, min_length=1, max_length=128)
    cell_type: list[CellType] | None = Field(None, description="Repeat the parameter to allow several types.")
    layer: Layer | None = None
    scene_id: UUID | None = None
    source_agent: str | None = Field(None, min_length=1, max_length=256)
    include_superseded: bool = Field(False, description="Also list cells abstracted into a Pattern.")
    cursor: str | None = Field(None, max_length=256, description="next_cursor of the previous page.")
    limit: QueryInt = Field(50, ge=1, description="At most limits.max_list (500).")

    def node_filter(self) -> NodeFilter:
        return NodeFilter(
            cell_types=frozenset(self.cell_type) if self.cell_type else None,
            scene_id=str(self.scene_id) if self.scene_id else None,
            source_agent=self.source_agent,
            layer=self.layer,
            project_ids=frozenset({self.project_id}) if self.project_id is not None else None,
            include_superseded=self.include_superseded,
        )


class CellListOut(BaseModel):
    """A keyset page of cells in id order; the last page has no ``next_cursor``."""

    cells: list[NodeOut]
    next_cursor: str | None


class ConsolidationOut(BaseModel):
    scene_id: str
    patterns_created: list[NodeOut]
    cells_superseded: list[str]
    scene: SceneOut


class HealthOut(BaseModel):
    status: Literal["ok"]
    version: str
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorBody


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (400, 401, 403, 404, 409, 415, 422, 429, 500, 503, 504)
}
"""Every /v1 route documents the envelope for these statuses."""


def _rfc3339(value: object) -> datetime:
    """A time a client sends: an RFC 3339 string (a number or a string of another form is refused: spec 2)."""
    if not isinstance(value, str):
        raise PydanticCustomError("datetime_type", "must be an RFC 3339 date-time string")
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise PydanticCustomError("datetime_parsing", "must be an RFC 3339 date-time such as 2026-01-02T03:04:05Z") from exc


class ConsolidateIn(_Request):
    """``POST /v1/scenes/{id}/consolidate`` takes no field: an empty object, or no body."""


class BeaconIn(_Request):
    interest: StrictStr = Field(min_length=1, description="The interest text the beacon stands for.")
    expires_at: Annotated[datetime, BeforeValidator(_rfc3339)] | None = Field(
        None, description="RFC 3339 with an offset; the beacon stops attracting deliveries then."
    )
    ttl_s: Annotated[float, Field(gt=0, strict=True)] | None = Field(
        None, description="Alternative to expires_at: seconds from now."
    )


class BeaconOut(BaseModel):
    node_id: UUID


class PullIn(_Request):
    since: StrictInt | None = Field(
        None, ge=0, le=INT64_MAX, description="Page floor for this call only (strictly greater than)."
    )
    ack: StrictInt | None = Field(None, ge=0, le=INT64_MAX, description="Largest sequence all of whose items were handled.")
    limit: StrictInt | None = Field(
        None, ge=0, le=INT32_MAX, description="0 or absent: pull.max_batch; larger values are clamped to it."
    )


class DiffProvenance(BaseModel):
    tenant_id: str
    project_id: str
    origin_agent: str
    scene_id: str | None
    session_id: str | None
    created_at: datetime


class DiffOut(BaseModel):
    id: str
    cell_id: str
    content: str
    cell_type: CellType
    layer: Layer
    salience: float
    energy: float = Field(description="The diff's initial energy.")
    embedding_engine: str
    provenance: DiffProvenance
    embedding: list[float]


class DeliveryOut(BaseModel):
    score: float = Field(description="Relevance of the diff to the node that received it.")
    hops: int
    energy: float = Field(description="Energy left when the diff reached the node.")
    delivered_at: datetime
    node_id: str
    node_kind: Literal["agent", "beacon"]
    standing: float | None = Field(
        None,
        description="How far the score stands above the scores this node usually gets from its tenant's writes,"
        " in standard deviations (the match rule; docs/propagation.md).",
    )
    criterion: Literal["standout", "close_match"] | None = Field(
        None,
        description="The rule the delivery passed: `standout` (standing at least `propagation.standout`) or"
        " `close_match` (score at least `propagation.close_match`).",
    )
    withheld: int = Field(
        0,
        description="Matches of the same node in the same budget window that were not delivered (the budget kept"
        " the best): more is available through recall. Absent when 0.",
    )


class SeqInboxItem(BaseModel):
    delivery_seq: int
    diff: DiffOut
    delivery: DeliveryOut


class PullOut(BaseModel):
    items: list[SeqInboxItem]
    cursor: int
    window_high: int
    has_more: bool

"""The service's answers as typed models (the shapes of ``/openapi.json``; tests/e2e/test_sdk.py checks them
against the served document). Unknown fields are kept and an enum's value this client does not know is read
as its text (``cell_type: "Insight"``), so a newer server never breaks an older client."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CellType = Literal["Decision", "Constraint", "Risk", "Pattern", "Lesson", "Fact", "Preference", "Context", "Task"]
Layer = Literal["L0", "L1", "L2"]
Ranking = Literal["hybrid", "dense"]
# what answers carry: the values above, or one a newer server added
AnyCellType = CellType | str
AnyLayer = Layer | str


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class CellPayload(_Model):
    project_id: str
    session_id: str | None = None
    embedding_engine: str
    tombstone: bool = False


class Node(_Model):
    """A hydrated cell (``node_type`` is ``{"Cell": {...}}``)."""

    id: str
    tenant_id: str
    embedding: list[float]
    node_type: dict[str, CellPayload] | str
    cell_type: AnyCellType
    content: str
    salience: float
    source_agent: str
    created_at: datetime
    last_accessed: datetime
    layer: AnyLayer
    scene_id: str | None = None
    superseded_by: str | None = None

    @property
    def project_id(self) -> str | None:
        payload = self.node_type.get("Cell") if isinstance(self.node_type, dict) else None
        return payload.project_id if payload is not None else None


class CellPage(_Model):
    cells: list[Node]
    next_cursor: str | None = None


class Scene(_Model):
    id: str
    tenant_id: str
    project_id: str
    centroid: list[float]
    summary: str
    created_at: datetime
    member_count: int


class ScenePage(_Model):
    scenes: list[Scene]
    next_cursor: str | None = None


class Consolidation(_Model):
    scene_id: str
    patterns_created: list[Node]
    cells_superseded: list[str]
    scene: Scene


class Provenance(_Model):
    tenant_id: str
    project_id: str
    origin_agent: str
    scene_id: str | None = None
    session_id: str | None = None
    created_at: datetime


class Diff(_Model):
    id: str
    cell_id: str
    content: str
    cell_type: AnyCellType
    layer: AnyLayer
    salience: float
    energy: float
    embedding_engine: str
    provenance: Provenance
    embedding: list[float] = Field(default_factory=list)


class Delivery(_Model):
    score: float
    hops: int
    energy: float
    delivered_at: datetime
    node_id: str
    node_kind: Literal["agent", "beacon"] | str
    standing: float | None = None
    criterion: Literal["standout", "close_match"] | str | None = None
    withheld: int = 0


class InboxItem(_Model):
    delivery_seq: int
    diff: Diff
    delivery: Delivery


class PullPage(_Model):
    items: list[InboxItem]
    cursor: int
    window_high: int
    has_more: bool


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")

"""The operations a data part may ask for: their flat arguments and the use case each one calls.

Guarantees:
- A data part ``{"op": name, ...arguments}`` names one of :data:`OPERATIONS`;
  its arguments are the MCP tools' (flat, no identity among them) and are
  checked before anything runs: unknown arguments, wrong types and
  out-of-range values are refused by :func:`parse_operation`
  (:class:`InvalidArguments`, which the executor module turns into the
  JSON-RPC ``-32602``), so a refused operation changed nothing.
- Numbers arrive as doubles (a data part is a ``google.protobuf.Value``): an
  integer argument takes an integral number (``3`` or ``3.0``), never
  ``2.5``, ``true`` or ``"3"``.
- :meth:`Operation.run` charges the caller's rate-limit bucket of the
  operation's ``/v1`` twin (Read for recall, query, get_scene and the beacon
  operations; Write for write_cell and the sessions; Inbox for pull_inbox)
  before it calls the same use case as that route, with the principal the
  door admitted. Its result has the MCP tools' shapes: recall and query give
  only ``{node_id, distance}`` per hit, in rank order.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr, ValidationError
from pydantic_core import PydanticCustomError

from api.data.schemas import INT32_MAX, INT64_MAX
from api.ids import Id
from head.facade import Bucket, Memesh
from mesh.identity import Principal
from mesh.model import CellType, Layer, NewCell
from mesh.query import NodeFilter
from mesh.tuning import Ranking


def _whole(value: Any) -> Any:
    """An integral double (how a data part carries ``3``) becomes that integer; any other float is refused."""
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise PydanticCustomError("whole_number", "must be a whole number")
    return value


Whole = Annotated[int, Field(strict=True), BeforeValidator(_whole)]
Number = Annotated[float, Field(strict=True)]
Text = Annotated[StrictStr, Field(min_length=1)]


class Operation(BaseModel):
    """One operation's arguments; ``run`` calls its use case for ``principal``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: ClassVar[str]
    bucket: ClassVar[Bucket]

    async def run(self, memesh: Memesh, principal: Principal) -> dict[str, Any]:
        """Charge ``bucket``, then the use case: ``{"op", "result"}`` (reads also echo their ``scope``)."""
        self.charge(memesh, principal)
        return {"op": self.op, "result": await self.call(memesh, principal)}

    def charge(self, memesh: Memesh, principal: Principal) -> None:
        memesh.charge(principal, self.bucket)

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        raise NotImplementedError


class Search(Operation):
    bucket = Bucket.READ
    text: Text
    k: Annotated[Whole, Field(ge=1)] = 10
    cell_types: list[CellType] | None = None
    scene_id: Id | None = None
    source_agent: StrictStr | None = None
    layer: Layer | None = None
    ranking: Ranking | None = None

    def charge(self, memesh: Memesh, principal: Principal) -> None:
        memesh.charge_read(principal, self.k)  # as every door: a Read token per 100 nodes asked, at least one

    async def run(self, memesh: Memesh, principal: Principal) -> dict[str, Any]:
        """Hits, and the scope they were read in (an empty ``read_scope`` is the whole tenant)."""
        answer = await super().run(memesh, principal)
        scope = {"tenant_id": principal.tenant_id, "read_scope": sorted(principal.read_scope), "layer": self.layer}
        return {**answer, "scope": scope}

    def node_filter(self) -> NodeFilter:
        types = frozenset(self.cell_types) if self.cell_types else None
        return NodeFilter(cell_types=types, scene_id=self.scene_id, source_agent=self.source_agent, layer=self.layer)


def _hits(hits: list[tuple[Any, float]]) -> list[dict[str, Any]]:
    return [{"node_id": cell.id, "distance": round(1.0 - similarity, 6)} for cell, similarity in hits]


class Recall(Search):
    op = "recall"

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        return _hits(await memesh.memory.recall_hits(principal, self.text, None, self.k, self.node_filter(), self.ranking))


class Query(Search):
    op = "query"

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        return _hits(await memesh.memory.query_hits(principal, self.text, None, self.k, self.node_filter(), self.ranking))


class WriteCell(Operation):
    op = "write_cell"
    bucket = Bucket.WRITE
    content: Text
    cell_type: CellType
    salience: Annotated[Number, Field(ge=0.0, le=1.0)] = 0.5
    layer: Layer | None = None
    project_id: StrictStr | None = None
    session_id: Id | None = None
    scene_id: Id | None = None

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        spec = NewCell(
            content=self.content,
            cell_type=self.cell_type,
            salience=self.salience,
            layer=self.layer,
            project_id=self.project_id,
            session_id=self.session_id,
            scene_id=self.scene_id,
        )
        (cell,) = await memesh.memory.write_cells(principal, [spec])
        return {"node_id": cell.id, "scene_id": cell.scene_id}


class OpenSession(Operation):
    op = "open_session"
    bucket = Bucket.WRITE
    project_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        return {"session_id": (await memesh.memory.open_session(principal, self.project_id)).id}


class CloseSession(Operation):
    op = "close_session"
    bucket = Bucket.WRITE
    session_id: Id

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        await memesh.memory.close_session(principal, self.session_id)
        return {"ok": True}


class PlaceBeacon(Operation):
    op = "place_beacon"
    bucket = Bucket.READ
    interest: Text
    ttl_s: Annotated[Number, Field(gt=0)] | None = None

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        return {"node_id": (await memesh.inbox.place_beacon(principal, self.interest, None, self.ttl_s)).id}


class RemoveBeacon(Operation):
    op = "remove_beacon"
    bucket = Bucket.READ
    node_id: Id

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        await memesh.inbox.remove_beacon(principal, self.node_id)
        return {"ok": True}


class GetScene(Operation):
    op = "get_scene"
    bucket = Bucket.READ
    scene_id: Id

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        scene = await memesh.memory.get_scene(principal, self.scene_id)
        return {
            "id": scene.id,
            "project_id": scene.project_id,
            "summary": scene.summary,
            "members": list(scene.members),
            "member_count": scene.live_count,
        }


class PullInbox(Operation):
    op = "pull_inbox"
    bucket = Bucket.INBOX
    since: Annotated[Whole, Field(ge=0, le=INT64_MAX)] | None = None  # REST's bounds (PullIn)
    ack: Annotated[Whole, Field(ge=0, le=INT64_MAX)] | None = None
    limit: Annotated[Whole, Field(ge=0, le=INT32_MAX)] | None = None
    include_embeddings: StrictBool = False

    async def call(self, memesh: Memesh, principal: Principal) -> Any:
        page = await memesh.inbox.pull(principal, self.since, self.ack, self.limit)
        items = json.loads(page.items_json)
        if not self.include_embeddings:
            for item in items:
                item["diff"].pop("embedding", None)
        return {"items": items, "cursor": page.cursor, "window_high": page.window_high, "has_more": page.has_more}


OPERATIONS: dict[str, type[Operation]] = {
    kind.op: kind
    for kind in (Recall, Query, WriteCell, OpenSession, CloseSession, PlaceBeacon, RemoveBeacon, GetScene, PullInbox)
}


class InvalidArguments(ValueError):
    """A data part that asks for no valid operation; ``fields`` names each problem (field, what is wrong)."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {problem}" for field, problem in fields))
        self.fields = fields


def parse_operation(data: object) -> Operation:
    """The operation a data part asks for; InvalidArguments (naming every problem, at most 5) when it is not one."""
    if not isinstance(data, dict):
        raise InvalidArguments([("data", 'must be an object: {"op": ..., ...}')])
    name = data.get("op")
    kind = OPERATIONS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise InvalidArguments([("op", f"must be one of {', '.join(OPERATIONS)} (got {name!r})")])
    try:
        return kind.model_validate({k: v for k, v in data.items() if k != "op"})
    except ValidationError as exc:
        fields = [(".".join(str(p) for p in e["loc"]) or "data", str(e["msg"])) for e in exc.errors()[:5]]
        raise InvalidArguments(fields) from None


def recall_text(text: str) -> Operation:
    """A plain-text message (non-empty): recall it with the default ``k``."""
    return Recall(text=text)

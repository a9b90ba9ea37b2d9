"""Messages in and out of ``memesh.data.v1``: requests through REST's own models, answers in REST's shapes.

Guarantees:
- A request is judged by the same pydantic model its ``/v1`` route uses
  (``CellIn``, ``CellBatchIn``, ``QueryIn``, ``SessionIn``, ``BeaconIn``,
  ``PullIn``), so both surfaces refuse the same inputs; a refusal is
  :class:`InvalidRequest` (INVALID_ARGUMENT, ``validation``) naming each field
  at fault as a proto field path (``cells[0].content``). Proto3 has no
  "absent" for a plain scalar: an empty string or an empty repeated field is
  taken as not given (``optional`` fields keep their presence).
- An answer carries the fields REST's models carry (``NodeOut``, ``SceneOut``,
  ``SeqInboxItem``), with vectors (a node's embedding, a scene's centroid, a
  diff's embedding) only when the request asked (``include_embedding``).
- Inbox items come from the one rendering of :mod:`mesh.inbox_wire`, so a
  pull or stream item over gRPC holds what the REST pull page holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TypeVar
from uuid import UUID

from google.protobuf import json_format
from google.protobuf.message import Message
from pydantic import BaseModel, ValidationError

from api.errors import describe
from api.grpc_data.status import InvalidRequest, field_path
from memesh_proto import data_pb2 as pb
from mesh.model import Cell, Scene
from mesh.times import rfc3339

M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], fields: dict[str, Any], prefix: str = "") -> M:
    """``fields`` judged by ``model`` (a REST request model); InvalidRequest naming the fields at fault."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        errors = list(exc.errors())
        violations = [(field_path(e["loc"], prefix), str(e.get("msg", "invalid"))) for e in errors if e.get("loc")]
        raise InvalidRequest(describe(errors), violations) from None


def uuid_field(value: str, name: str) -> str:
    """A UUID request field (a REST path parameter) in canonical form; InvalidRequest otherwise."""
    try:
        return str(UUID(value))
    except ValueError:
        raise InvalidRequest(f"{name}: must be a UUID", [(name, "must be a UUID")]) from None


def given(message: Message, *names: str) -> dict[str, Any]:
    """The named scalar fields of ``message`` that were given: ``optional`` ones when set, plain and
    repeated ones when not empty (proto3 cannot tell an empty plain field from an absent one)."""
    fields: dict[str, Any] = {}
    for name in names:
        value = getattr(message, name)
        if message.DESCRIPTOR.fields_by_name[name].has_presence:
            if message.HasField(name):
                fields[name] = value
        elif value:
            fields[name] = list(value) if isinstance(value, Iterable) and not isinstance(value, str) else value
    return fields


def cell_fields(cell: pb.CellInput) -> dict[str, Any]:
    """A ``CellInput`` as the ``CellIn`` fields it gives (content and cell_type always)."""
    fields = given(cell, "salience", "layer", "project_id", "session_id", "scene_id", "embedding")
    return {"content": cell.content, "cell_type": cell.cell_type, **fields}


def query_fields(request: pb.RetrieveRequest) -> dict[str, Any]:
    """A ``RetrieveRequest`` as the ``QueryIn`` fields it gives."""
    fields = given(request, "text", "embedding", "k", "layer", "ranking")
    if request.HasField("filter"):
        fields["filter"] = given(request.filter, "cell_types", "scene_id", "source_agent", "tenant_id")
    return fields


# ---------------------------------------------------------------- answers
def node(cell: Cell, include_embedding: bool = False) -> pb.Node:
    """REST's ``NodeOut`` of ``cell`` as a message; the embedding only when asked."""
    message = pb.Node(
        id=cell.id,
        tenant_id=cell.tenant_id,
        cell=pb.CellPayload(
            project_id=cell.project_id, session_id=cell.session_id, embedding_engine=cell.engine, tombstone=cell.tombstone
        ),
        cell_type=cell.cell_type.value,
        content=cell.content,
        salience=round(float(cell.salience), 6),
        source_agent=cell.source_agent,
        created_at=rfc3339(cell.created_at),
        last_accessed=rfc3339(cell.last_accessed),
        layer=cell.layer.value,
        scene_id=cell.scene_id,
        superseded_by=cell.superseded_by,
    )
    if include_embedding:
        message.embedding.extend(cell.embedding.tolist())
    return message


def scene(record: Scene, include_embedding: bool = False) -> pb.Scene:
    """REST's ``SceneOut`` of ``record`` as a message; the centroid only when asked."""
    message = pb.Scene(
        id=record.id,
        tenant_id=record.tenant_id,
        project_id=record.project_id,
        summary=record.summary,
        created_at=rfc3339(record.created_at),
        member_count=record.live_count,
    )
    if include_embedding:
        message.centroid.extend(record.centroid.tolist())
    return message


def item(fields: dict[str, Any]) -> pb.SeqInboxItem:
    """One ``SeqInboxItem`` as :mod:`mesh.inbox_wire` renders it (parsed JSON; a pull page's element,
    with or without its embedding) as a message."""
    return json_format.ParseDict(fields, pb.SeqInboxItem(), ignore_unknown_fields=True)


def item_of(rendered: str, include_embedding: bool = False) -> pb.SeqInboxItem:
    """One rendered item (a stream page's element) as a message; the embedding only when asked."""
    fields = json.loads(rendered)
    if not include_embedding:
        fields["diff"].pop("embedding", None)
    return item(fields)

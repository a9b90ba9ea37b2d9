"""Each operation once: its request and how its answer is read. Both clients send these (sync and async)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar, Unpack
from urllib.parse import quote

from memesh_client.errors import ValidationFailed
from memesh_client.models import (
    CellPage,
    CellType,
    Consolidation,
    Layer,
    Node,
    PullPage,
    Ranking,
    Scene,
    ScenePage,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)


def _segment(value: str) -> str:
    """An id as one path segment: ``/``, ``?``, ``#`` and dots escaped, so an id from a model's output (``../beacons/x``,
    ``x?project_id=y``, ``..``) names no other route; the service answers 400 for what is no id."""
    return quote(str(value), safe="").replace(".", "%2E")


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _nodes(body: Any) -> list[Node]:
    return [Node.model_validate(n) for n in body]


def _ok(body: Any) -> None:
    return None


def cell(
    content: str,
    cell_type: CellType,
    salience: float | None = None,
    layer: Layer | None = None,
    project_id: str | None = None,
    session_id: str | None = None,
    scene_id: str | None = None,
    embedding: list[float] | None = None,
) -> dict[str, Any]:
    """A cell to write (the body of ``POST /v1/cells``; a list of them goes to ``write_many``)."""
    return _given(
        content=content,
        cell_type=cell_type,
        salience=salience,
        layer=layer,
        project_id=project_id,
        session_id=session_id,
        scene_id=scene_id,
        embedding=embedding,
    )


def write(body: dict[str, Any]) -> Call[Node]:
    return Call("POST", "/v1/cells", Node.model_validate, body)


def write_many(cells: list[dict[str, Any]]) -> Call[list[Node]]:
    return Call("POST", "/v1/cells:batch", _nodes, {"cells": cells})


def get_cell(cell_id: str) -> Call[Node]:
    return Call("GET", f"/v1/cells/{_segment(cell_id)}", Node.model_validate)


def list_cells(
    project_id: str | None = None,
    cell_types: list[CellType] | None = None,
    layer: Layer | None = None,
    scene_id: str | None = None,
    source_agent: str | None = None,
    include_superseded: bool = False,
    cursor: str | None = None,
    limit: int = 50,
) -> Call[CellPage]:
    params = _given(project_id=project_id, layer=layer, scene_id=scene_id, source_agent=source_agent, cursor=cursor)
    params.update(limit=limit, include_superseded="true" if include_superseded else "false")
    if cell_types:
        params["cell_type"] = list(cell_types)
    return Call("GET", "/v1/cells", CellPage.model_validate, params=params)


def delete_cell(cell_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/cells/{_segment(cell_id)}", _ok)


class SearchOptions(TypedDict, total=False):
    """What ``query`` and ``recall`` take besides the text and ``k`` (the body of ``POST /v1/query``)."""

    embedding: list[float]  # instead of text: a vector of the service's width
    cell_types: list[CellType]
    scene_id: str
    source_agent: str
    layer: Layer
    ranking: Ranking  # "hybrid" (the server's default) or "dense"


def search(path: str, text: str | None, k: int, **options: Unpack[SearchOptions]) -> Call[list[Node]]:
    flt = _given(cell_types=options.get("cell_types"), scene_id=options.get("scene_id"), source_agent=options.get("source_agent"))
    body = _given(
        text=text,
        embedding=options.get("embedding"),
        k=k,
        layer=options.get("layer"),
        ranking=options.get("ranking"),
        filter=flt or None,
    )
    return Call("POST", path, _nodes, body)


def open_session(project_id: str) -> Call[str]:
    return Call("POST", "/v1/sessions", lambda b: str(b["session_id"]), {"project_id": project_id})


def close_session(session_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/sessions/{_segment(session_id)}", _ok)


def place_beacon(interest: str, ttl_s: float | None, expires_at: datetime | None) -> Call[str]:
    if expires_at is not None and expires_at.utcoffset() is None:
        raise ValidationFailed("expires_at must carry its time zone (a naive datetime names no instant)")
    body = _given(interest=interest, ttl_s=ttl_s, expires_at=expires_at.isoformat() if expires_at else None)
    return Call("POST", "/v1/beacons", lambda b: str(b["node_id"]), body)


def remove_beacon(beacon_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/beacons/{_segment(beacon_id)}", _ok)


def get_scene(scene_id: str) -> Call[Scene]:
    return Call("GET", f"/v1/scenes/{_segment(scene_id)}", Scene.model_validate)


def list_scenes(project_id: str | None, cursor: str | None, limit: int) -> Call[ScenePage]:
    return Call(
        "GET", "/v1/scenes", ScenePage.model_validate, params={**_given(project_id=project_id, cursor=cursor), "limit": limit}
    )


def consolidate(scene_id: str) -> Call[Consolidation]:
    return Call("POST", f"/v1/scenes/{_segment(scene_id)}/consolidate", Consolidation.model_validate)


def pull(since: int | None, ack: int | None, limit: int | None) -> Call[PullPage]:
    return Call("POST", "/v1/inbox:pull", PullPage.model_validate, _given(since=since, ack=ack, limit=limit))

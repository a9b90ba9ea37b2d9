"""The inbox item's wire form (``mesh.inbox_wire``) held against the ``SeqInboxItem`` and ``PullOut``
models that ``/openapi.json`` publishes: what a walk renders, an inbox stores and a pull splices
must be exactly what the contract describes (no field missing, none extra, every type right)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from head.facade import Memesh
from mesh.inbox_wire import PullResult, delivery_json, diff_json, item_members, pull_body, render_item, with_withheld
from mesh.model import Cell, CellType, Layer
from mesh.times import rfc3339
from mesh.walk import NodeKind, Reach
from tests.unit.conftest import Api
from tests.unit.test_propagation import settle

URI = "urn:memesh:openapi"


def validator(doc: dict[str, Any], model: str) -> OAS30Validator:
    """A validator of ``model`` that resolves the document's ``#/components/schemas`` references."""
    registry: Registry[Any] = Registry().with_resource(URI, Resource.from_contents(doc, default_specification=DRAFT4))
    return OAS30Validator({"$ref": f"{URI}#/components/schemas/{model}"}, registry=registry)


def properties(doc: dict[str, Any], model: str) -> set[str]:
    return set(doc["components"]["schemas"][model]["properties"])


def a_cell() -> Cell:
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8, dtype=np.float32)
    naive = datetime(2026, 1, 2, 3, 4, 5)  # a naive time is UTC
    return Cell(
        id="c1",
        tenant_id="t1",
        project_id="p1",
        content='quotes " and \\ and \u00e9 and a\nnewline',
        cell_type=CellType.DECISION,
        layer=Layer.L2,
        salience=0.5,
        embedding=vector,
        engine="hash-8",
        source_agent="a1",
        created_at=naive,
        last_accessed=naive,
    )


async def test_a_rendered_item_is_exactly_a_seq_inbox_item(api: Api) -> None:
    doc = (await api.http.get("/openapi.json")).json()
    reach = Reach("a2", "b1", NodeKind.BEACON, 0.75, 2, 0.4)
    members = item_members(diff_json(a_cell(), "d1", 0.9), delivery_json(reach, datetime(2026, 1, 2, tzinfo=UTC)))
    item = json.loads(render_item(7, members))
    validator(doc, "SeqInboxItem").validate(item)
    assert set(item) == properties(doc, "SeqInboxItem")
    assert set(item["diff"]) == properties(doc, "DiffOut")
    assert set(item["diff"]["provenance"]) == properties(doc, "DiffProvenance")
    assert set(item["delivery"]) == properties(doc, "DeliveryOut") - {"withheld"}  # absent when 0
    marked = json.loads(render_item(7, with_withheld(members, 3)))
    validator(doc, "SeqInboxItem").validate(marked)
    assert set(marked["delivery"]) == properties(doc, "DeliveryOut") and marked["delivery"]["withheld"] == 3
    assert item["delivery_seq"] == 7 and item["diff"]["content"] == a_cell().content
    assert item["diff"]["provenance"]["created_at"] == "2026-01-02T03:04:05Z"
    body = json.loads(pull_body(PullResult((render_item(7, members),), 7, 9, True, 7)))
    validator(doc, "PullOut").validate(body)
    assert set(body) == properties(doc, "PullOut") and body["items"] == [item]


def test_rfc3339_is_utc_with_a_z_whatever_the_zone() -> None:
    east = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(east) == rfc3339(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"


async def test_a_pull_answers_the_published_model_end_to_end(api: Api, core: Memesh) -> None:
    """A real walk's deliveries, pulled over REST, validate against ``PullOut`` as published."""
    doc = (await api.http.get("/openapi.json")).json()
    reader, writer = await api.key(roles=("Reader",)), await api.key()
    placed = await api.send("POST", "/v1/beacons", reader, {"interest": "grpc deadline exceeded retries"})
    assert placed.status_code == 200, placed.text
    for i in range(3):
        body = {"content": f"grpc deadline exceeded retries case {i}", "cell_type": "Lesson"}
        assert (await api.send("POST", "/v1/cells", writer, body)).status_code == 201
    await settle(core)
    page = (await api.send("POST", "/v1/inbox:pull", reader, {})).json()
    validator(doc, "PullOut").validate(page)
    assert page["items"], "the walk delivered nothing: the contract was not exercised"
    for item in page["items"]:
        assert set(item) == properties(doc, "SeqInboxItem")
        assert set(item["diff"]) == properties(doc, "DiffOut")
        assert set(item["delivery"]) == properties(doc, "DeliveryOut") - {"withheld"}  # three writes: under budget

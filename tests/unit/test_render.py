"""Nodes rendered with orjson are exactly what the documented ``NodeOut`` model serialises."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import orjson

from api.data.render import node_response, nodes_response
from api.data.schemas import NodeOut
from mesh.model import CellType, Layer
from tests.unit.helpers import T0, cell, direction, uid


def test_rendered_nodes_equal_the_models_json() -> None:
    plain = cell(direction(1, 384), content='déjà vu \u2028 "quoted" \n emoji \U0001f600', salience=0.1234567891)
    odd = replace(
        cell(direction(2, 384), cell_type=CellType.PATTERN, layer=Layer.L1, scene_id=uid("5")),
        created_at=T0 + timedelta(microseconds=7),
        last_accessed=datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=timezone(timedelta(hours=2))),
        superseded_by=uid("6"),
        tombstone=True,
        session_id=uid("7"),
        embedding=np.array([1e-8, -0.1, 3.4028235e38] + [0.0] * 381, dtype=np.float32),
    )
    cells = [plain, odd]
    expected = [NodeOut.of(c).model_dump(mode="json") for c in cells]
    assert orjson.loads(nodes_response(cells).body) == expected
    single = node_response(odd, status_code=201)
    assert single.status_code == 201 and single.media_type == "application/json"
    assert orjson.loads(single.body) == expected[1]
    assert orjson.loads(nodes_response([]).body) == []
    assert expected[1]["created_at"] == "2026-01-01T00:00:00.000007Z" and T0.tzinfo is UTC

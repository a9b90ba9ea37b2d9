"""The actor seam in-process behaves as on Ray where callers could tell: copies, not shared objects."""

from __future__ import annotations

import pickle
import threading
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from actors.directory import InProcessDirectory
from actors.kinds import AUDIT_LOG, BEACON_SET, INBOX_SHARD, OBSERVATORY, REGISTRY, SCENE_SHARD
from actors.observatory import Observatory, ObservatoryConfig
from mesh.deployment import DirectorySpec
from mesh.model import Cell, CellType, Layer

SPEC = DirectorySpec("test", 1, 1, 1)


def observed() -> tuple[Observatory, InProcessDirectory]:
    observatory = Observatory(ObservatoryConfig(max_events=100))
    return observatory, InProcessDirectory(SPEC, {"observatory": observatory})


async def test_arguments_and_results_are_copies() -> None:
    _, directory = observed()
    event: dict[str, Any] = {"diff_id": "d1", "ts": datetime.now(UTC).isoformat(), "tenant_id": "t1", "hop_index": 0}
    await directory.observatory().record([event])
    event["hop_index"] = 99  # the caller changes its own object afterwards
    (first,) = await directory.observatory().snapshot(None, 10, None)
    assert first["hop_index"] == 0
    first["hop_index"] = 42  # and the answer it got is its own too
    (again,) = await directory.observatory().snapshot(None, 10, None)
    assert again["hop_index"] == 0


async def test_what_ray_could_not_send_fails_in_process_too() -> None:
    _, directory = observed()
    with pytest.raises(TypeError):
        await directory.observatory().record([{"lock": threading.Lock()}])


def test_only_the_protocol_is_reachable() -> None:
    _, directory = observed()
    with pytest.raises(AttributeError):
        directory.observatory().attach  # noqa: B018 - a method of the class, not of its Protocol
    assert "record" in OBSERVATORY.methods and "attach" not in SCENE_SHARD.methods


def test_every_kind_exposes_exactly_its_protocol_methods() -> None:
    for kind in (SCENE_SHARD, BEACON_SET, INBOX_SHARD, REGISTRY, OBSERVATORY, AUDIT_LOG):
        assert {"health", "close"} <= kind.methods, kind.name
        missing = {m for m in kind.methods if not callable(getattr(kind.cls, m, None))}
        assert not missing, f"{kind.name} lacks {missing}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_cell_crosses_a_hop_whole_with_its_vector_as_it_was(dtype: type) -> None:
    """Cells pickle with their vector as raw bytes (mesh.model.Cell.__reduce__): every field comes back equal,
    the vector with its dtype, shape and values, and the copy shares nothing with the original."""
    now = datetime.now(UTC)
    vector = (np.arange(384, dtype=np.float64) / 384).astype(dtype)
    cell = Cell(
        "c1", "t1", "p1", CellType.DECISION, "ünïcode content", 0.7, "a1", now, now, Layer.L2, vector, "hash-384",
        scene_id="s1", session_id=None, superseded_by="c2", tombstone=True,
    )  # fmt: skip
    copy = pickle.loads(pickle.dumps(cell, protocol=5))
    for f in fields(Cell):
        if f.name != "embedding":
            assert getattr(copy, f.name) == getattr(cell, f.name), f.name
    assert copy.embedding.dtype == dtype and copy.embedding.shape == (384,)
    assert np.array_equal(copy.embedding, vector) and not np.shares_memory(copy.embedding, vector)
    assert pickle.loads(pickle.dumps([cell, cell]))[0].content == cell.content  # in a list too

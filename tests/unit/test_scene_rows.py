"""A write waits for its cells' commit only: the scenes it founds commit beside it, and a committed cell
loads whole even when its scene's row never landed (``MemoryPartition.load``, ``SceneShard._flush``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from head.facade import Memesh
from mesh.errors import StorageUnavailable
from mesh.model import Cell, CellType, Layer, NewCell, normalize
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter
from mesh.tuning import SceneTuning
from tests.unit.test_propagation import agent

DIMS = 16
# The direct commit path, which the write's answer waits for: what an object store runs. With the write
# journal (a local database's default) the same commits run behind the answer (tests/unit/test_write_journal.py).
DIRECT = {"write_journal": False}


def _cell(n: int, vector: np.ndarray, project: str = "p") -> Cell:
    now = datetime(2026, 11, 27, 12, 0, n, tzinfo=UTC)
    return Cell(
        id=f"01a2{n:028d}",
        tenant_id="t1",
        project_id=project,
        cell_type=CellType.FACT,
        content=f"cell {n}",
        salience=0.5,
        source_agent="a1",
        created_at=now,
        last_accessed=now,
        layer=Layer.L0,
        embedding=vector,
        engine="test",
    )


def test_a_cell_whose_scene_row_is_missing_loads_with_the_scene_it_founded() -> None:
    rng = np.random.default_rng(3)
    base = normalize(rng.normal(size=DIMS))
    written = MemoryPartition(DIMS, SceneTuning())
    cells = [_cell(n, normalize(base + 0.05 * rng.normal(size=DIMS))) for n in range(4)]
    cells.append(_cell(9, normalize(rng.normal(size=DIMS)), project="q"))  # another project: its own scene
    outcome = written.write(cells, [f"scene-{n}" for n in range(5)])
    assert len(outcome.founded) == 2

    reloaded = MemoryPartition(DIMS, SceneTuning())
    reloaded.load([], list(written.cells.values()))  # no scene row was stored
    assert reloaded.scenes.keys() == written.scenes.keys()
    for scene_id, scene in written.scenes.items():
        again = reloaded.scenes[scene_id]
        assert (again.tenant_id, again.project_id, again.created_at) == (scene.tenant_id, scene.project_id, scene.created_at)
        assert again.members == scene.members and again.live_count == scene.live_count
        assert np.allclose(again.centroid, scene.centroid)
    assert reloaded.search("t1", base, 3, NodeFilter())  # the reloaded scenes serve reads

    # a joining cell stamped earlier than the founder (another head's clock): the scene takes the earliest
    joined = written.cells[written.scenes[cells[0].scene_id or ""].members[1]]
    joined.created_at = cells[0].created_at.replace(second=0, minute=0)
    later = MemoryPartition(DIMS, SceneTuning())
    later.load([], list(written.cells.values()))
    assert later.scenes[cells[0].scene_id or ""].created_at == joined.created_at


async def test_a_write_whose_scene_commit_fails_is_acknowledged_and_a_restart_keeps_its_scene(
    make_core: Callable[..., Memesh],
) -> None:
    core = make_core(storage=DIRECT)
    writer, _ = await agent(core)
    shards = _shards(core)
    await core.memory.write_cells(writer, [NewCell("warm the tables up", CellType.FACT)])
    for shard in shards:
        shard._scenes.write = _broken
    (cell,) = await core.memory.write_cells(writer, [NewCell("a rocket launch window", CellType.FACT, project_id="space")])
    assert cell.scene_id is not None
    scene = await core.memory.get_scene(writer, cell.scene_id)
    owner = next(shard for shard in shards if cell.scene_id in shard.partition.scenes)
    assert cell.scene_id in owner._unsaved_scenes and cell.scene_id not in owner._scenes
    await core.close()  # its close tries the scene row again (still failing); the cell row is committed

    core = make_core(storage=DIRECT)
    try:
        again = await core.memory.get_scene(writer, cell.scene_id)
        assert (again.id, again.project_id, again.created_at) == (scene.id, scene.project_id, scene.created_at)
        assert again.members == [cell.id]
        assert (await core.cells.get(writer, cell.id)).content == "a rocket launch window"
    finally:
        await core.close()


async def test_a_scene_row_that_failed_is_written_by_the_next_flush(make_core: Callable[..., Memesh]) -> None:
    core = make_core(storage=DIRECT)
    try:
        writer, _ = await agent(core)
        shards = _shards(core)
        await core.memory.write_cells(writer, [NewCell("warm the tables up", CellType.FACT)])
        real = {id(shard): shard._scenes.write for shard in shards}
        for shard in shards:
            shard._scenes.write = _broken
        (cell,) = await core.memory.write_cells(writer, [NewCell("a tide table for the harbour", CellType.FACT)])
        owner = next(shard for shard in shards if cell.scene_id in shard.partition.scenes)
        for shard in shards:
            shard._scenes.write = real[id(shard)]
        await core.memory.write_cells(writer, [NewCell("another tide table note", CellType.FACT)])  # same project
        assert cell.scene_id in owner._scenes and not owner._unsaved_scenes
    finally:
        await core.close()


async def test_a_scene_written_beside_cells_whose_commit_failed_is_rewritten_without_them(
    make_core: Callable[..., Memesh],
) -> None:
    """The review's case: a scene whose row is to be written again goes with a batch whose cells' commit
    fails; its row then quotes a cell that was rolled back, so it must stay to be written again."""
    core = make_core(storage=DIRECT)
    try:
        writer, _ = await agent(core)
        await core.memory.write_cells(writer, [NewCell("warm the tables up", CellType.FACT)])
        shards = _shards(core)
        real = {id(shard): (shard._scenes.write, shard._cells.write) for shard in shards}
        for shard in shards:
            shard._scenes.write = _broken
        (first,) = await core.memory.write_cells(writer, [NewCell("the harbour tide table", CellType.FACT)])
        owner = next(shard for shard in shards if first.scene_id in shard.partition.scenes)
        owner._scenes.write, owner._cells.write = real[id(owner)][0], _broken
        with pytest.raises(StorageUnavailable):
            await core.memory.write_cells(writer, [NewCell("zanzibar quokka lantern", CellType.FACT, scene_id=first.scene_id)])
        assert "quokka" in await _summary(owner, first.scene_id or "")  # the failed batch's scene row quotes it
        assert first.scene_id in owner._unsaved_scenes
        owner._cells.write = real[id(owner)][1]
        await owner._save_unsaved()  # as close, retire and an erase do first
        assert "quokka" not in await _summary(owner, first.scene_id or "")
        assert not owner._unsaved_scenes
    finally:
        for shard in shards:
            shard._scenes.write, shard._cells.write = real[id(shard)]
        await core.close()


async def _broken(*_: object) -> None:
    raise StorageUnavailable("storage failed during a commit")


def _shards(core: Memesh) -> list[Any]:
    """The in-process scene shards (their tables are patched to fail as a storage outage would)."""
    return [core.directory.scene_shard(i).target for i in range(core.directory.spec.scene_shards)]  # type: ignore[attr-defined]


async def _summary(shard: Any, scene_id: str) -> str:
    """The summaries the scenes table holds on disk for ``scene_id`` (every row of it)."""
    rows = (await shard._scenes.rows.load()).to_pylist()
    return " ".join(r["summary"] for r in rows if r["id"] == scene_id)

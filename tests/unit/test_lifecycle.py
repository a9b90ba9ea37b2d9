"""Starting, closing and re-opening the core on the same data."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import lancedb
import pytest

from cluster.compose import start_core
from head.facade import Memesh
from mesh.errors import ConfigInvalid
from mesh.model import CellType, NewCell
from mesh.query import NodeFilter
from tests.unit.conftest import ADMIN, in_process_settings


async def test_close_commits_background_touches(make_core: Callable[..., Memesh]) -> None:
    first = make_core()
    issued = await first.identity.issue(ADMIN, "t1", "w", ["Writer"])
    principal = await first.identity.authenticate(issued.plaintext_secret)
    (cell,) = await first.memory.write_cells(principal, [NewCell(content="touch me", cell_type=CellType.FACT)])
    (recalled,) = await first.memory.recall(principal, "touch me", None, 1, NodeFilter())
    assert recalled.last_accessed > cell.created_at
    await first.close()
    second = make_core()
    (again,) = await second.memory.query(principal, "touch me", None, 1, NodeFilter())
    assert again.last_accessed == recalled.last_accessed
    await second.close()


def stored_last_accessed(core: Memesh, cell_id: str) -> datetime:
    """``last_accessed`` of ``cell_id`` as the scene shards' cells tables hold it now (read past the core)."""
    uri = core.directory.scene_shard(0).target.config.storage.uri  # type: ignore[attr-defined]
    db = lancedb.connect(uri)
    for name in db.list_tables(limit=10_000).tables:
        if name.endswith("_cells"):
            rows = db.open_table(name).search().where(f"id = '{cell_id}'").select(["last_accessed"]).to_list()
            if rows:
                found: datetime = rows[0]["last_accessed"]
                return found
    raise AssertionError(f"{cell_id} is in no cells table")


@pytest.mark.parametrize("window_ms", [0, 60_000])
async def test_access_times_reach_storage_within_their_window_and_at_close(
    make_core: Callable[..., Memesh], window_ms: int
) -> None:
    core = make_core(storage={"access_commit_window_ms": window_ms, "write_journal": False})  # a write lands in its table
    issued = await core.identity.issue(ADMIN, "t1", "w", ["Writer"])
    principal = await core.identity.authenticate(issued.plaintext_secret)
    (cell,) = await core.memory.write_cells(principal, [NewCell(content="touch me", cell_type=CellType.FACT)])
    (recalled,) = await core.memory.recall(principal, "touch me", None, 1, NodeFilter())
    assert recalled.last_accessed > cell.last_accessed
    stored = cell.last_accessed
    for _ in range(50):  # bounded: 5 s
        await asyncio.sleep(0.1)
        stored = stored_last_accessed(core, cell.id)
        if stored == recalled.last_accessed or (window_ms and _ >= 10):
            break
    # a window of 0 commits them at once; a long one holds them (a row rewrite for each hot cell, once a window)
    assert stored == (recalled.last_accessed if window_ms == 0 else cell.last_accessed)
    await core.close()  # within the window: the close commits them
    assert stored_last_accessed(core, cell.id) == recalled.last_accessed


async def test_the_deployment_shape_is_claimed_with_the_data(tmp_path: object, make_core: Callable[..., Memesh]) -> None:
    first = make_core()
    settings = in_process_settings(tmp_path / "data")  # type: ignore[operator]
    key_file = await start_core(first, settings)
    assert key_file is not None and key_file.exists()
    assert await start_core(first, settings) is None  # the admin exists: no new key
    await first.close()
    other_engine = make_core(embedding={"dims": 128})
    with pytest.raises(ConfigInvalid, match="embedding_engine"):
        await start_core(other_engine, in_process_settings(tmp_path / "data", embedding={"dims": 128}))  # type: ignore[operator]
    await other_engine.close()
    reshaped = make_core(ray={"scene_shards": 3})  # a changed count is a resize (tests/unit/test_resize.py)
    await start_core(reshaped, in_process_settings(tmp_path / "data", ray={"scene_shards": 3}))  # type: ignore[operator]
    assert reshaped.directory.spec.scene_shards == 3
    await reshaped.close()

"""Starting, closing and re-opening the core on the same data."""

from __future__ import annotations

from collections.abc import Callable

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

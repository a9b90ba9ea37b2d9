"""How a scene shard commits its rows: the cells and the scenes they touch, at the same time.

Guarantees of :func:`commit_rows`:
- It raises when the cells' commit fails; the scenes' commit decides nothing,
  because a load rebuilds the scene of a cell whose scene row is missing
  (``MemoryPartition.load``), so a write waits for one commit, not two in a row.
- A scene whose row may be missing or stale on disk is kept in ``unsaved``: its
  own commit failed, or it was written beside cells whose commit failed (the
  write is rolled back, and the row may quote a cell that is no longer there).
  The owner's next commit writes it again as memory holds it then; the owner
  also writes them before it closes, retires or erases.
"""

from __future__ import annotations

import asyncio
import logging

from actors.codecs import cells_to_arrow, scenes_to_arrow
from actors.storage import KeyedTable
from mesh.model import Cell, Scene
from mesh.partition import MemoryPartition

log = logging.getLogger(__name__)


async def commit_rows(
    tables: tuple[KeyedTable, KeyedTable],
    partition: MemoryPartition,
    scenes: dict[str, Scene],
    cells: dict[str, Cell],
    unsaved: set[str],
    owner: str,
) -> None:
    """Commit ``scenes`` (with every scene of ``unsaved`` memory still holds) and ``cells`` into the
    (scenes, cells) ``tables`` at the same time, as ``partition`` holds them now."""
    scene_table, cell_table = tables
    unsaved.intersection_update(partition.scenes)  # an erased scene has no row left to write
    for scene_id in unsaved:
        scenes.setdefault(scene_id, partition.scenes[scene_id])
    dims = partition.dims
    scene_rows = scenes_to_arrow([partition.fresh(s) for s in scenes.values()], dims)
    scenes_done, cells_done = await asyncio.gather(
        scene_table.write(scene_rows), cell_table.write(cells_to_arrow(cells.values(), dims)), return_exceptions=True
    )
    if isinstance(scenes_done, BaseException):
        log.warning("%s: %d scene rows not committed yet (%s)", owner, len(scenes), scenes_done)
    if isinstance(scenes_done, BaseException) or isinstance(cells_done, BaseException):
        unsaved.update(scenes)
    else:
        unsaved.difference_update(scenes)
    if isinstance(cells_done, BaseException):
        raise cells_done

"""SceneShard: owns the scenes and cells of a set of projects.

Guarantees:
- Single writer of its two tables (``scene_shard_<n>_cells``, ``..._scenes``).
- ``write`` answers only after the cells (and any scenes they founded) are
  committed; a retried write with the same cell ids is a no-op that returns
  the stored cells, so Ray may replay it after a restart.
- On (re)start it reloads every row and rebuilds its in-memory index, so a
  killed shard loses nothing it acknowledged.
- Mutations of the in-memory state run without an ``await`` in the middle,
  so concurrent calls on the actor's event loop never see half a transition.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from datetime import datetime

from actors.clock import IdSource
from actors.codecs import cell_schema, cells_from_arrow, cells_to_arrow, scene_schema, scenes_from_arrow, scenes_to_arrow
from actors.storage import GroupCommitter, LanceStore, RowTable
from mesh.model import Cell, Scene, Vector
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter
from mesh.tuning import SceneTuning

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShardConfig:
    storage_uri: str
    index: int
    dims: int
    tuning: SceneTuning
    commit_window_s: float = 0.002
    commit_max_rows: int = 1024
    optimize_every: int = 64


@dataclass(slots=True)
class _Change:
    kind: str  # "cell" | "scene"
    new: bool
    record: Cell | Scene


class SceneShard:
    def __init__(self, config: ShardConfig) -> None:
        self.config = config
        self.partition = MemoryPartition(config.dims, config.tuning)
        self._cells: RowTable | None = None
        self._scenes: RowTable | None = None
        self._persisted: set[str] = set()
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._commit: GroupCommitter[_Change] = GroupCommitter(self._flush, config.commit_window_s, config.commit_max_rows)
        self._background: set[asyncio.Task[None]] = set()
        self._ids = IdSource()

    async def close(self) -> None:
        """Finish background work and commit everything pending; the shard is then safe to drop."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._commit.close()

    async def _ready(self) -> MemoryPartition:
        if self._loaded:
            return self.partition
        async with self._load_lock:
            if not self._loaded:
                store = await LanceStore.open(self.config.storage_uri)
                prefix = f"scene_shard_{self.config.index}"
                self._cells = await store.table(f"{prefix}_cells", cell_schema(self.config.dims))
                self._scenes = await store.table(f"{prefix}_scenes", scene_schema(self.config.dims))
                scenes = scenes_from_arrow(await self._scenes.read_all(), self.config.dims)
                cells = cells_from_arrow(await self._cells.read_all())
                self.partition.load(scenes, cells)
                self._persisted = {s.id for s in scenes} | {c.id for c in cells}
                self._loaded = True
                log.info("scene shard %d loaded %d scenes, %d cells", self.config.index, len(scenes), len(cells))
        return self.partition

    async def health(self) -> dict[str, int]:
        partition = await self._ready()
        return {"cells": len(partition.cells), "scenes": len(partition.scenes), "pid": os.getpid()}

    async def write(self, cells: list[Cell], new_scene_ids: list[str]) -> list[Cell]:
        partition = await self._ready()
        outcome = partition.write(cells, new_scene_ids)
        changes = [_Change("scene", True, s) for s in outcome.founded]
        changes += [_Change("cell", True, c) for c in outcome.created]
        # A retried write whose first attempt is still committing waits for that commit too.
        created = {c.id for c in outcome.created}
        changes += [_Change("cell", False, c) for c in outcome.cells if c.id not in self._persisted and c.id not in created]
        await self._commit.submit(changes)
        return outcome.cells

    async def search(self, tenant_id: str, query: Vector, k: int, flt: NodeFilter) -> list[tuple[Cell, float]]:
        partition = await self._ready()
        return partition.search(tenant_id, query, k, flt)

    async def touch(self, cell_ids: list[str], now: datetime) -> None:
        """Record access times; persisted with the next batch, not awaited (soft state)."""
        partition = await self._ready()
        touched = partition.touch(cell_ids, now)
        if touched:
            self._spawn(self._commit.submit([_Change("cell", False, c) for c in touched]))

    async def get_scene(self, tenant_id: str, scene_id: str) -> Scene:
        partition = await self._ready()
        return partition.scene(tenant_id, scene_id)

    async def has_scene(self, scene_id: str) -> bool:
        partition = await self._ready()
        return scene_id in partition.scenes

    async def list_scenes(self, tenant_id: str, project_id: str | None, after: str | None, limit: int) -> list[Scene]:
        partition = await self._ready()
        return partition.list_scenes(tenant_id, project_id, after, limit)

    async def consolidate(
        self, tenant_id: str, scene_id: str, source_agent: str, now: datetime
    ) -> tuple[Scene, list[Cell], list[Cell]]:
        """Abstract every near-duplicate group of the scene; a retry finds nothing left to do."""
        partition = await self._ready()
        outcome = partition.consolidate(tenant_id, scene_id, self._ids.new, source_agent, now)
        changes = [_Change("cell", True, p) for p in outcome.patterns]
        changes += [_Change("cell", False, c) for c in outcome.superseded]
        changes.append(_Change("scene", False, outcome.scene))
        await self._commit.submit(changes)
        return outcome.scene, outcome.patterns, outcome.superseded

    async def _flush(self, changes: list[_Change]) -> None:
        assert self._cells is not None and self._scenes is not None
        latest: dict[str, _Change] = {}
        for change in changes:
            previous = latest.get(change.record.id)
            new = change.new or (previous is not None and previous.new)
            latest[change.record.id] = _Change(change.kind, new and change.record.id not in self._persisted, change.record)
        scenes = [c for c in latest.values() if c.kind == "scene"]
        cells = [c for c in latest.values() if c.kind == "cell"]
        dims = self.config.dims
        # Scenes first: a crash between the two commits leaves an empty scene, never an orphan cell.
        await self._scenes.append(scenes_to_arrow([c.record for c in scenes if c.new], dims))  # type: ignore[misc]
        await self._scenes.upsert(scenes_to_arrow([c.record for c in scenes if not c.new], dims))  # type: ignore[misc]
        await self._cells.append(cells_to_arrow([c.record for c in cells if c.new], dims))  # type: ignore[misc]
        await self._cells.upsert(cells_to_arrow([c.record for c in cells if not c.new], dims))  # type: ignore[misc]
        self._persisted.update(latest)
        for table in (self._cells, self._scenes):
            await table.optimize_if_due(self.config.optimize_every)

    def _spawn(self, coro: object) -> None:
        async def run() -> None:
            try:
                await coro  # type: ignore[misc]
            except Exception:
                log.warning("background commit failed", exc_info=True)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

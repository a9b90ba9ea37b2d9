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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from actors.clock import IdSource
from actors.codecs import (
    PROPAGATED_SCHEMA,
    cell_schema,
    cells_from_arrow,
    cells_to_arrow,
    scene_schema,
    scenes_from_arrow,
    scenes_to_arrow,
)
from actors.directory import Directory
from actors.propagation import PropagationConfig, Propagator
from actors.storage import GroupCommitter, LanceStore, LoadOnce, RowTable
from mesh.model import Cell, Scene, Vector
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter
from mesh.tuning import SceneTuning
from mesh.walk import Candidate, NeighbourRequest, NodeKind

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
    propagation: PropagationConfig | None = None  # None: this shard starts no walks
    walk_batch: int = 64  # walks decided together, in lockstep
    cache_mb: int = 32  # LanceDB index and metadata cache bounds (storage.cache_mb)


@dataclass(slots=True)
class _Change:
    kind: str  # "cell" | "scene"
    new: bool
    record: Cell | Scene


class SceneShard:
    """Also the home of the walks its writes start (see ``actors.propagation``).

    A committed cell's walk runs in the background; its completion is recorded
    in ``scene_shard_<n>_propagated``, and a restarted shard replays the walks
    of cells without that record (deliveries are idempotent by id).
    """

    def __init__(self, config: ShardConfig, lookup: Callable[[], Directory] | None = None) -> None:
        self.config = config
        self._lookup = lookup
        self._directory: Directory | None = None
        self._walk_queue: deque[Cell] = deque()
        self._replayed: set[str] = set()
        self._walker: asyncio.Task[None] | None = None
        self._propagator = Propagator(config.propagation, self._dir) if config.propagation else None
        self._walked: set[str] = set()
        self._walked_table: RowTable | None = None
        self.partition = MemoryPartition(config.dims, config.tuning)
        self._cells: RowTable | None = None
        self._scenes: RowTable | None = None
        self._persisted: set[str] = set()
        self._ready_once = LoadOnce(self._load)
        self._commit: GroupCommitter[_Change] = GroupCommitter(self._flush, config.commit_window_s, config.commit_max_rows)
        self._background: set[asyncio.Task[None]] = set()
        self._ids = IdSource()
        self._walked_commit: GroupCommitter[str] = GroupCommitter(self._flush_walked, 0.05, 1024)
        # Access times: a long window, so their upserts stay off the write path.
        self._touch_commit: GroupCommitter[_Change] = GroupCommitter(self._flush, 1.0, 100_000)

    async def close(self) -> None:
        """Finish background work and commit everything pending; the shard is then safe to drop."""
        await self.settle(30.0)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._propagator is not None:
            await self._propagator.close()
        await self._commit.close()
        await self._touch_commit.close()
        await self._walked_commit.close()

    def attach(self, directory: Directory) -> None:
        """Give the shard the directory its walks use (in-process; Ray shards look it up)."""
        self._directory = directory

    def _dir(self) -> Directory:
        if self._directory is None:
            if self._lookup is None:
                raise RuntimeError("this shard has no directory to walk with")
            self._directory = self._lookup()
        return self._directory

    async def _ready(self) -> MemoryPartition:
        await self._ready_once()
        return self.partition

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage_uri, self.config.cache_mb << 20)
        prefix = f"scene_shard_{self.config.index}"
        self._cells = await store.table(f"{prefix}_cells", cell_schema(self.config.dims))
        self._scenes = await store.table(f"{prefix}_scenes", scene_schema(self.config.dims))
        scenes = scenes_from_arrow(await self._scenes.read_all(), self.config.dims)
        cells = cells_from_arrow(await self._cells.read_all())
        self.partition.load(scenes, cells)
        self._persisted = {s.id for s in scenes} | {c.id for c in cells}
        self._walked_table = await store.table(f"{prefix}_propagated", PROPAGATED_SCHEMA)
        self._walked = set((await self._walked_table.read_all()).column("cell_id").to_pylist())
        if self._propagator is not None:
            pending = [c for c in sorted(cells, key=lambda c: c.id) if c.id not in self._walked and c.live]
            self._replayed.update(c.id for c in pending)  # their agent nodes were already moved before the crash
            self._enqueue_walks(pending)
        log.info("scene shard %d loaded %d scenes, %d cells", self.config.index, len(scenes), len(cells))

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
        try:
            await self._commit.submit(changes)
        except Exception:
            partition.rollback(outcome)  # not acknowledged: it must not stay visible either
            raise
        if self._propagator is not None:
            self._enqueue_walks(outcome.created)
        return outcome.cells

    async def settle(self, timeout_s: float = 30.0) -> int:
        """Wait until every walk queued so far has finished; returns how many were pending.

        For tests, benchmarks and orderly shutdown; bounded by ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = len(self._walk_queue)
        while loop.time() < deadline:
            walker = self._walker
            if not self._walk_queue and (walker is None or walker.done()) and not any(not t.done() for t in self._background):
                break
            await asyncio.sleep(0.005)
        return pending

    def _enqueue_walks(self, cells: list[Cell]) -> None:
        if not cells:
            return
        self._walk_queue.extend(cells)
        if self._walker is None or self._walker.done():
            self._walker = asyncio.get_running_loop().create_task(self._walk_loop())

    async def _walk_loop(self) -> None:
        """Drain the walk queue in batches; a failed batch is retried, then left for the next restart's replay."""
        assert self._propagator is not None
        while self._walk_queue:
            batch = [self._walk_queue.popleft() for _ in range(min(len(self._walk_queue), self.config.walk_batch))]
            jobs = []
            for cell in batch:
                scene = self.partition.scenes.get(cell.scene_id or "")
                jobs.append((cell, scene.centroid if scene is not None and scene.live_count else cell.embedding))
            replay = [job for job in jobs if job[0].id in self._replayed]
            fresh_jobs = [job for job in jobs if job[0].id not in self._replayed]
            for attempt in range(3):
                try:
                    now = datetime.now(UTC)
                    if fresh_jobs:
                        await self._propagator.propagate_many(fresh_jobs, now, observe=attempt == 0)
                    if replay:
                        await self._propagator.propagate_many(replay, now, observe=False)
                    break
                except Exception:  # an owner restarting: retry, then leave it to the replay at restart
                    log.warning("walk batch failed (attempt %d)", attempt + 1, exc_info=True)
                    await asyncio.sleep(0.2 * (attempt + 1))
            else:
                continue
            fresh = [cell.id for cell in batch if cell.id not in self._walked]
            self._walked.update(fresh)
            if fresh:
                self._spawn(self._walked_commit.submit(fresh))

    async def _flush_walked(self, cell_ids: list[str]) -> None:
        assert self._walked_table is not None
        await self._walked_table.append(pa.Table.from_pylist([{"cell_id": c} for c in cell_ids], schema=PROPAGATED_SCHEMA))
        await self._walked_table.optimize_if_due(self.config.optimize_every)

    async def neighbours_many(self, requests: list[NeighbourRequest]) -> list[dict[str, list[Candidate]]]:
        """``neighbours`` for many walks at once: one matrix product per tenant."""
        partition = await self._ready()
        answers: list[dict[str, list[Candidate]]] = [{} for _ in requests]
        by_tenant: dict[str, list[int]] = {}
        for n, request in enumerate(requests):
            by_tenant.setdefault(request.tenant_id, []).append(n)
        for tenant_id, members in by_tenant.items():
            flat = [(n, fid, vec) for n in members for fid, vec in requests[n].queries]
            if not flat:
                continue
            k = max(requests[n].k for n in members)
            hits = partition.scene_neighbours_many(tenant_id, np.stack([vec for _, _, vec in flat]), k)
            for (n, frontier_id, _), found in zip(flat, hits, strict=True):
                request = requests[n]
                found = found[: request.k]
                centroids = [s.centroid for s, _ in found]
                relevance = (np.stack(centroids) @ request.diff_vector).tolist() if centroids else []
                answers[n][frontier_id] = [
                    Candidate(s.id, NodeKind.SCENE, sim, rel, None, centroid)
                    for (s, sim), rel, centroid in zip(found, relevance, centroids, strict=True)
                ]
        return answers

    async def search(self, tenant_id: str, query: Vector, k: int, flt: NodeFilter) -> list[tuple[Cell, float]]:
        partition = await self._ready()
        return partition.search(tenant_id, query, k, flt)

    async def touch(self, cell_ids: list[str], now: datetime) -> None:
        """Record access times; persisted with the next batch, not awaited (soft state)."""
        partition = await self._ready()
        touched = partition.touch(cell_ids, now)
        # A cell whose first append is still pending carries its new access time in that append;
        # only committed rows are upserted here (an upsert of a pending row would store it twice).
        committed = [c for c in touched if c.id in self._persisted]
        if committed:
            self._spawn(self._touch_commit.submit([_Change("cell", False, c) for c in committed]))

    async def get_scene(self, tenant_id: str, scene_id: str) -> Scene:
        partition = await self._ready()
        return partition.scene(tenant_id, scene_id)

    async def has_scene(self, scene_id: str) -> bool:
        partition = await self._ready()
        return scene_id in partition.scenes

    async def list_scenes(
        self, tenant_id: str, project_id: str | None, after: str | None, limit: int, projects: frozenset[str] | None = None
    ) -> list[Scene]:
        partition = await self._ready()
        return partition.list_scenes(tenant_id, project_id, after, limit, projects)

    async def consolidate(
        self, tenant_id: str, scene_id: str, source_agent: str, now: datetime
    ) -> tuple[Scene, list[Cell], list[Cell]]:
        """Abstract every near-duplicate group of the scene; a retry finds nothing left to do."""
        partition = await self._ready()
        outcome = partition.consolidate(tenant_id, scene_id, self._ids.new, source_agent, now)
        # A Pattern abstracts cells whose diffs already propagated: it starts no walk of its own.
        pattern_ids = [p.id for p in outcome.patterns]
        self._walked.update(pattern_ids)
        if pattern_ids:
            self._spawn(self._walked_commit.submit(pattern_ids))
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

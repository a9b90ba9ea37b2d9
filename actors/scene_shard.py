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
from dataclasses import dataclass, replace
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
from actors.propagation import PropagationConfig, Propagator, diff_id_of
from actors.storage import GroupCommitter, LanceStore, LoadOnce, RowTable
from mesh.erasure import EraseCounts, Selector
from mesh.model import Cell, Scene, Vector, WriterSums, starts_diff, writer_sums
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


@dataclass(frozen=True, slots=True)
class ShardErasure:
    """One shard's part of an erase: its counts, the diffs that must leave every inbox, and per
    writer the vector sum and count of its erased cells (to take out of its agent node)."""

    counts: EraseCounts
    diff_ids: list[str]
    writers: WriterSums


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
        self._staged: dict[str, Vector] = {}  # a reembed's new vectors, switched in by apply_staged
        self._switching = False  # between persist_staged and apply_staged / revert_staged
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
        if committed and not self._switching:  # during a reembed switch a row must not get its old vector back
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

    # --------------------------------------------------------- delete and erase
    async def locate(self, cell_id: str) -> tuple[str, str] | None:
        """(tenant, project) of a stored cell, or None when this shard does not hold it."""
        partition = await self._ready()
        cell = partition.cells.get(cell_id)
        return (cell.tenant_id, cell.project_id) if cell is not None else None

    async def delete_cell(self, cell_id: str) -> bool:
        """Tombstone a cell and commit it; False when it already was (a no-op) or is absent."""
        partition = await self._ready()
        cell = partition.tombstone(cell_id)
        if cell is None:
            return False
        changes = [_Change("cell", False, cell)]
        scene = partition.scenes.get(cell.scene_id or "")
        if scene is not None:
            changes.append(_Change("scene", False, scene))
        await self._commit.submit(changes)
        return True

    async def erase(self, selector: Selector, dry_run: bool) -> ShardErasure:
        """Remove every matching cell, and every Pattern abstracting one (it quotes a member), from memory
        and storage (older table versions included); members of an erased Pattern become live again.

        Order: out of memory first (no read or walk sees them from here on),
        then the rows, then the recomputed scenes, then a purge of old versions.
        A dry run only counts. Idempotent: a repeated erase finds nothing.
        """
        partition = await self._ready()
        cells = partition.with_abstractions(partition.select(selector))
        diff_ids = [diff_id_of(c.id) for c in cells if starts_diff(c)]
        writers = writer_sums(cells, self.config.dims)
        if dry_run:
            chosen = {c.id for c in cells}
            scenes = {c.scene_id for c in cells if c.scene_id in partition.scenes}
            emptied = {sid for sid in scenes if all(m in chosen for m in partition.scenes[sid or ""].members)}
            counts = EraseCounts(
                nodes_removed=len(cells) + len(emptied),
                diffs_removed=len(diff_ids),
                aggregates_recomputed=len(scenes) - len(emptied),
                tombstones_propagated=1,
            )
            return ShardErasure(counts, diff_ids, writers)
        if not cells:
            return ShardErasure(EraseCounts(tombstones_propagated=1), [], {})
        erased = {c.id for c in cells}
        self._walk_queue = deque(c for c in self._walk_queue if c.id not in erased)
        await self.settle(60.0)  # a walk already under way finishes before the inboxes are erased
        outcome = partition.erase(erased)
        assert self._cells is not None and self._scenes is not None and self._walked_table is not None
        for committer in (self._commit, self._touch_commit, self._walked_commit):
            await committer.close()  # nothing of these cells may be written after their delete
        ids = sorted(erased)
        await self._cells.delete_where_in("id", ids)
        await self._walked_table.delete_where_in("cell_id", ids)
        self._walked -= erased
        self._persisted -= erased
        if outcome.removed_scenes:
            removed = sorted(s.id for s in outcome.removed_scenes)
            await self._scenes.delete_where_in("id", removed)
            self._persisted -= set(removed)
        await self._scenes.upsert(scenes_to_arrow([s for s in outcome.recomputed if s.id in self._persisted], self.config.dims))
        await self._cells.upsert(cells_to_arrow([c for c in outcome.revived if c.id in self._persisted], self.config.dims))
        for table in (self._cells, self._scenes, self._walked_table):
            await table.purge()
        counts = EraseCounts(
            nodes_removed=len(outcome.cells) + len(outcome.removed_scenes),
            diffs_removed=len(diff_ids),
            aggregates_recomputed=len(outcome.recomputed),
            tombstones_propagated=1,
        )
        return ShardErasure(counts, diff_ids, writers)

    # ----------------------------------------------------------------- reembed
    async def reembed_count(self) -> int:
        partition = await self._ready()
        return len(partition.cells)

    async def reembed_page(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        """(id, content) of up to ``limit`` cells in id order after ``after`` that have no staged vector."""
        partition = await self._ready()
        ids = sorted(cid for cid in partition.cells if (after is None or cid > after) and cid not in self._staged)
        return [(cid, partition.cells[cid].content) for cid in ids[:limit]]

    async def stage(self, vectors: list[tuple[str, Vector]]) -> None:
        """Hold new vectors aside; reads keep using the current ones until ``commit_staged``."""
        await self._ready()
        self._staged.update(vectors)

    def _switched_cells(self, engine: str) -> list[Cell]:
        """Every cell as it is after the switch: its staged vector, or its current one when none was staged."""
        out = []
        for cell in self.partition.cells.values():
            vector = self._staged.get(cell.id)
            out.append(replace(cell, embedding=vector, engine=engine) if vector is not None else cell)
        return out

    async def _write_cells(self, cells: list[Cell]) -> None:
        assert self._cells is not None
        persisted = [c for c in cells if c.id in self._persisted]
        for start in range(0, len(persisted), 2048):
            await self._cells.upsert(cells_to_arrow(persisted[start : start + 2048], self.config.dims))

    async def persist_staged(self, engine: str) -> WriterSums:
        """Phase one of the switch: write every staged vector's row; reads keep the current vectors.

        Returns, per writer, the sum and count of its cells' new vectors (their agent nodes' new means).
        Called with writes, consolidations and erasures held back (``Embedder.gate``); access times
        are not recorded until ``apply_staged`` or ``revert_staged``.
        """
        await self._ready()
        self._switching = True
        for committer in (self._commit, self._touch_commit):
            await committer.close()
        cells = self._switched_cells(engine)
        await self._write_cells(cells)
        return writer_sums(cells, self.config.dims)

    async def apply_staged(self, engine: str) -> None:
        """Phase two: switch memory to the persisted vectors at once (scene centroids recomputed)."""
        partition = await self._ready()
        cells = self._switched_cells(engine)
        scenes = [replace(s, members=[], cached_centroid=None) for s in partition.scenes.values()]  # the live ones stay intact
        rebuilt = MemoryPartition(self.config.dims, self.config.tuning)
        rebuilt.load(scenes, cells)
        self.partition = rebuilt
        self._staged = {}
        self._switching = False
        assert self._cells is not None and self._scenes is not None
        await self._scenes.upsert(scenes_to_arrow([s for s in scenes if s.id in self._persisted], self.config.dims))
        for table in (self._cells, self._scenes):
            await table.optimize_if_due(1)

    async def revert_staged(self) -> None:
        """Undo phase one after a failure elsewhere: rewrite the current vectors' rows, drop the staged ones."""
        await self._ready()
        staged = set(self._staged)
        self._staged = {}
        try:
            await self._write_cells([c for c in self.partition.cells.values() if c.id in staged])
        finally:
            self._switching = False

    async def discard_staged(self) -> None:
        self._staged = {}

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

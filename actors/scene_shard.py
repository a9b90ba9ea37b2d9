"""SceneShard: owns the scenes and cells of a set of projects.

Guarantees:
- Single writer of its tables (``scene_shard_<n>_cells``, ``..._scenes``, ``..._propagated``) and journal.
- ``write`` answers only once the cells are durable: journaled on a local database (``actors.commit_behind``:
  committed to the table behind the answer, replayed by a load), committed elsewhere (the scenes they founded
  commit beside them; a load restores any whose row did not land, so a stored cell loads whole); a retried
  write with the same cell ids is a no-op that returns the stored cells, so Ray may replay it after a restart.
- What is written is always the record as memory holds it at commit time, and only while memory still holds
  it: a change queued before an erase or a rolled-back consolidation never writes a removed row back.
- On (re)start it reloads every row it can decode and rebuilds its in-memory index: it loses nothing acknowledged.
- Mutations of the in-memory state run without an ``await`` in the middle, so concurrent calls on the actor's
  event loop never see half a transition. The quadratic part of a consolidation runs in a worker thread over
  a snapshot, bounded by ``SceneTuning.max_members``. Its waves yield to its searches (``actors.read_yield``).
- An erase is two idempotent steps, ``erase_plan`` (resolve and stop the cells' walks) and
  ``erase_cells`` (remove, by id, from memory, the journal and every data file); a repeat changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from actors.chores import Background, LoadOnce
from actors.codecs import cells_from_arrow, cells_to_arrow, scenes_from_arrow, scenes_to_arrow
from actors.commit_behind import CommitBehind
from actors.group_commit import GroupCommitter
from actors.presence import HeadsTeller, PresenceTeller
from actors.read_yield import ReadYield
from actors.scene_erase import plan_erase, tombstone_durably
from actors.scene_reembed import SceneReembedding
from actors.scene_rows import commit_rows
from actors.schemas import PROPAGATED_SCHEMA, cell_schema, scene_schema
from actors.storage import KeyedTable, LanceStore, StorageConfig
from actors.walk_queue import WalkQueue
from actors.write_journal import replay_journal, shard_journal
from mesh.consolidation import find_groups
from mesh.erasure import Selector, ShardErasePlan
from mesh.errors import MemeshError, RateLimited
from mesh.histogram import LATENCY_S, Histogram
from mesh.ids import IdSource
from mesh.layout import table_prefix
from mesh.model import Cell, Scene, Vector, WriterSums, writer_sums
from mesh.neighbours import neighbour_scene_parts
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter, SearchReply, SearchRequest, Touched, answer_each
from mesh.seam import Directory
from mesh.tuning import SceneTuning
from mesh.walk import NeighbourRequest
from mesh.walk_wire import PackedAnswers

log = logging.getLogger(__name__)

NEIGHBOUR_PART = 8  # walks whose wave a shard answers between two turns of its event loop


@dataclass(frozen=True, slots=True)
class ShardConfig:
    storage: StorageConfig
    index: int
    dims: int
    tuning: SceneTuning
    walks: bool = False  # its writes start walks (each batch run by walker index % walkers: ``actors.walker``)
    walk_batch: int = 64  # walks decided together, in lockstep
    max_walk_backlog: int = 100_000  # walks waiting past which new writes are refused (429), until they drain
    read_yield_s: float = 0.002  # a wave's pause after each part while searches are recent (0: never)
    read_window_s: float = 0.05  # how recent a search must be for a wave to pause
    generation: int = 0  # of the partition layout (mesh.layout): which tables this shard owns
    heads_lease_s: float = 3.0  # the heads' roster lease and poll (``actors.presence.HeadsTeller``)
    heads_poll_s: float = 1.0


Record = Cell | Scene


class SceneShard(SceneReembedding):
    """Also the queue of the walks its writes start (``actors.walk_queue``); a walker runs them (``actors.walker``)."""

    def __init__(self, config: ShardConfig, lookup: Callable[[], Directory] | None = None) -> None:
        self.config = config
        self._lookup = lookup
        self._directory: Directory | None = None
        self._background = Background("scene shard commit")
        self._touches = Background("access times")  # soft: what ``settle`` does not wait for
        self._presence = PresenceTeller(("scene_shard", config.index), self._own_dir)
        self._heads = HeadsTeller(config.index, self._own_dir, config.heads_lease_s, config.heads_poll_s)
        self._walks = WalkQueue(
            self._walk_on_walker if config.walks else None,
            config.walk_batch,
            lambda: self.partition,
            self._background,
            config.storage.optimize_every,
            config.storage.soft_commit_window_s,
        )
        self.partition = MemoryPartition(config.dims, config.tuning)
        self._cells: KeyedTable | None = None
        self._scenes: KeyedTable | None = None
        self._skipped = 0  # stored rows the last load could not decode
        self._unsaved_scenes: set[str] = set()  # rows to write again (actors.scene_rows)
        self._ready_once = LoadOnce(self._load)
        window = config.storage.commit_window_s
        self._commit_timing = Histogram(LATENCY_S)  # every storage commit's duration, for /metrics
        self._commit: GroupCommitter[Record] = GroupCommitter(
            self._flush, window, config.storage.commit_max_rows, self._commit_timing, adaptive=True
        )
        journal = shard_journal(config.storage, table_prefix("scene_shard", config.index, config.generation))
        self._behind = CommitBehind(journal, self._commit, self._background, f"scene shard {config.index}") if journal else None
        self._staged: dict[str, Vector] = {}  # a reembed's new vectors, switched in by apply_staged
        self._switching = False  # between persist_staged and apply_staged / revert_staged
        self._ids = IdSource(lambda: datetime.now(UTC), os.urandom)
        self._reads = ReadYield(config.read_yield_s, config.read_window_s)  # walks yield to reads
        # Access times: a long window, so their upserts (whole rows) stay off the write path, a hot cell's once.
        self._touch_commit: GroupCommitter[Record] = GroupCommitter(
            self._flush, config.storage.access_commit_window_s, 100_000, self._commit_timing
        )

    async def close(self) -> None:
        """Finish background work and commit everything pending; the shard is then safe to drop."""
        await self.settle(30.0)
        await self._background.drain()
        await self._touches_landed()
        await self._walks.close()
        try:
            await self._save_unsaved()
            await self._all_committed()
        except MemeshError as exc:  # what is journaled stays there, and scene rows are rebuilt: the next load has it
            log.error("scene shard %d closes with rows not committed: %s", self.config.index, exc)
        finally:
            if self._behind is not None:
                self._behind.close()  # no retry after this; the journal's file is closed
            await self._commit.flush()  # nothing queued lands after the close
        await self._touch_commit.flush()

    async def _all_committed(self, purge: bool = False) -> None:
        """Every acknowledged write is in the tables, journaled ones too (the barrier before rows are read or removed
        directly); raises StorageUnavailable when a commit fails (``purge``: or a damaged journal segment may hold rows)."""
        await self._commit.flush()
        if self._behind is not None:
            await self._behind.settle(purge)

    async def _save_unsaved(self) -> None:
        """Write the scene rows a failed commit left to write again (``actors.scene_rows``)."""
        if self._unsaved_scenes:
            await self._commit.submit([self.partition.scenes[s] for s in self._unsaved_scenes if s in self.partition.scenes])

    async def _touches_landed(self) -> None:
        """Every access-time commit recall handed over so far has landed (at once, whatever the window)."""
        async with self._touch_commit.urgent():
            await self._touches.drain()
        await self._touch_commit.flush()

    async def retire(self) -> None:
        """Stop walking and commit everything pending: an online resize replaces this shard. Walks not started are
        left to the partitions' next owners, which replay every unmarked cell on load; only the batch under way ends."""
        dropped = self._walks.drop_queued()
        if dropped:
            log.info("retiring with %d walks left to replay", dropped)
        await self.close()

    def attach(self, directory: Directory) -> None:
        """Give the shard the directory its walks use (in-process; Ray shards look it up)."""
        self._directory = directory

    def _dir(self) -> Directory:
        if self._directory is None:
            if self._lookup is None:
                raise RuntimeError("this shard has no directory to walk with")
            self._directory = self._lookup()
        return self._directory

    def _own_dir(self) -> Directory | None:  # None for a shard on its own (no other walker to tell)
        return None if self._directory is None and self._lookup is None else self._dir()

    async def _ready(self) -> MemoryPartition:
        await self._ready_once()
        return self.partition

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage)
        prefix = table_prefix("scene_shard", self.config.index, self.config.generation)
        self._cells = await store.keyed(f"{prefix}_cells", cell_schema(self.config.dims), "id", identity="id")
        self._scenes = await store.keyed(f"{prefix}_scenes", scene_schema(self.config.dims), "id", identity="id")
        scene_rows, cell_rows = await self._scenes.load(), await self._cells.load()
        if self._behind is not None:  # writes acknowledged on the journal that had not reached the table
            cell_rows = await replay_journal(self._behind.journal, self._cells, cell_rows)
        scenes = scenes_from_arrow(scene_rows, self.config.dims)
        cells = [c for c in cells_from_arrow(cell_rows) if c.embedding.shape == (self.config.dims,)]
        self._skipped = scene_rows.num_rows - len(scenes) + cell_rows.num_rows - len(cells)
        self.partition.load(scenes, cells)
        await self._walks.load(await store.table(f"{prefix}_propagated", PROPAGATED_SCHEMA), cells)
        log.info("scene shard %d loaded %d scenes, %d cells", self.config.index, len(scenes), len(cells))
        # Every tenant held, again: a crash between a first commit and its telling is repaired here.
        await self._presence.tell(self.partition.tenants())
        await self._heads.loaded()  # it may have replayed writes never acknowledged: heads forget its absences

    async def tenants(self) -> list[str]:
        """The tenants this shard holds a node of (what a walker that starts asks)."""
        partition = await self._ready()
        return sorted(partition.tenants())

    async def _walk_on_walker(self, jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool) -> int:
        """Run a batch of this shard's walks on its walker, against the layout this shard belongs to."""
        directory = self._dir()
        spec = directory.spec
        return await directory.walker(self.config.index % spec.walkers).walk(spec, jobs, now, observe)

    async def health(self) -> dict[str, int]:
        partition = await self._ready()
        return {
            "cells": len(partition.cells),
            "scenes": len(partition.scenes),
            "walk_backlog": self._walks.backlog,
            "journal_pending": self._behind.outstanding if self._behind else 0,
            "scene_searches_kept": partition.scene_index.answers.hits,
            "scene_searches_run": partition.scene_index.answers.misses,
            "wave_read_pauses": self._reads.pauses,
            "skipped_rows": self._skipped,
            "pid": os.getpid(),
            **self._commit_timing.fields("commit"),
        }

    async def usage(self, tenant_id: str) -> tuple[int, int]:
        """(cells, bytes) of ``tenant_id`` held here (what its quotas count)."""
        partition = await self._ready()
        return partition.usage(tenant_id)

    async def check_write(self, tenant_id: str, cells: list[Cell]) -> None:
        """Raise what ``write`` would raise for a write of ``tenant_id`` with these explicit-scene cells (their
        scenes, the walk backlog); changes nothing. (A batch spanning shards is checked on every shard
        before any shard writes.)"""
        partition = await self._ready()
        self._admit(tenant_id)
        partition.check_scenes(cells)

    def _admit(self, tenant_id: str) -> None:
        """Refuse a tenant's new writes while this shard's walk backlog is at its bound and the tenant holds
        at least an equal share of it (so a flooding tenant waits, not the others), and everyone's at twice
        the bound. Writers slow to the rate walks drain, so the backlog (and a restart's replay of it) stays
        bounded. Soft: writes admitted together may pass it by one batch each."""
        if self._behind is not None:  # and while too many journaled writes wait for storage (503)
            self._behind.check_room()
        backlog, bound = self._walks.backlog, self.config.max_walk_backlog
        if backlog < bound:
            return
        mine, tenants = self._walks.share(tenant_id)
        if backlog >= 2 * bound or mine * tenants >= backlog:
            raise RateLimited(f"scene shard {self.config.index} has {backlog} walks waiting; retry shortly")

    async def write(self, cells: list[Cell], new_scene_ids: list[str], admitted: bool = False) -> list[Cell]:
        """Store ``cells`` (each joins or founds a scene), durably, then queue their walks. Unless
        ``admitted`` (``check_write`` passed just before), refused with ``RateLimited`` before anything
        changes while the walk backlog is at its bound."""
        partition = await self._ready()
        if not admitted and cells:
            self._admit(cells[0].tenant_id)  # a request writes for one tenant
        outcome = partition.write(cells, new_scene_ids)
        assert self._cells is not None
        created = {c.id for c in outcome.created}
        changes: list[Record] = [*outcome.founded, *outcome.created]
        try:
            if self._behind is not None and self._behind.journal.enabled:  # a retry's were journaled by its first
                if outcome.created:
                    self._behind.accept(cells_to_arrow(outcome.created, self.config.dims), changes)
            else:  # a retried write whose first attempt is still committing waits for that commit too
                changes += [c for c in outcome.cells if c.id not in self._cells and c.id not in created]
                await self._commit.submit(changes)
        except Exception:
            partition.rollback(outcome)  # not acknowledged: it must not stay visible either
            raise
        await self._presence.tell(c.tenant_id for c in outcome.created)
        self._walks.enqueue(outcome.created)
        await self._heads.tell(c.tenant_id for c in outcome.cells)  # a retry's too: it may follow a load or a refusal
        return outcome.cells

    async def settle(self, timeout_s: float = 30.0) -> int:
        """Wait until every walk queued so far has finished; returns how many were pending. For tests,
        benchmarks and orderly shutdown; bounded by ``timeout_s``."""
        return await self._walks.settle(timeout_s)

    async def neighbours_many(self, requests: list[NeighbourRequest]) -> PackedAnswers:
        """Packed for the wire, ``NEIGHBOUR_PART`` walks a part, a pause between parts (``actors.read_yield``: a
        search waits for a part, not the wave); each walk's answer is read from one state of the partition."""
        parts: list[PackedAnswers] = []
        for answer in neighbour_scene_parts(await self._ready(), requests, NEIGHBOUR_PART):
            await asyncio.sleep(self._reads.pause())
            parts.append(answer)
        return PackedAnswers.joined(parts)

    async def search_batch(self, requests: list[SearchRequest], seen: Touched | None = None) -> SearchReply:
        """Each request's answer as if asked alone, after ``seen``'s access times; the tenants it holds nothing of."""
        if seen is not None:
            await self.touch(*seen)
        partition = await self._ready()
        answers = answer_each(partition.answer, requests)
        self._reads.read()
        return answers, self._heads.absent(partition.holds, (r.tenant_id for r in requests))

    async def touch(self, cell_ids: list[str], now: datetime) -> None:
        """Record access times; persisted with the next batch, not awaited (soft state)."""
        partition = await self._ready()
        touched = partition.touch(cell_ids, now)
        # A row whose first commit a write awaits is left to it (it may roll back); a journaled one is acknowledged.
        assert self._cells is not None
        behind = self._behind
        committed: list[Record] = [c for c in touched if c.id in self._cells or (behind is not None and behind.holds(c.id))]
        if committed and not self._switching:  # during a reembed switch a row must not get its old vector back
            self._touches.spawn(self._touch_commit.submit(committed))

    async def get_scene(self, tenant_id: str, scene_id: str) -> Scene:
        partition = await self._ready()
        return partition.scene(tenant_id, scene_id)

    async def list_scenes(
        self, tenant_id: str, project_id: str | None, after: str | None, limit: int, projects: frozenset[str] | None = None
    ) -> list[Scene]:
        partition = await self._ready()
        return partition.list_scenes(tenant_id, project_id, after, limit, projects)

    async def consolidate(
        self, tenant_id: str, scene_id: str, source_agent: str, now: datetime
    ) -> tuple[Scene, list[Cell], list[Cell]]:
        """Abstract every near-duplicate group of the scene; a retry finds nothing left to do.

        The groups are found in a worker thread over a snapshot of the pool (the event loop keeps serving
        every other call meanwhile), then applied at once. A failed commit reverts them in memory, so
        nothing that was not committed stays visible or gets written later."""
        partition = await self._ready()
        pool = partition.consolidation_pool(tenant_id, scene_id)
        groups: list[list[int]] = []
        if len(pool) >= self.config.tuning.min_group:
            matrix = np.stack([c.embedding for c in pool])
            tuning = self.config.tuning
            groups = await asyncio.to_thread(find_groups, matrix, tuning.duplicate_similarity, tuning.min_group)
        outcome = partition.consolidate(
            tenant_id, scene_id, self._ids.new, source_agent, now, [[pool[i].id for i in g] for g in groups]
        )
        changes: list[Record] = [*outcome.patterns, *outcome.superseded, outcome.scene]
        try:
            await self._commit.submit(changes)
        except Exception:
            partition.revert_consolidation(outcome)
            raise
        # A Pattern abstracts cells whose diffs already propagated: it starts no walk of its own.
        self._walks.mark_walked([p.id for p in outcome.patterns])
        return outcome.scene, outcome.patterns, outcome.superseded

    # ------------------------------------------------------------ cells by id
    async def get_cell(self, tenant_id: str, cell_id: str, tombstoned: bool = False) -> Cell | None:
        """The tenant's cell ``cell_id`` (live or superseded; tombstoned too if asked), or None: absent,
        tombstoned, erased or another tenant's."""
        partition = await self._ready()
        cell = partition.cells.get(cell_id)
        return cell if cell is not None and cell.tenant_id == tenant_id and (tombstoned or not cell.tombstone) else None

    async def list_cells(self, tenant_id: str, flt: NodeFilter, after: str | None, limit: int) -> list[Cell]:
        """A keyset page of the tenant's cells here (``MemoryPartition.list_cells``)."""
        partition = await self._ready()
        return partition.list_cells(tenant_id, flt, after, limit)

    # --------------------------------------------------------- delete and erase
    async def locate(self, cell_id: str) -> tuple[str, str] | None:
        """(tenant, project) of a stored cell, or None when this shard does not hold it."""
        cell = (await self._ready()).cells.get(cell_id)
        return (cell.tenant_id, cell.project_id) if cell is not None else None

    async def delete_cell(self, cell_id: str) -> bool:
        """Tombstone a cell and commit it; False when it already was (a no-op, once durable) or is absent."""
        return await tombstone_durably(await self._ready(), self._commit, cell_id)

    async def erase_plan(self, selector: Selector, quiesce: bool) -> ShardErasePlan:
        """What an erase of ``selector`` removes here: the matching cells and every Pattern abstracting
        one (a Pattern quotes a member), with their scenes, diffs and writers. Nothing is removed.

        With ``quiesce`` (a real erase) the cells' walks are also stopped: none is queued or running when
        this answers, and none starts again, so the deliveries their diffs made can be counted and erased."""
        partition = await self._ready()
        cells = partition.with_abstractions(partition.select(selector))
        chosen = frozenset(c.id for c in cells)
        if quiesce and chosen:
            await self._walks.quiesce(chosen)
            cells = partition.with_abstractions(partition.select(selector))  # as they are once the walks stopped
        return plan_erase(partition, cells)

    async def erase_cells(self, plan: ShardErasePlan) -> None:
        """Carry out ``plan``: the cells leave memory and every data file (older versions included), their
        scenes are removed or rewritten with fresh centroids and summaries, revived members are rewritten.

        Idempotent: a repeat (after a timeout, a crash or a failure half-way) finds less in memory and
        rewrites the same rows, so the files end up the same. Pending commits (the journal's too) are
        flushed first, and a commit queued for an erased cell writes nothing afterwards."""
        partition = await self._ready()
        ids = frozenset(plan.cell_ids)
        await self._walks.quiesce(ids)
        partition.erase(ids)
        for cell_id in ids:
            self._staged.pop(cell_id, None)
        await self._save_unsaved()  # a row a failed commit left stale may quote a cell that is gone
        await self._all_committed(purge=True)  # the journal keeps no byte of them either
        for committer in (self._touch_commit, self._walks):
            await committer.flush()  # what was queued lands first; nothing of these cells is written after
        assert self._cells is not None and self._scenes is not None
        dims = self.config.dims
        revived = [partition.cells[c] for c in plan.revive_ids if c in partition.cells]
        await self._cells.erase(ids, cells_to_arrow(revived, dims))
        kept = [partition.fresh(partition.scenes[s]) for s in plan.scene_ids if s in partition.scenes]
        await self._scenes.erase([s for s in plan.scene_ids if s not in partition.scenes], scenes_to_arrow(kept, dims))
        await self._walks.forget(ids)

    async def writer_sums(self, tenant_id: str, agent_ids: list[str]) -> WriterSums:
        """Per agent of ``agent_ids``: the sum and count of the vectors of the cells it wrote here
        (what its agent node averages), computed afresh from the cells held now."""
        partition = await self._ready()
        wanted = set(agent_ids)
        return writer_sums(
            (c for c in partition.cells.values() if c.tenant_id == tenant_id and c.source_agent in wanted), self.config.dims
        )

    # ----------------------------------------------------------------- reembed
    async def _flush(self, changes: list[Record]) -> None:
        """Write the records of ``changes`` as memory holds them now; records memory no longer holds
        (erased, rolled back) are not written."""
        assert self._cells is not None and self._scenes is not None
        partition = self.partition
        scenes: dict[str, Scene] = {}
        cells: dict[str, Cell] = {}
        for change in changes:
            if isinstance(change, Scene):
                scene = partition.scenes.get(change.id)
                if scene is not None:
                    scenes[scene.id] = scene
            elif (cell := partition.cells.get(change.id)) is not None:
                cells[cell.id] = cell
        await commit_rows(
            (self._scenes, self._cells), partition, scenes, cells, self._unsaved_scenes, f"scene shard {self.config.index}"
        )

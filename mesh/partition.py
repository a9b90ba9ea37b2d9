"""The cells and scenes of one partition of the mesh, in memory.

A partition holds whole projects (the shard key is ``(tenant, project)``, see
:mod:`mesh.sharding`), so joining the nearest scene of a project is an exact,
local decision made by one writer. Transitions return what changed; the owner
persists it. Nothing here does I/O or reads a clock: times and new ids arrive
as arguments. The vector indexes live in :mod:`mesh.partition_index`, the
making of a Pattern in :mod:`mesh.pattern`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime

import numpy as np

from mesh.erasure import Selector
from mesh.errors import Conflict, NotFound, ValidationFailed
from mesh.model import Cell, Layer, Scene, Vector
from mesh.partition_index import JoinScores, SceneCentroidIndex, SceneHits, TenantCellIndex
from mesh.partition_outcomes import ConsolidationOutcome, EraseEffect, EraseOutcome, WriteOutcome
from mesh.pattern import duplicate_groups, pattern_of
from mesh.query import NodeFilter, SearchAnswer, SearchRequest
from mesh.storage_cost import stored_bytes
from mesh.summary import extractive_summary
from mesh.tuning import RetrievalTuning, SceneTuning


class MemoryPartition:
    """Cells and scenes of the projects one shard owns.

    Guarantees: writes are idempotent by cell id (a retried write returns the
    stored cell and changes nothing); searches see only the caller's tenant;
    a cell is searchable by default only while live.
    """

    def __init__(self, dims: int, tuning: SceneTuning) -> None:
        self.dims = dims
        self.tuning = tuning
        self.cells: dict[str, Cell] = {}
        self.scenes: dict[str, Scene] = {}
        self._tenants: dict[str, TenantCellIndex] = {}
        self.scene_index = SceneCentroidIndex(dims)  # public for its counters (scene_index.answers); kept current here
        self._usage: dict[str, list[int]] = {}  # tenant -> [cells, bytes]

    def usage(self, tenant_id: str) -> tuple[int, int]:
        """(cells, bytes) the tenant stores in this partition, every cell counted (live or not)."""
        cells, size = self._usage.get(tenant_id, (0, 0))
        return cells, size

    def tenants(self) -> set[str]:
        """Every tenant with a cell here (live or not): a superset of those with scenes to walk."""
        return set(self._usage)

    def holds(self, tenant_id: str) -> bool:
        """Whether a search of ``tenant_id`` can find anything here: from its first cell loaded or written on."""
        return tenant_id in self._tenants

    def _count(self, cell: Cell, sign: int) -> None:
        usage = self._usage.setdefault(cell.tenant_id, [0, 0])
        usage[0] += sign
        usage[1] += sign * stored_bytes(cell.content, self.dims)

    # ----------------------------------------------------------------- loading
    def load(self, scenes: Iterable[Scene], cells: Iterable[Cell]) -> None:
        """Rebuild from stored rows; centroids, members and summaries are recomputed from the cells. A scene
        whose row is missing is rebuilt from its cells (their earliest ``created_at``: the founder's)."""
        for scene in scenes:
            scene.reset_sum(np.zeros(self.dims, dtype=np.float64))
            scene.members, scene.live_count, scene.summary_dirty = [], 0, True
            self.scenes[scene.id] = scene
        rebuilt: dict[str, Scene] = {}
        for cell in sorted(cells, key=lambda c: c.id):
            if cell.scene_id and cell.scene_id not in self.scenes:
                self.scenes[cell.scene_id] = rebuilt[cell.scene_id] = Scene.founded_by(cell, cell.scene_id, self.dims)
            if (founded := rebuilt.get(cell.scene_id or "")) is not None:  # the earliest of its cells
                founded.created_at = min(founded.created_at, cell.created_at)
            self._insert(cell)
        for scene in self.scenes.values():
            self.scene_index.update(scene)

    # ------------------------------------------------------------------ writes
    def write(self, cells: list[Cell], new_scene_ids: list[str]) -> WriteOutcome:
        """Store ``cells`` in order; each joins a scene or founds one with the next id of ``new_scene_ids``.

        All or nothing: what it refuses (a wrong dimension, a scene named that is absent or has no room for
        every cell of the batch naming it) is refused before anything changes. A cell joining on its own
        never takes a place the batch's later cells named, and should anything fail half-way the cells
        stored so far are taken out again, so a refused batch leaves no cell behind."""
        outcome = WriteOutcome()
        spare = iter(new_scene_ids)
        for cell in cells:  # validate the whole batch before changing anything
            if cell.id not in self.cells and cell.embedding.shape != (self.dims,):
                raise ValidationFailed("embedding has the wrong number of dimensions")
        named = self.check_scenes(cells)
        joins = self.scene_index.joins([c for c in cells if c.scene_id is None and c.id not in self.cells])
        try:
            for cell in cells:
                stored = self.cells.get(cell.id)
                if stored is not None:
                    outcome.cells.append(stored)
                    continue
                scene = self._scene_for(cell, spare, outcome, joins, named)
                cell.scene_id = scene.id
                outcome.created.append(cell)  # before the insert: a failure in it is rolled back with the rest
                self._insert(cell)
                self.scene_index.update(scene)
                outcome.cells.append(cell)
        except BaseException:
            self.rollback(outcome)
            raise
        return outcome

    def _explicit_scene(self, cell: Cell) -> Scene:
        """The scene a cell names. Absent, another tenant's and another project's are the same
        NotFound (a read-scoped caller cannot learn that a scene exists elsewhere)."""
        scene = self.scenes.get(cell.scene_id or "")
        if scene is None or scene.tenant_id != cell.tenant_id or scene.project_id != cell.project_id:
            raise NotFound("scene not found in this project")
        return scene

    def check_scenes(self, cells: Iterable[Cell]) -> Counter[str]:
        """Raise what ``write`` would raise for the cells' explicit scenes, changing nothing: each must exist in
        the cell's tenant and project and have room for all the cells (not stored yet) that name it, else
        Conflict. Returns how many of them name each scene (the places ``write`` keeps for them)."""
        named: Counter[str] = Counter()
        for cell in cells:
            if cell.scene_id is not None and cell.id not in self.cells:
                scene = self._explicit_scene(cell)
                named[scene.id] += 1
                if len(scene.members) + named[scene.id] > self.tuning.max_members:
                    raise Conflict(f"the scene holds its maximum of {self.tuning.max_members} cells")
        return named

    def rollback(self, outcome: WriteOutcome) -> None:
        """Undo a write whose commit failed: its cells and founded scenes leave memory."""
        for cell in reversed(outcome.created):
            if self.cells.pop(cell.id, None) is not None:
                self._count(cell, -1)
            self._tenant(cell.tenant_id).index.set_live(cell.id, False)
            scene = self.scenes.get(cell.scene_id or "")
            if scene is not None and cell.id in scene.members:
                scene.members.remove(cell.id)
                if cell.live:
                    scene.remove_vector(cell.embedding)
                    scene.live_count -= 1
                scene.summary_dirty = True
                self.scene_index.update(scene)
        for scene in outcome.founded:
            self.scenes.pop(scene.id, None)
            self.scene_index.hide(scene)

    def _scene_for(
        self, cell: Cell, spare: Iterable[str], outcome: WriteOutcome, joins: JoinScores, named: Counter[str]
    ) -> Scene:
        """The scene ``cell`` joins: the one it names (whose place ``named`` kept), else the nearest of its
        project with room beyond the places kept, else a new one."""
        if cell.scene_id is not None:
            named[cell.scene_id] -= 1
            return self._explicit_scene(cell)
        nearest = joins.nearest_in_project(cell, 8)
        for near, similarity in nearest:  # the nearest with room
            if similarity < self.tuning.join_similarity:
                break
            if len(self.scenes[near].members) + named[near] < self.tuning.max_members:
                return self.scenes[near]
        scene_id = next(iter(spare), None)
        if scene_id is None:
            raise ValidationFailed("no scene id left for a new scene")
        scene = Scene.founded_by(cell, scene_id, self.dims)
        self.scenes[scene.id] = scene
        outcome.founded.append(scene)
        return scene

    def _insert(self, cell: Cell) -> None:
        if cell.id not in self.cells:
            self._count(cell, +1)
        self.cells[cell.id] = cell
        self._tenant(cell.tenant_id).put(cell)
        scene = self.scenes.get(cell.scene_id) if cell.scene_id else None
        if scene is not None:
            scene.members.append(cell.id)
            if cell.live:
                scene.add_vector(cell.embedding)
                scene.live_count += 1
            scene.summary_dirty = True

    def touch(self, cell_ids: Iterable[str], now: datetime) -> list[Cell]:
        """Set ``last_accessed``; returns the cells it changed."""
        touched = []
        for cid in cell_ids:
            cell = self.cells.get(cid)
            if cell is not None and cell.last_accessed < now:
                cell.last_accessed = now
                touched.append(cell)
        return touched

    # ------------------------------------------------------------------- reads
    def search(self, tenant_id: str, query: Vector, k: int, flt: NodeFilter) -> list[tuple[Cell, float]]:
        """The ``k`` cells of ``tenant_id`` nearest ``query`` that pass ``flt``, best first."""
        if flt.tenant_id is not None and flt.tenant_id != tenant_id:
            return []
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            return []
        hits = tenant.index.search(query, k, tenant.mask(flt))
        return [(self.cells[cid], sim) for cid, sim in hits]

    def lexical_search(
        self, tenant_id: str, query: list[str], k: int, flt: NodeFilter, tuning: RetrievalTuning
    ) -> list[tuple[Cell, float]]:
        """The ``k`` cells of ``tenant_id`` passing ``flt`` with the highest positive BM25 for the ``query``
        terms (see :mod:`mesh.lexical`), best first."""
        tenant = self._tenants.get(tenant_id)
        if tenant is None or not query or (flt.tenant_id is not None and flt.tenant_id != tenant_id):
            return []
        return [(self.cells[cid], score) for cid, score in tenant.lexical_search(query, k, flt, tuning)]

    def answer(self, request: SearchRequest) -> SearchAnswer:
        """One request's candidates: the dense list, and with terms the BM25 list with each cell's cosine
        (one filter mask for both)."""
        flt, tenant = request.flt, self._tenants.get(request.tenant_id)
        if tenant is None or (flt.tenant_id is not None and flt.tenant_id != request.tenant_id):
            return [], []
        mask = tenant.mask(flt)
        dense = [(self.cells[cid], sim) for cid, sim in tenant.index.search(request.vector, request.k, mask)]
        if not request.terms:
            return dense, []
        lexical = tenant.lexical_search(list(request.terms), request.tuning.lexical_pool(request.k), flt, request.tuning, mask)
        cosines = tenant.index.similarity([cid for cid, _ in lexical], request.vector)
        return dense, [(self.cells[cid], bm25, float(cos)) for (cid, bm25), cos in zip(lexical, cosines, strict=True)]

    def scene(self, tenant_id: str, scene_id: str) -> Scene:
        """The scene with a fresh summary; absent and out-of-tenant are the same NotFound."""
        scene = self.scenes.get(scene_id)
        if scene is None or scene.tenant_id != tenant_id:
            raise NotFound("scene not found")
        return self.fresh(scene)

    def fresh(self, scene: Scene) -> Scene:
        """``scene`` with its summary made from its current live members (what is stored must never
        quote a cell that left it)."""
        if scene.summary_dirty:
            members = [self.cells[m] for m in scene.members]
            scene.summary = extractive_summary(members, scene.centroid, self.tuning)
            scene.summary_dirty = False
        return scene

    def list_scenes(
        self, tenant_id: str, project_id: str | None, after: str | None, limit: int, projects: frozenset[str] | None = None
    ) -> list[Scene]:
        """Scenes of the tenant in id order (creation order for v7 ids), strictly after ``after``,
        optionally only of ``projects`` (a read scope: applied before the limit)."""
        rows = sorted(
            s.id
            for s in self.scenes.values()
            if s.tenant_id == tenant_id
            and project_id in (None, s.project_id)
            and (projects is None or s.project_id in projects)
            and (after is None or s.id > after)
        )
        return [self.scene(tenant_id, sid) for sid in rows[:limit]]

    def list_cells(self, tenant_id: str, flt: NodeFilter, after: str | None, limit: int) -> list[Cell]:
        """A keyset page of the tenant's cells passing ``flt``, in id order after ``after`` (never tombstoned or erased)."""
        tenant = self._tenants.get(tenant_id)
        return [self.cells[i] for i in tenant.in_id_order(flt, after, limit)] if tenant is not None else []

    # --------------------------------------------------------- delete and erase
    def select(self, selector: Selector) -> list[Cell]:
        """Every stored cell (live, superseded or tombstoned) the selector matches, in id order."""
        if selector.cell_ids and selector.agent_id is None and selector.project_id is None:
            found = (self.cells.get(cid) for cid in selector.cell_ids)
            chosen = [c for c in found if c is not None and c.tenant_id == selector.tenant_id]
        else:
            chosen = [c for c in self.cells.values() if selector.matches(c.tenant_id, c.id, c.project_id, c.source_agent)]
        return sorted(chosen, key=lambda c: c.id)

    def with_abstractions(self, cells: list[Cell]) -> list[Cell]:
        """``cells`` and every Pattern abstracting one of them: a Pattern quotes a member's content and
        averages the members' vectors, so erasing a member must erase its Pattern too."""
        chosen = {c.id: c for c in cells}
        for cell in cells:
            pattern = self.cells.get(cell.superseded_by or "")
            if pattern is not None:
                chosen.setdefault(pattern.id, pattern)
        return sorted(chosen.values(), key=lambda c: c.id)

    def erase_effect(self, cell_ids: frozenset[str]) -> EraseEffect:
        """The scenes an erase of ``cell_ids`` empties and the ones it recomputes (nothing changes)."""
        scenes = {self.cells[c].scene_id for c in cell_ids if c in self.cells and self.cells[c].scene_id in self.scenes}
        emptied = frozenset(s for s in scenes if s and all(m in cell_ids for m in self.scenes[s].members))
        return EraseEffect(emptied, frozenset(s for s in scenes if s and s not in emptied))

    def tombstone(self, cell_id: str) -> Cell | None:
        """Tombstone a cell: out of every read and walk at once, its scene recomputed. None when it
        already was (a second delete is a no-op) or is absent."""
        cell = self.cells.get(cell_id)
        if cell is None or cell.tombstone:
            return None
        was_live = cell.live
        cell.tombstone = True
        self._tenant(cell.tenant_id).index.set_live(cell.id, False)
        scene = self.scenes.get(cell.scene_id or "")
        if scene is not None and was_live:
            scene.remove_vector(cell.embedding)
            scene.live_count -= 1
            scene.summary_dirty = True
            self.scene_index.update(scene)
        return cell

    def untombstone(self, cell: Cell) -> None:
        """Undo ``tombstone`` of ``cell`` (its commit failed): back in reads and walks, its scene as before."""
        if not cell.tombstone or self.cells.get(cell.id) is not cell:
            return
        cell.tombstone = False
        self._tenant(cell.tenant_id).index.set_live(cell.id, True)
        scene = self.scenes.get(cell.scene_id or "")
        if scene is not None and cell.live:
            scene.add_vector(cell.embedding)
            scene.live_count += 1
            scene.summary_dirty = True
            self.scene_index.update(scene)

    def erase(self, cell_ids: Iterable[str]) -> EraseOutcome:
        """Remove cells from memory entirely (vectors zeroed), revive the members of erased Patterns,
        recompute the scenes they were in, and remove scenes left without members."""
        outcome = EraseOutcome()
        touched: dict[str, Scene] = {}
        for cid in sorted(set(cell_ids)):
            cell = self.cells.pop(cid, None)
            if cell is None:
                continue
            self._count(cell, -1)
            self._tenant(cell.tenant_id).erase(cell)
            scene = self.scenes.get(cell.scene_id or "")
            if scene is not None:
                scene.members.remove(cid)
                touched[scene.id] = scene
            outcome.cells.append(cell)
        erased = {c.id for c in outcome.cells}
        for scene in touched.values():
            for member_id in scene.members:  # members of an erased Pattern are no longer abstracted
                member = self.cells[member_id]
                if member.superseded_by in erased:
                    member.superseded_by = None
                    self._tenant(member.tenant_id).put(member)
                    outcome.revived.append(member)
            if scene.members:
                self._recompute(scene)
                outcome.recomputed.append(self.fresh(scene))
                continue
            del self.scenes[scene.id]
            self.scene_index.erase(scene)
            outcome.removed_scenes.append(scene)
        return outcome

    # ----------------------------------------------------------- consolidation
    def consolidation_pool(self, tenant_id: str, scene_id: str) -> list[Cell]:
        """The scene's live L0 members in seed order (salience, then id): what ``find_groups`` runs over."""
        scene = self.scene(tenant_id, scene_id)
        members = [self.cells[m] for m in scene.members]
        return sorted((c for c in members if c.live and c.layer is Layer.L0), key=lambda c: (-c.salience, c.id))

    def consolidate(
        self,
        tenant_id: str,
        scene_id: str,
        new_id: Callable[[], str],
        source_agent: str,
        now: datetime,
        groups: list[list[str]] | None = None,
    ) -> ConsolidationOutcome:
        """Abstract each group of near-duplicate live L0 members into an L1 Pattern.

        ``groups`` are member ids found by ``mesh.consolidation.find_groups`` over
        ``consolidation_pool`` (an actor finds them off its event loop, while other
        calls may run); None finds them here.

        A group is re-checked first: members that are gone, no longer live or
        no longer in the scene are left out, and a group left below
        ``min_group`` is skipped. Each Pattern quotes its most central member,
        its embedding is the normalised mean, its salience the group's maximum;
        the members get ``superseded_by``. The centroid and summary are then
        recomputed. :meth:`revert_consolidation` undoes it (a failed commit).
        """
        scene = self.scene(tenant_id, scene_id)
        if groups is None:
            groups = duplicate_groups(self.consolidation_pool(tenant_id, scene_id), self.tuning)
        patterns: list[Cell] = []
        superseded: list[Cell] = []
        for ids in groups:
            group = [
                c
                for c in (self.cells.get(i) for i in ids)
                if c is not None and c.live and c.layer is Layer.L0 and c.scene_id == scene.id
            ]
            if len(group) < self.tuning.min_group:
                continue
            pattern = pattern_of(group, new_id(), scene, source_agent, now)
            for member in group:
                member.superseded_by = pattern.id
                self._tenant(tenant_id).put(member)
                superseded.append(member)
            self._insert(pattern)
            patterns.append(pattern)
        self._recompute(scene)
        return ConsolidationOutcome(scene=self.fresh(scene), patterns=patterns, superseded=superseded)

    def revert_consolidation(self, outcome: ConsolidationOutcome) -> None:
        """Undo ``consolidate`` (its commit failed): the Patterns leave memory, their members are live again."""
        made = {p.id for p in outcome.patterns}
        for member in outcome.superseded:
            if member.superseded_by in made:
                member.superseded_by = None
                self._tenant(member.tenant_id).put(member)
        scene = outcome.scene
        for pattern in outcome.patterns:
            if self.cells.pop(pattern.id, None) is not None:
                self._count(pattern, -1)
            self._tenant(pattern.tenant_id).erase(pattern)
            if pattern.id in scene.members:
                scene.members.remove(pattern.id)
        self._recompute(scene)

    def _recompute(self, scene: Scene) -> None:
        live = [self.cells[m] for m in scene.members if self.cells[m].live]
        scene.reset_sum(
            np.sum([c.embedding for c in live], axis=0, dtype=np.float64) if live else np.zeros(self.dims, dtype=np.float64)
        )
        scene.live_count = len(live)
        scene.summary_dirty = True
        self.scene_index.update(scene)

    # ----------------------------------------------------------------- helpers
    def _tenant(self, tenant_id: str) -> TenantCellIndex:
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = self._tenants[tenant_id] = TenantCellIndex(self.dims)
        return tenant

    def scene_neighbours(self, tenant_id: str, vector: Vector, k: int) -> list[tuple[Scene, float]]:
        """The tenant's ``k`` live scenes (any project) nearest ``vector``, best first."""
        return [(self.scenes[sid], sim) for sid, sim in self.scene_index.nearest(tenant_id, vector, k)]

    def scene_neighbours_many(self, tenant_id: str, vectors: Vector, ks: list[int], keep: list[bool] | None = None) -> SceneHits:
        """``scene_neighbours`` for every row of ``vectors`` (``ks[i]`` each): ``SceneCentroidIndex.nearest_many``."""
        return self.scene_index.nearest_many(tenant_id, vectors, ks, keep)

"""The cells and scenes of one partition of the mesh, in memory.

A partition holds whole projects (the shard key is ``(tenant, project)``), so
joining the nearest scene of a project is an exact, local decision made by one
writer. Transitions return what changed; the owner persists it. Nothing here
does I/O or reads a clock: times and new ids arrive as arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt

from mesh.consolidation import find_groups
from mesh.erasure import Selector
from mesh.errors import Conflict, NotFound, ValidationFailed
from mesh.model import Cell, CellType, Layer, Scene, Vector, normalize
from mesh.query import NodeFilter
from mesh.summary import extractive_summary
from mesh.tuning import SceneTuning
from mesh.vector_index import BoolMask, VectorIndex

_LAYER_CODE = {layer: i for i, layer in enumerate(Layer)}
_TYPE_CODE = {t: i for i, t in enumerate(CellType)}


def shard_for(key: str, shards: int) -> int:
    """The one mapping from a partition key to a shard number (stable across processes)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def partition_key(tenant_id: str, project_id: str) -> str:
    return f"{tenant_id}\x1f{project_id}"


RECORD_OVERHEAD = 256  # bytes a stored record costs beyond its text and vector (ids, times, columns)


def stored_bytes(text: str, dims: int) -> int:
    """What one stored cell or beacon counts against its tenant's ``max_bytes`` quota."""
    return len(text.encode("utf-8", "surrogatepass")) + 4 * dims + RECORD_OVERHEAD


@dataclass(slots=True)
class WriteOutcome:
    """Cells as stored (with their scene), and the scenes this write founded."""

    cells: list[Cell] = field(default_factory=list)
    founded: list[Scene] = field(default_factory=list)
    created: list[Cell] = field(default_factory=list)


@dataclass(slots=True)
class EraseOutcome:
    """Cells removed, scenes whose aggregates were recomputed, and scenes left empty and removed."""

    cells: list[Cell] = field(default_factory=list)
    recomputed: list[Scene] = field(default_factory=list)
    removed_scenes: list[Scene] = field(default_factory=list)
    revived: list[Cell] = field(default_factory=list)  # members of an erased Pattern, live again


@dataclass(slots=True)
class ConsolidationOutcome:
    scene: Scene
    patterns: list[Cell]
    superseded: list[Cell]


@dataclass(frozen=True, slots=True)
class EraseEffect:
    """What erasing a set of cells would do to their scenes (counted before anything changes)."""

    emptied: frozenset[str]  # scenes left without members (removed)
    recomputed: frozenset[str]  # scenes that keep members (aggregates recomputed)


class _Interner:
    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, value: str | None) -> int:
        if value is None:
            return -1
        return self.codes.setdefault(value, len(self.codes))

    def lookup(self, value: str) -> int:
        return self.codes.get(value, -2)


class _TenantCells:
    """A tenant's cell vectors with the columns filters need, row-aligned."""

    def __init__(self, dims: int) -> None:
        self.index = VectorIndex(dims)
        self.layer = np.zeros(256, dtype=np.int8)
        self.cell_type = np.zeros(256, dtype=np.int8)
        self.scene = np.zeros(256, dtype=np.int32)
        self.agent = np.zeros(256, dtype=np.int32)
        self.project = np.zeros(256, dtype=np.int32)
        self.superseded = np.zeros(256, dtype=np.bool_)
        self.strings = _Interner()

    def put(self, cell: Cell) -> None:
        row = self.index.upsert(cell.id, cell.embedding, live=not cell.tombstone)
        if row >= self.layer.shape[0]:
            for name in ("layer", "cell_type", "scene", "agent", "project", "superseded"):
                old = getattr(self, name)
                new = np.zeros(old.shape[0] * 2, dtype=old.dtype)
                new[: old.shape[0]] = old
                setattr(self, name, new)
        self.layer[row] = _LAYER_CODE[cell.layer]
        self.cell_type[row] = _TYPE_CODE[cell.cell_type]
        self.scene[row] = self.strings.code(cell.scene_id)
        self.agent[row] = self.strings.code(cell.source_agent)
        self.project[row] = self.strings.code(cell.project_id)
        self.superseded[row] = cell.superseded_by is not None

    def mask(self, flt: NodeFilter) -> BoolMask:
        n = self.index.size
        mask = np.ones(n, dtype=np.bool_)
        if not flt.include_superseded:
            mask &= ~self.superseded[:n]
        if flt.layer is not None:
            mask &= self.layer[:n] == _LAYER_CODE[flt.layer]
        if flt.cell_types is not None:
            mask &= np.isin(self.cell_type[:n], [_TYPE_CODE[t] for t in flt.cell_types])
        if flt.scene_id is not None:
            mask &= self.scene[:n] == self.strings.lookup(flt.scene_id)
        if flt.source_agent is not None:
            mask &= self.agent[:n] == self.strings.lookup(flt.source_agent)
        if flt.project_ids is not None:
            mask &= np.isin(self.project[:n], [self.strings.lookup(p) for p in flt.project_ids])
        return mask


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
        self._tenants: dict[str, _TenantCells] = {}
        self._centroids: dict[tuple[str, str], VectorIndex] = {}
        self._tenant_scenes: dict[str, VectorIndex] = {}
        self._usage: dict[str, list[int]] = {}  # tenant -> [cells, bytes]

    def usage(self, tenant_id: str) -> tuple[int, int]:
        """(cells, bytes) the tenant stores in this partition, every cell counted (live or not)."""
        cells, size = self._usage.get(tenant_id, (0, 0))
        return cells, size

    def _count(self, cell: Cell, sign: int) -> None:
        usage = self._usage.setdefault(cell.tenant_id, [0, 0])
        usage[0] += sign
        usage[1] += sign * stored_bytes(cell.content, self.dims)

    # ----------------------------------------------------------------- loading
    def load(self, scenes: Iterable[Scene], cells: Iterable[Cell]) -> None:
        """Rebuild from stored rows; centroids are recomputed from live members."""
        for scene in scenes:
            scene.reset_sum(np.zeros(self.dims, dtype=np.float64))
            scene.members, scene.live_count, scene.summary_dirty = [], 0, True
            self.scenes[scene.id] = scene
        for cell in sorted(cells, key=lambda c: c.id):
            self._insert(cell)
        for scene in self.scenes.values():
            self._update_centroid(scene)

    # ------------------------------------------------------------------ writes
    def write(self, cells: list[Cell], new_scene_ids: list[str]) -> WriteOutcome:
        """Store ``cells`` in order; each joins a scene or founds one with the next id of ``new_scene_ids``."""
        outcome = WriteOutcome()
        spare = iter(new_scene_ids)
        for cell in cells:  # validate the whole batch before changing anything
            if cell.id in self.cells:
                continue
            if cell.embedding.shape != (self.dims,):
                raise ValidationFailed("embedding has the wrong number of dimensions")
            if cell.scene_id is not None:
                self._explicit_scene(cell)
        for cell in cells:
            stored = self.cells.get(cell.id)
            if stored is not None:
                outcome.cells.append(stored)
                continue
            scene = self._scene_for(cell, spare, outcome)
            cell.scene_id = scene.id
            self._insert(cell)
            self._update_centroid(scene)
            outcome.cells.append(cell)
            outcome.created.append(cell)
        return outcome

    def _explicit_scene(self, cell: Cell) -> Scene:
        """The scene a cell names. Absent, another tenant's and another project's are the same
        NotFound (a read-scoped caller cannot learn that a scene exists elsewhere); a full scene
        is a Conflict."""
        scene = self.scenes.get(cell.scene_id or "")
        if scene is None or scene.tenant_id != cell.tenant_id or scene.project_id != cell.project_id:
            raise NotFound("scene not found in this project")
        if len(scene.members) >= self.tuning.max_members:
            raise Conflict(f"the scene holds its maximum of {self.tuning.max_members} cells")
        return scene

    def check_scenes(self, cells: Iterable[Cell]) -> None:
        """Raise what ``write`` would raise for the cells' explicit scenes, changing nothing."""
        for cell in cells:
            if cell.scene_id is not None and cell.id not in self.cells:
                self._explicit_scene(cell)

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
                self._update_centroid(scene)
        for scene in outcome.founded:
            self.scenes.pop(scene.id, None)
            self._centroid_index(scene).set_live(scene.id, False)
            tenant_index = self._tenant_scenes.get(scene.tenant_id)
            if tenant_index is not None:
                tenant_index.set_live(scene.id, False)

    def _scene_for(self, cell: Cell, spare: Iterable[str], outcome: WriteOutcome) -> Scene:
        if cell.scene_id is not None:
            return self._explicit_scene(cell)
        index = self._centroids.get((cell.tenant_id, cell.project_id))
        if index is not None:
            for near, similarity in index.search(cell.embedding, 8):  # the nearest with room
                if similarity < self.tuning.join_similarity:
                    break
                if len(self.scenes[near].members) < self.tuning.max_members:
                    return self.scenes[near]
        scene_id = next(iter(spare), None)
        if scene_id is None:
            raise ValidationFailed("no scene id left for a new scene")
        scene = Scene(
            id=scene_id,
            tenant_id=cell.tenant_id,
            project_id=cell.project_id,
            created_at=cell.created_at,
            vector_sum=np.zeros(self.dims, dtype=np.float64),
        )
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
            and (project_id is None or s.project_id == project_id)
            and (projects is None or s.project_id in projects)
            and (after is None or s.id > after)
        )
        return [self.scene(tenant_id, sid) for sid in rows[:limit]]

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
            self._update_centroid(scene)
        return cell

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
            self._tenant(cell.tenant_id).index.erase(cid)
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
            self._centroid_index(scene).erase(scene.id)
            tenant_index = self._tenant_scenes.get(scene.tenant_id)
            if tenant_index is not None:
                tenant_index.erase(scene.id)
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
            pool = self.consolidation_pool(tenant_id, scene_id)
            found = (
                find_groups(np.stack([c.embedding for c in pool]), self.tuning.duplicate_similarity, self.tuning.min_group)
                if pool
                else []
            )
            groups = [[pool[i].id for i in g] for g in found]
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
            mean = normalize(np.sum([c.embedding for c in group], axis=0, dtype=np.float64))
            centrality = np.stack([c.embedding for c in group]) @ mean
            central = min(range(len(group)), key=lambda i: (-float(centrality[i]), group[i].created_at.timestamp()))
            pattern = Cell(
                id=new_id(),
                tenant_id=tenant_id,
                project_id=scene.project_id,
                cell_type=CellType.PATTERN,
                content=group[central].content,
                salience=max(c.salience for c in group),
                source_agent=source_agent,
                created_at=now,
                last_accessed=now,
                layer=Layer.L1,
                embedding=mean,
                engine=group[0].engine,
                scene_id=scene.id,
            )
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
            self._tenant(pattern.tenant_id).index.erase(pattern.id)
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
        self._update_centroid(scene)

    # ----------------------------------------------------------------- helpers
    def _tenant(self, tenant_id: str) -> _TenantCells:
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = self._tenants[tenant_id] = _TenantCells(self.dims)
        return tenant

    def _update_centroid(self, scene: Scene) -> None:
        centroid, live = scene.centroid, scene.live_count > 0
        self._centroid_index(scene).upsert(scene.id, centroid, live=live)
        index = self._tenant_scenes.get(scene.tenant_id)
        if index is None:
            index = self._tenant_scenes[scene.tenant_id] = VectorIndex(self.dims, capacity=16)
        index.upsert(scene.id, centroid, live=live)

    def scene_neighbours(self, tenant_id: str, vector: Vector, k: int) -> list[tuple[Scene, float]]:
        """The tenant's ``k`` live scenes (any project) nearest ``vector``, best first."""
        index = self._tenant_scenes.get(tenant_id)
        if index is None:
            return []
        return [(self.scenes[sid], sim) for sid, sim in index.search(vector, k)]

    def scene_neighbours_many(self, tenant_id: str, vectors: npt.NDArray[np.float32], k: int) -> list[list[tuple[Scene, float]]]:
        """``scene_neighbours`` for every row of ``vectors``, in one matrix product."""
        index = self._tenant_scenes.get(tenant_id)
        if index is None:
            return [[] for _ in range(len(vectors))]
        return [[(self.scenes[sid], sim) for sid, sim in hits] for hits in index.search_many(vectors, k)]

    def _centroid_index(self, scene: Scene) -> VectorIndex:
        key = (scene.tenant_id, scene.project_id)
        index = self._centroids.get(key)
        if index is None:
            index = self._centroids[key] = VectorIndex(self.dims, capacity=16)
        return index

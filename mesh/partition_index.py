"""The vector indexes a partition keeps beside its cells and scenes, in memory.

:class:`TenantCellIndex` holds one tenant's cell vectors with the columns a
:class:`~mesh.query.NodeFilter` needs (layer, type, scene, agent, project,
superseded), row-aligned with the vectors, so a filtered search is one mask
and one matrix product. :class:`SceneCentroidIndex` holds scene centroids
twice: per project (where a new cell looks for a scene to join) and per
tenant (what walks search). Guarantees: a search never returns a row of
another tenant, nor a row that is not live; nothing here owns a cell or a
scene, the partition passes them in and keeps the indexes current.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mesh.lexical import LexicalIndex
from mesh.model import Cell, CellType, Layer, Scene, Vector
from mesh.nearest_cache import Answer, Key, NearestCache, query_key
from mesh.query import NodeFilter
from mesh.tuning import RetrievalTuning
from mesh.vector_index import BoolMask, VectorIndex

_LAYER_CODE = {layer: i for i, layer in enumerate(Layer)}
_TYPE_CODE = {t: i for i, t in enumerate(CellType)}
JOIN_SCORES_BYTES = 16 * 2**20  # the most a write batch's join scores hold (float32, cells x scenes of their projects)


class _Interner:
    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, value: str | None) -> int:
        if value is None:
            return -1
        return self.codes.setdefault(value, len(self.codes))

    def lookup(self, value: str) -> int:
        return self.codes.get(value, -2)


class TenantCellIndex:
    """A tenant's cell vectors with the columns filters need and a BM25 index of their content, row-aligned."""

    def __init__(self, dims: int) -> None:
        self.index = VectorIndex(dims)
        self.layer = np.zeros(256, dtype=np.int8)
        self.cell_type = np.zeros(256, dtype=np.int8)
        self.scene = np.zeros(256, dtype=np.int32)
        self.agent = np.zeros(256, dtype=np.int32)
        self.project = np.zeros(256, dtype=np.int32)
        self.superseded = np.zeros(256, dtype=np.bool_)
        self.strings = _Interner()
        self.lexical = LexicalIndex()

    def put(self, cell: Cell) -> None:
        """Insert or update the cell's row (a new row also enters the lexical index: content never changes)."""
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
        self.lexical.add(row, int(self.project[row]) + 1, cell.content)  # codes from 0 (-1: no project)

    def erase(self, cell: Cell) -> None:
        """Zero the cell's vector and drop its terms: nothing derived from its content stays."""
        if cell.id in self.index:
            self.lexical.remove(self.index.row_of(cell.id), cell.content)
        self.index.erase(cell.id)

    def lexical_search(
        self, query: list[str], k: int, flt: NodeFilter, tuning: RetrievalTuning, mask: BoolMask | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` live rows passing ``flt`` (or ``mask``, its mask when the caller has it already) with the
        highest positive BM25 for ``query`` terms, best first."""
        live = self.index.live()
        allowed = live & (self.mask(flt) if mask is None else mask)
        scores = self.lexical.scores(query, live, allowed, tuning.bm25_k1, tuning.bm25_b)
        return self.index.top(scores, k)

    def in_id_order(self, flt: NodeFilter, after: str | None, limit: int) -> list[str]:
        """Ids of at most ``limit`` rows passing ``flt`` after ``after``, in id order (see ``VectorIndex.in_id_order``)."""
        return self.index.in_id_order(self.mask(flt), after, limit)

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


SceneHits = tuple[list[list[str]], list[list[float]], npt.NDArray[np.float32]]  # ids, scores per query; their vectors


class SceneCentroidIndex:
    """Scene centroids by project (for joining) and by tenant (for walks); a scene without live members is not live."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._by_project: dict[tuple[str, str], VectorIndex] = {}
        self._by_tenant: dict[str, VectorIndex] = {}
        self.answers = NearestCache()  # the walks' searches; every change below drops the tenant's

    def update(self, scene: Scene) -> None:
        """Put the scene's current centroid in both indexes."""
        self.answers.invalidate(scene.tenant_id)
        centroid, live = scene.centroid, scene.live_count > 0
        self._project_index(scene).upsert(scene.id, centroid, live=live)
        index = self._by_tenant.get(scene.tenant_id)
        if index is None:
            index = self._by_tenant[scene.tenant_id] = VectorIndex(self.dims, capacity=16)
        index.upsert(scene.id, centroid, live=live)

    def hide(self, scene: Scene) -> None:
        """Take the scene out of every search (its rows stay, as after a rolled-back write)."""
        self.answers.invalidate(scene.tenant_id)
        self._project_index(scene).set_live(scene.id, False)
        index = self._by_tenant.get(scene.tenant_id)
        if index is not None:
            index.set_live(scene.id, False)

    def erase(self, scene: Scene) -> None:
        """Zero the scene's centroid and take it out of every search."""
        self.answers.invalidate(scene.tenant_id)
        self._project_index(scene).erase(scene.id)
        index = self._by_tenant.get(scene.tenant_id)
        if index is not None:
            index.erase(scene.id)

    def nearest_in_project(self, tenant_id: str, project_id: str, vector: Vector, k: int) -> list[tuple[str, float]]:
        """The ids of the project's ``k`` live scenes nearest ``vector``, best first."""
        index = self._by_project.get((tenant_id, project_id))
        return [] if index is None else index.search(vector, k)

    def joins(self, cells: list[Cell]) -> JoinScores:
        """The scores a write batch's ``cells`` look for a scene to join by: one matrix product per project
        that two or more of them write to (a lone cell's search is as cheap as its share of a product). The
        scores held stay under ``JOIN_SCORES_BYTES`` (a project's cells past it search on their own)."""
        by_project: dict[tuple[str, str], list[int]] = {}
        for i, cell in enumerate(cells):
            by_project.setdefault((cell.tenant_id, cell.project_id), []).append(i)
        taken: dict[str, tuple[VectorIndex, int, npt.NDArray[np.float32]]] = {}
        budget = JOIN_SCORES_BYTES
        for key, positions in by_project.items():
            index = self._by_project.get(key)
            if index is None or len(positions) < 2:
                continue
            positions = positions[: budget // (4 * max(index.size, 1))]
            if len(positions) < 2:
                continue
            budget -= 4 * index.size * len(positions)
            version, scores = index.scores_since(np.stack([cells[i].embedding for i in positions]))
            for row, i in enumerate(positions):
                taken[cells[i].id] = (index, version, scores[row])
        return JoinScores(self, taken)

    def nearest(self, tenant_id: str, vector: Vector, k: int) -> list[tuple[str, float]]:
        """The ids of the tenant's ``k`` live scenes (any project) nearest ``vector``, best first."""
        index = self._by_tenant.get(tenant_id)
        return [] if index is None else index.search(vector, k)

    def nearest_many(
        self, tenant_id: str, vectors: npt.NDArray[np.float32], ks: list[int], keep: list[bool] | None = None
    ) -> SceneHits:
        """The nearest ``ks[i]`` live scenes of ``tenant_id`` to each row of ``vectors`` (one matrix product for
        the rows not answered since the tenant's scenes last changed, each distinct row once): their ids and
        similarities per row, and their centroids, every row's in order, in one new matrix. The answers of the
        rows ``keep`` marks (all, when None) are kept for later calls; the others (a written cell's own vector,
        asked once) are not, so they never push out the answers walk after walk asks again."""
        index = self._by_tenant.get(tenant_id)
        if index is None:
            return [[] for _ in range(len(vectors))], [[] for _ in range(len(vectors))], np.zeros((0, self.dims), np.float32)
        keys = [query_key(vector, k) for vector, k in zip(vectors, ks, strict=True)]
        found: dict[Key, Answer] = {}
        missing: dict[Key, int] = {}  # a key not answered yet -> its first position
        for position, key in enumerate(keys):
            if key in found or key in missing:
                self.answers.hits += 1  # a repeat within the wave: answered without a search of its own
                continue
            answer = self.answers.get(tenant_id, key)
            if answer is None:
                missing[key] = position
            else:
                found[key] = answer
        if missing:
            positions = list(missing.values())
            rows, sims = index.search_many_rows(vectors[positions], [ks[p] for p in positions])
            for (key, position), answer in zip(missing.items(), zip(rows, sims, strict=True), strict=True):
                found[key] = answer
                if keep is None or keep[position]:
                    self.answers.put(tenant_id, key, answer)
        answers = [found[key] for key in keys]
        ids, centroids = index.hits_of_rows([rows for rows, _ in answers])
        return ids, [list(sims) for _, sims in answers], centroids  # copies: the kept lists stay as they were

    def _project_index(self, scene: Scene) -> VectorIndex:
        key = (scene.tenant_id, scene.project_id)
        index = self._by_project.get(key)
        if index is None:
            index = self._by_project[key] = VectorIndex(self.dims, capacity=16)
        return index


class JoinScores:
    """A write batch's scores against its projects' scene centroids, taken once (``SceneCentroidIndex.joins``).

    Guarantee: ``nearest_in_project`` answers what ``SceneCentroidIndex.nearest_in_project`` would at the moment
    it is asked, whatever the batch changed since (a scene a cell before it founded or moved is scored again,
    ``VectorIndex.search_from``), up to the rounding of one product against another.
    """

    def __init__(self, centroids: SceneCentroidIndex, taken: dict[str, tuple[VectorIndex, int, npt.NDArray[np.float32]]]) -> None:
        self._centroids = centroids
        self._taken = taken

    def __len__(self) -> int:
        """How many cells are answered from the scores taken."""
        return len(self._taken)

    def nearest_in_project(self, cell: Cell, k: int) -> list[tuple[str, float]]:
        taken = self._taken.get(cell.id)
        if taken is None:
            return self._centroids.nearest_in_project(cell.tenant_id, cell.project_id, cell.embedding, k)
        index, version, scores = taken
        return index.search_from(scores, version, cell.embedding, k)

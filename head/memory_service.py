"""Memory use cases: write cells, query, recall, sessions and scenes.

Every method takes the authenticated :class:`Principal` first and confines
what it touches to the principal's tenant and read scope; nothing here trusts
an identity named in a request. Shards are addressed through the Directory by
the assignment in force (``DirectorySpec.owner``); reads fan out to the shards that can hold a
match (the owners of a read scope's projects, else every shard) and merge.

A batch is validated whole before any shard writes: every field, the
tenant's quotas (reserved, and given back if the write fails) and every
explicit ``scene_id`` on the shard that holds it. A failure after that (a
storage failure on one shard) can leave the other shards' cells written;
the answer is then the failure, and the written cells stay (a retry writes
them again under new ids).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from head.access_times import AccessTimes
from head.embedding import Embedder
from head.search_batches import SearchBatches
from head.usage import UsageLedger
from mesh.errors import DimensionMismatch, Forbidden, MemeshError, NotFound, ValidationFailed
from mesh.fusion import fuse, merge
from mesh.identity import Principal, require_writer
from mesh.ids import Clock, IdSource, check_project
from mesh.lexical import query_terms
from mesh.model import DEFAULT_PROJECT, Cell, NewCell, Scene, Session, Vector, default_layer, is_unit, normalize
from mesh.query import NodeFilter, SearchAnswer, SearchRequest, rerank_for_recall
from mesh.seam import Directory
from mesh.shard_absence import ShardAbsence
from mesh.sharding import partition_key
from mesh.storage_cost import stored_bytes
from mesh.tuning import Ranking, RecallTuning, RetrievalTuning

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    max_content_chars: int = 32_768
    max_batch_cells: int = 256
    max_k: int = 1_000
    max_text_chars: int = 8_192
    max_project_chars: int = 128
    max_list: int = 500


@dataclass(frozen=True, slots=True)
class ConsolidationReport:
    scene: Scene
    patterns: list[Cell]
    superseded: list[str]


class MemoryService:
    def __init__(
        self,
        directory: Directory,
        embedder: Embedder,
        ids: IdSource,
        clock: Clock,
        recall_tuning: RecallTuning,
        limits: MemoryLimits,
        usage: UsageLedger,
        retrieval: RetrievalTuning | None = None,
        batch_searches: bool = True,
        fresh: Callable[[], bool] = lambda: False,  # the head's roster lease: what it knows of shards is trusted while true
    ) -> None:
        self._dir = directory
        self._embedder = embedder
        self._ids = ids
        self._clock = clock
        self._recall = recall_tuning
        self._retrieval = retrieval or RetrievalTuning()
        self._limits = limits
        self._usage = usage
        self._scene_home: dict[tuple[str, str], int] = {}  # (tenant, scene) -> shard: a hint, per tenant
        self.access = AccessTimes(self._touch)  # recall's access times, riding on the next search of their shard
        self.searches = SearchBatches(self._search_shard, enabled=batch_searches)  # concurrent searches, coalesced per shard
        self.absence, self.fresh = ShardAbsence(), fresh  # shards known to hold nothing of a tenant, trusted while fresh

    @property
    def limits(self) -> MemoryLimits:
        """The bounds a request is held to (the /v1 document states them too)."""
        return self._limits

    # --------------------------------------------------------------- writing
    async def write_cells(self, principal: Principal, specs: list[NewCell]) -> list[Cell]:
        """Store ``specs`` in order and return them hydrated. All or nothing on validation."""
        async with self._embedder.gate.shared():  # vectors and their engine never straddle a reembed switch
            return await self._write_cells(principal, specs)

    async def _write_cells(self, principal: Principal, specs: list[NewCell]) -> list[Cell]:
        require_writer(principal)
        if not specs:
            raise ValidationFailed("cells must not be empty")
        if len(specs) > self._limits.max_batch_cells:
            raise ValidationFailed(f"at most {self._limits.max_batch_cells} cells per batch")
        projects = [await self._project_of(principal, spec) for spec in specs]
        size = sum(stored_bytes(spec.content, self._embedder.dims) for spec in specs)
        reservation = await self._usage.reserve(principal.tenant_id, cells=len(specs), size=size)
        try:
            written = await self._write(principal, specs, projects)
        except asyncio.CancelledError:  # a timeout or a gone client: the shards' calls run on and may land
            self._usage.settle(reservation)  # so it stays counted (the next reading corrects it)
            raise
        except BaseException:
            self._usage.release(reservation)
            raise
        self._usage.settle(reservation)
        return written

    async def _write(self, principal: Principal, specs: list[NewCell], projects: list[str]) -> list[Cell]:
        vectors = await self._vectors_for(specs, principal.tenant_id)
        now = self._clock()
        cells = []
        for spec, project, vector in zip(specs, projects, vectors, strict=True):
            cells.append(
                Cell(
                    id=self._ids.new(),
                    tenant_id=principal.tenant_id,
                    project_id=project,
                    cell_type=spec.cell_type,
                    content=spec.content,
                    salience=spec.salience,
                    source_agent=principal.agent_id,
                    created_at=now,
                    last_accessed=now,
                    layer=spec.layer or default_layer(spec.cell_type),
                    embedding=vector,
                    engine=self._embedder.name,
                    scene_id=spec.scene_id,
                    session_id=spec.session_id,
                )
            )
        by_shard: dict[int, list[int]] = defaultdict(list)
        for i, cell in enumerate(cells):
            by_shard[self._shard_of(cell.tenant_id, cell.project_id)].append(i)
        spans = len(by_shard) > 1
        if spans:  # every shard says yes (explicit scenes, walk backlog) before any shard writes
            explicit = {shard: [cells[i] for i in idx if cells[i].scene_id] for shard, idx in by_shard.items()}
            await asyncio.gather(
                *(self._dir.scene_shard(shard).check_write(principal.tenant_id, named) for shard, named in explicit.items())
            )
        results = await asyncio.gather(
            *(
                self._dir.scene_shard(shard).write([cells[i] for i in idx], self._ids.many(len(idx)), admitted=spans)
                for shard, idx in by_shard.items()
            )
        )
        stored: list[Cell | None] = [None] * len(cells)
        for (shard, idx), written in zip(by_shard.items(), results, strict=True):
            for i, cell in zip(idx, written, strict=True):
                stored[i] = cell
                if cell.scene_id:
                    self._remember_scene(cell.tenant_id, cell.scene_id, shard)
        return [c for c in stored if c is not None]

    async def _project_of(self, principal: Principal, spec: NewCell) -> str:
        project = spec.project_id
        if spec.session_id is not None:
            session = await self._session(principal, spec.session_id)
            if not session.open:
                raise ValidationFailed("the session is closed")
            if project is not None and project != session.project_id:
                raise ValidationFailed("project_id differs from the session's project")
            project = session.project_id
        project = project or DEFAULT_PROJECT
        self._check_project(project, new=True)
        if not principal.can_read_project(project):
            raise Forbidden("the project is outside this agent's scope")
        if not spec.content.strip():
            raise ValidationFailed("content must not be blank")
        if len(spec.content) > self._limits.max_content_chars:
            raise ValidationFailed(f"content is longer than {self._limits.max_content_chars} characters")
        if not 0.0 <= spec.salience <= 1.0 or math.isnan(spec.salience):
            raise ValidationFailed("salience must be between 0.0 and 1.0")
        return project

    def _check_project(self, project: str, new: bool = False) -> None:
        check_project(project, self._limits.max_project_chars, new)

    async def _vectors_for(self, specs: list[NewCell], tenant_id: str) -> list[Vector]:
        missing = [i for i, s in enumerate(specs) if s.embedding is None]
        embedded = await self._embedder.embed([specs[i].content for i in missing], tenant_id) if missing else None
        vectors: list[Vector] = []
        cursor = 0
        for spec in specs:
            if spec.embedding is None:
                assert embedded is not None
                vectors.append(embedded[cursor])
                cursor += 1
            else:
                vectors.append(self._client_vector(spec.embedding))
        return vectors

    def _client_vector(self, values: tuple[float, ...] | list[float]) -> Vector:
        if len(values) != self._embedder.dims:
            raise DimensionMismatch(f"embedding has {len(values)} dimensions; this service uses {self._embedder.dims}")
        vector = normalize(np.asarray(values, dtype=np.float64))
        if not is_unit(vector):  # not finite, or zero (also after the float32 conversion)
            raise ValidationFailed("embedding must be finite and non-zero")
        return vector

    # --------------------------------------------------------------- reading
    async def query(
        self,
        principal: Principal,
        text: str | None,
        embedding: list[float] | None,
        k: int,
        flt: NodeFilter,
        ranking: Ranking | None = None,
    ) -> list[Cell]:
        """The ``k`` live cells most relevant to the query, nearest first: chosen by dense similarity fused
        with BM25 (``hybrid``, the default) or by similarity alone (``dense``)."""
        return [cell for cell, _ in await self.query_hits(principal, text, embedding, k, flt, ranking)]

    async def query_hits(
        self,
        principal: Principal,
        text: str | None,
        embedding: list[float] | None,
        k: int,
        flt: NodeFilter,
        ranking: Ranking | None = None,
    ) -> list[tuple[Cell, float]]:
        """``query`` with each cell's cosine similarity, nearest first (ties: the smaller id), as the spec orders
        ``query``; with ``hybrid`` the fusion chooses which ``k`` cells answer (``recall`` keeps its blend's order)."""
        async with self._embedder.gate.shared():
            vector = await self._query_vector(principal, text, embedding, k)
            query_terms = self._lexical_terms(text, ranking)
            if query_terms is None:
                return await self._search(principal, vector, k, flt)
            ranked = await self._candidates(principal, query_terms, vector, self._pool(k), flt)
        return sorted(((cell, sim) for cell, sim, _ in ranked[:k]), key=lambda hit: (-hit[1], hit[0].id))

    async def recall(
        self,
        principal: Principal,
        text: str | None,
        embedding: list[float] | None,
        k: int,
        flt: NodeFilter,
        ranking: Ranking | None = None,
    ) -> list[Cell]:
        """Relevance (as ``query``) blended with salience and recency; touches ``last_accessed`` of what it returns."""
        return [cell for cell, _ in await self.recall_hits(principal, text, embedding, k, flt, ranking)]

    async def recall_hits(
        self,
        principal: Principal,
        text: str | None,
        embedding: list[float] | None,
        k: int,
        flt: NodeFilter,
        ranking: Ranking | None = None,
    ) -> list[tuple[Cell, float]]:
        """``recall`` with each cell's raw cosine similarity to the query, in recall rank order
        (the rank blends salience and recency, so it need not follow the similarity)."""
        async with self._embedder.gate.shared():
            vector = await self._query_vector(principal, text, embedding, k)
            candidates = await self._candidates(principal, self._lexical_terms(text, ranking), vector, self._pool(k), flt)
        now = self._clock()
        similarity = {cell.id: sim for cell, sim, _ in candidates}
        relevance = [(cell, rel) for cell, _, rel in candidates]
        ranked = [cell for cell, _ in rerank_for_recall(relevance, k, now, self._recall)]
        by_shard: dict[int, list[str]] = defaultdict(list)
        for cell in ranked:
            by_shard[self._shard_of(cell.tenant_id, cell.project_id)].append(cell.id)
        for shard, ids in by_shard.items():  # access times are soft state: recall does not wait for them
            self.access.record(shard, ids, now)
        return [(replace(cell, last_accessed=max(cell.last_accessed, now)), similarity[cell.id]) for cell in ranked]

    def _pool(self, k: int) -> int:
        """How many candidates each ranking contributes before fusing or re-ranking: ``candidates_factor``
        times ``k``, at least ``min_candidates``, at most ``max(k, limits.max_k)`` (what one request may
        make a shard send back stays bounded whatever ``k``)."""
        wanted = max(k * self._recall.candidates_factor, self._recall.min_candidates)
        return min(wanted, max(k, self._limits.max_k))

    def _lexical_terms(self, text: str | None, ranking: Ranking | None) -> list[str] | None:
        """The query's BM25 terms when it ranks hybrid and has any; None means dense only."""
        if (ranking or self._retrieval.ranking) is Ranking.DENSE or text is None:
            return None
        return query_terms(text) or None

    async def _candidates(
        self, principal: Principal, query_terms: list[str] | None, vector: Vector, pool: int, flt: NodeFilter
    ) -> list[tuple[Cell, float, float]]:
        """``(cell, cosine, relevance)`` most relevant first: relevance is the cosine for a dense search
        (``query_terms`` None), the fused reciprocal rank (``mesh.fusion``) for a hybrid one."""
        if query_terms is None:
            return [(cell, sim, sim) for cell, sim in await self._search(principal, vector, pool, flt)]
        parts = await self._fan_out(
            SearchRequest(principal.tenant_id, vector, pool, self._scoped(principal, flt), tuple(query_terms), self._retrieval)
        )
        dense = merge([part[0] for part in parts], pool)
        lexical = [(cell, cos) for cell, _, cos in merge([part[1] for part in parts], self._retrieval.lexical_pool(pool))]
        return fuse(dense, lexical, self._retrieval)

    async def _fan_out(self, request: SearchRequest) -> list[SearchAnswer]:
        """The answers of the scene shards that can hold a match, in parallel (coalesced with concurrent
        requests per shard): those owning the filter's projects when it names them (a read scope does), every
        shard otherwise. A project's cells live on its owner only (writes route the same way), so the shards
        left out had nothing to give."""
        projects, everyone = request.flt.project_ids, range(self._dir.spec.scene_shards)
        shards = everyone if projects is None else sorted({self._shard_of(request.tenant_id, p) for p in projects})
        if self.fresh():  # leave out the shards known to hold nothing of the tenant (mesh.shard_absence)
            shards = [i for i in shards if not self.absence.skip(i, request.tenant_id)]
        return await asyncio.gather(*(self.searches.search(i, request) for i in shards))

    async def _search_shard(self, shard: int, requests: list[SearchRequest]) -> list[SearchAnswer | MemeshError]:
        since = self.absence.generation if self.fresh() else None  # learned only on the roster's trust
        answers, absent = await self._dir.scene_shard(shard).search_batch(requests, self.access.take(shard))
        if since is not None:
            self.absence.learned(shard, absent, since)
        return answers

    async def _touch(self, shard: int, ids: list[str], now: datetime) -> None:
        await self._dir.scene_shard(shard).touch(ids, now)

    async def close(self) -> None:
        """Send the access times still waiting (bounded)."""
        await self.access.close()
        await self.searches.close()

    async def _query_vector(self, principal: Principal, text: str | None, embedding: list[float] | None, k: int) -> Vector:
        if k < 1 or k > self._limits.max_k:
            raise ValidationFailed(f"k must be between 1 and {self._limits.max_k}")
        if (text is None) == (embedding is None):
            raise ValidationFailed("give exactly one of text and embedding")
        if embedding is not None:
            return self._client_vector(embedding)
        assert text is not None
        if not text.strip() or len(text) > self._limits.max_text_chars:
            raise ValidationFailed(f"text must be 1 to {self._limits.max_text_chars} characters")
        return await self._embedder.embed_one(text, principal.tenant_id)

    @staticmethod
    def _scoped(principal: Principal, flt: NodeFilter) -> NodeFilter:
        """``flt`` narrowed to the principal's read scope (when it has one)."""
        return flt.within(principal.read_scope)

    async def _search(self, principal: Principal, vector: Vector, k: int, flt: NodeFilter) -> list[tuple[Cell, float]]:
        parts = await self._fan_out(SearchRequest(principal.tenant_id, vector, k, self._scoped(principal, flt)))
        return merge([dense for dense, _ in parts], k)

    # --------------------------------------------------------------- sessions
    async def open_session(self, principal: Principal, project_id: str) -> Session:
        """Sessions scope writes to a project, so opening one needs a write role."""
        require_writer(principal)
        self._check_project(project_id, new=True)
        if not principal.can_read_project(project_id):
            raise Forbidden("the project is outside this agent's scope")
        session = Session(
            id=self._ids.new(),
            tenant_id=principal.tenant_id,
            agent_id=principal.agent_id,
            project_id=project_id,
            opened_at=self._clock(),
        )
        result: Session = await self._dir.registry().open_session(session)
        return result

    async def close_session(self, principal: Principal, session_id: str) -> None:
        """Closing is idempotent; another agent's session is a 404 like a missing one."""
        require_writer(principal)
        await self._session(principal, session_id)
        await self._dir.registry().close_session(session_id, self._clock())

    async def _session(self, principal: Principal, session_id: str) -> Session:
        session: Session = await self._dir.registry().get_session(session_id)
        if session.tenant_id != principal.tenant_id or session.agent_id != principal.agent_id:
            raise NotFound("session not found")
        return session

    # ----------------------------------------------------------------- scenes
    async def get_scene(self, principal: Principal, scene_id: str) -> Scene:
        _, scene = await self._find_scene(principal, scene_id)
        return scene

    async def list_scenes(
        self, principal: Principal, project_id: str | None, after: str | None, limit: int
    ) -> tuple[list[Scene], bool]:
        """One keyset page of scenes (id order) and whether more follow."""
        if not 1 <= limit <= self._limits.max_list:
            raise ValidationFailed(f"limit must be between 1 and {self._limits.max_list}")
        if project_id is not None:
            self._check_project(project_id)
            if not principal.can_read_project(project_id):
                return [], False
        parts = await asyncio.gather(
            *(
                self._dir.scene_shard(i).list_scenes(
                    principal.tenant_id, project_id, after, limit + 1, principal.read_scope or None
                )
                for i in range(self._dir.spec.scene_shards)
            )
        )
        scenes = sorted((s for part in parts for s in part), key=lambda s: s.id)
        return scenes[:limit], len(scenes) > limit

    async def consolidate(self, principal: Principal, scene_id: str) -> ConsolidationReport:
        require_writer(principal)
        shard, _ = await self._find_scene(principal, scene_id)
        async with self._embedder.gate.shared():  # a Pattern's vector is made of its members': never across a switch
            scene, patterns, superseded = await self._dir.scene_shard(shard).consolidate(
                principal.tenant_id, scene_id, principal.agent_id, self._clock()
            )
        return ConsolidationReport(scene=scene, patterns=patterns, superseded=[c.id for c in superseded])

    def _remember_scene(self, tenant_id: str, scene_id: str, shard: int) -> None:
        if len(self._scene_home) > 100_000:
            self._scene_home.clear()  # a hint cache: losing it costs one fan-out
        self._scene_home[(tenant_id, scene_id)] = shard

    async def _find_scene(self, principal: Principal, scene_id: str) -> tuple[int, Scene]:
        """The shard and scene of ``scene_id`` in the caller's tenant and read scope; NotFound otherwise.
        The hint is kept per tenant, so another tenant's scene id costs the same fan-out as a missing one."""
        home = self._scene_home.get((principal.tenant_id, scene_id))
        candidates = [home] if home is not None else list(range(self._dir.spec.scene_shards))
        for shard in candidates:
            try:
                scene: Scene = await self._dir.scene_shard(shard).get_scene(principal.tenant_id, scene_id)
            except NotFound:
                continue
            self._remember_scene(principal.tenant_id, scene_id, shard)
            if not principal.can_read_project(scene.project_id):
                break
            return shard, scene
        raise NotFound("scene not found")

    def forget_scene_homes(self) -> None:
        """Drop the scene -> shard hints (the partitions moved)."""
        self._scene_home.clear()

    def _shard_of(self, tenant_id: str, project_id: str) -> int:
        return self._dir.spec.owner("scene_shard", partition_key(tenant_id, project_id))

"""Reembed: recompute every stored vector with the configured engine, then switch at once.

Guarantees:
- At most one job runs per deployment, whichever head starts it, and never
  during an online resize (the AuditLog's maintenance slot); a second start
  while one is ``running`` is a Conflict (409).
- The engine is the one the ``embedding`` settings name; the request has no body.
- While it runs, recall, query and writes keep answering with the current
  engine and vectors: new vectors are *staged* beside the live ones. At the
  end, with writes and reads held back for a moment (``Embedder.gate``), cells
  written meanwhile are staged too, every owner switches to its staged vectors
  (scene centroids and agent nodes recomputed), and the serving engine changes.
  So a query never mixes engines.
- Jobs are held in memory (spec section 3): a restart loses the record. A
  failure before the switch leaves the corpus as it was; the job is ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime

from head.audit import record
from head.embedding import Embedder, EmbeddingEngine
from mesh.audit import AuditKind
from mesh.errors import Conflict, Forbidden, MemeshError, NotFound
from mesh.identity import Principal, require_admin
from mesh.ids import Clock, IdSource
from mesh.model import merge_writer_sums
from mesh.seam import Directory, Reembedding, beacon_sets, scene_shards

log = logging.getLogger(__name__)
PAGE = 256
KEEP_JOBS = 100
SLOT_LEASE_S = 120.0  # the maintenance slot, renewed with every page


@dataclass(frozen=True, slots=True)
class ReembedJob:
    job_id: str
    status: str  # running | succeeded | failed
    nodes_processed: int
    nodes_total: int
    engine: str
    started_at: datetime
    finished_at: datetime | None = None


class ReembedRunner:
    def __init__(
        self,
        directory: Directory,
        embedder: Embedder,
        target: Callable[[], EmbeddingEngine],
        ids: IdSource,
        clock: Clock,
        on_switch: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """``target`` makes the configured engine (called once per job); ``on_switch`` records the new
        corpus engine durably (the deployment manifest)."""
        self._dir = directory
        self._embedder = embedder
        self._target = target
        self._ids = ids
        self._clock = clock
        self._on_switch = on_switch
        self._jobs: dict[str, ReembedJob] = {}
        self._running: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    async def start(self, actor: Principal) -> ReembedJob:
        require_admin(actor)
        if not actor.is_service_admin:
            await record(self._dir, actor, AuditKind.AUTHZ_DENIED, "reembed", "denied", {"action": "reembed"})
            raise Forbidden("only a ServiceAdmin starts a reembed")
        async with self._starting:  # a concurrent second start waits here, then finds the job running
            if self._running is not None and not self._running.done():
                raise Conflict("a reembed is already running")
            engine = self._target()
            job = ReembedJob(self._ids.new(), "running", 0, 0, engine.name, self._clock())
            # One reembed or online resize in the deployment at a time, whichever head starts it (409 otherwise).
            await self._dir.audit_log().begin_exclusive("reembed", job.job_id, SLOT_LEASE_S)
            # The row first: a job whose start could not be audited never runs.
            await record(self._dir, actor, AuditKind.REEMBED_STARTED, job.job_id, "ok", {"engine": engine.name})
            self._jobs[job.job_id] = job
            while len(self._jobs) > KEEP_JOBS:
                del self._jobs[next(iter(self._jobs))]
            self._running = asyncio.get_running_loop().create_task(self._run(job.job_id, engine, actor))
            return job

    def job(self, actor: Principal, job_id: str) -> ReembedJob:
        """A job's state, for a ServiceAdmin: a job spans every tenant, so to anyone else it is absent (404)."""
        require_admin(actor)
        job = self._jobs.get(job_id) if actor.is_service_admin else None
        if job is None:
            raise NotFound("job not found")
        return job

    async def wait(self, timeout_s: float) -> None:
        """Until the running job (if any) ends; for tests and orderly shutdown."""
        if self._running is not None:
            await asyncio.wait({self._running}, timeout=timeout_s)

    def _owners(self) -> list[Reembedding]:
        return [*scene_shards(self._dir), *beacon_sets(self._dir)]

    def _update(self, job_id: str, **changes: object) -> None:
        self._jobs[job_id] = replace(self._jobs[job_id], **changes)  # type: ignore[arg-type]

    async def _run(self, job_id: str, engine: EmbeddingEngine, actor: Principal) -> None:
        try:
            async with self._dir.gate.operation():  # every page of the job sees one partition layout
                await self._run_job(job_id, engine, actor)
        finally:
            with contextlib.suppress(MemeshError):
                await self._dir.audit_log().end_exclusive(job_id)

    async def _run_job(self, job_id: str, engine: EmbeddingEngine, actor: Principal) -> None:
        same = engine.name == self._embedder.name
        embedder = self._embedder if same else Embedder(engine)
        owners = self._owners()
        try:
            total = sum(await asyncio.gather(*(o.reembed_count() for o in owners)))
            self._update(job_id, nodes_total=total)
            for owner in owners:
                await self._stage_all(job_id, owner, embedder)
            async with self._embedder.gate.exclusive():
                for owner in owners:  # what was written while the job ran
                    await self._stage_all(job_id, owner, embedder)
                await self._switch(engine)
            status = "succeeded"
        except (MemeshError, OSError, RuntimeError, ValueError):
            log.exception("reembed %s failed", job_id)
            status = "failed"
            await asyncio.gather(*(o.discard_staged() for o in owners), return_exceptions=True)
        finally:
            if not same:
                embedder.close()
        self._update(job_id, status=status, finished_at=self._clock())
        try:
            await record(self._dir, actor, AuditKind.REEMBED_FINISHED, job_id, "ok" if status == "succeeded" else "failed", {})
        except MemeshError:
            log.error("the audit row of reembed %s could not be written", job_id)

    async def _stage_all(self, job_id: str, owner: Reembedding, embedder: Embedder) -> None:
        after: str | None = None
        while True:
            page: list[tuple[str, str]] = await owner.reembed_page(after, PAGE)
            if not page:
                return
            vectors = await embedder.embed_background([text for _, text in page])  # live queries go first
            await owner.stage([(node_id, vectors[i]) for i, (node_id, _) in enumerate(page)])
            await self._dir.audit_log().begin_exclusive("reembed", job_id, SLOT_LEASE_S)  # renew the slot
            job = self._jobs[job_id]
            self._update(
                job_id,
                nodes_processed=job.nodes_processed + len(page),
                nodes_total=max(job.nodes_total, job.nodes_processed + len(page)),
            )
            after = page[-1][0]

    async def _switch(self, engine: EmbeddingEngine) -> None:
        """Two phases over every owner: persist the new vectors everywhere, then switch memory
        everywhere. A failure in the first phase rewrites the old vectors everywhere (the corpus
        stays on one engine) and fails the job."""
        shards, sets = scene_shards(self._dir), beacon_sets(self._dir)
        try:
            writers = merge_writer_sums(await asyncio.gather(*(shard.persist_staged(engine.name) for shard in shards)))
            await asyncio.gather(*(beacons.persist_staged(engine.name, writers) for beacons in sets))
        except BaseException:
            owners: list[Reembedding] = [*shards, *sets]
            await asyncio.gather(*(owner.revert_staged() for owner in owners), return_exceptions=True)
            raise
        await asyncio.gather(
            *(shard.apply_staged(engine.name) for shard in shards),
            *(beacons.apply_staged(engine.name, writers) for beacons in sets),
        )
        if engine.name != self._embedder.name:
            self._embedder.swap(engine)
        if self._on_switch is not None:
            await self._on_switch(engine.name)

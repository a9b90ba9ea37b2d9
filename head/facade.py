"""The facade every transport calls: one object, the whole application core.

REST, the WebSocket inbox stream, gRPC (and later MCP and A2A) all do the same
three things: :meth:`Memesh.admit` (the one "authenticate and charge": a key and
the caller's address in, a principal charged to a rate-limit bucket out), one
use case on ``memesh.memory``, ``memesh.inbox`` or ``memesh.identity``, and
encoding the answer. Nothing in a transport decides authority, tenancy or
limits. ``admit`` is :meth:`Memesh.principal` then :meth:`Memesh.charge`; the
two halves are public for the one shape that must split them: an HTTP gate
that authenticates before any body check, and a route that charges once it
knows the operation and its cost (``api.admission``).

Refused credentials are charged too: each client address has an
``AuthFailures`` bucket, and once it is empty that address gets 429 before its
keys are even looked up, so guessing keys costs the guesser, not the registry.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from head.cell_service import CellService
from head.clock import system_ids, utc_now
from head.data_service import DataService
from head.descriptor_service import DescriptorService
from head.embedding import Embedder, EmbeddingEngine
from head.erasure_signing import ErasureSigner
from head.identity_service import IdentityService
from head.inbox_service import InboxLimits, InboxService
from head.memory_service import MemoryLimits, MemoryService
from head.observatory_hub import ObservatoryHub, ObservatoryHubConfig
from head.partition_resizer import PartitionResizer
from head.reembed import ReembedRunner
from head.request_log import RequestLog
from head.role_gate import RoleGate
from head.roster_link import RosterLink
from head.usage import Quotas, UsageLedger
from mesh.errors import MemeshError, RateLimited, Unauthorized, Unavailable, ValidationFailed
from mesh.histogram import LATENCY_S, Histogram
from mesh.identity import Principal
from mesh.ids import Clock
from mesh.layout import Layout, Settled
from mesh.ratelimit import BucketPolicy, TokenBuckets
from mesh.roster import EVERYTHING
from mesh.seam import Directory, actor_kinds, every_actor
from mesh.tuning import RecallTuning, RetrievalTuning

NODES_PER_READ_TOKEN = 100  # a read asking for more nodes than this costs a Read token per this many


class Bucket(StrEnum):
    """Rate-limit classes; each caller has one bucket per class."""

    READ = "Read"
    WRITE = "Write"
    INBOX = "Inbox"
    ADMIN = "Admin"
    AUTH_FAILURES = "AuthFailures"  # per client address, charged by refused credentials


class Memesh:
    def __init__(
        self,
        directory: Directory,
        embedder: Embedder,
        rate_policies: dict[str, BucketPolicy],
        recall_tuning: RecallTuning = RecallTuning(),
        retrieval_tuning: RetrievalTuning = RetrievalTuning(),
        batch_searches: bool = True,
        limits: MemoryLimits = MemoryLimits(),
        principal_cache_ttl_s: float = 30.0,
        inbox_limits: InboxLimits = InboxLimits(),
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        signer: ErasureSigner | None = None,
        reembed_target: Callable[[], EmbeddingEngine] | None = None,
        observatory: ObservatoryHubConfig = ObservatoryHubConfig(),
        quotas: Quotas = Quotas(),
        bootstrap_subject: str | None = None,
        health_cache_s: float = 1.0,
        heads_lease_s: float = 3.0,
        heads_poll_s: float = 1.0,
    ) -> None:
        """``signer`` signs erasure certificates; ``reembed_target`` makes the configured engine a
        reembed moves the corpus to (default: the serving engine, re-run in place)."""
        self.directory = directory
        self.embedder = embedder
        self._max_batch_cells = limits.max_batch_cells
        self._max_nodes = max(limits.max_k, limits.max_list)  # the most nodes any one read may ask for
        # the partition layout in force and the moves this head's start made (set by cluster.compose)
        self.partitions = Settled(Layout({}))
        ids = system_ids(clock)
        self.usage = UsageLedger(directory, quotas, monotonic)
        self.heads = RosterLink(
            directory.head_roster, self._roster_changed, heads_lease_s, heads_poll_s, monotonic, self._roster_rejoined
        )
        self.memory = MemoryService(  # what it knows of shards is trusted on the same lease as principals
            directory, embedder, ids, clock, recall_tuning, limits, self.usage, retrieval_tuning, batch_searches, self.heads.fresh
        )
        self.cells = CellService(directory, embedder.gate, limits.max_list, self.memory.access)
        self.identity = IdentityService(directory, ids, clock, principal_cache_ttl_s, monotonic, bootstrap_subject)
        self.resizer = PartitionResizer(directory, self.heads.publish, None, embedder.dims)
        self.resizer.followers.append(self._partitions_moved)
        self.identity.fence = self.heads
        self.role_gate = RoleGate(directory, monotonic)
        self.inbox = InboxService(directory, embedder, ids, clock, inbox_limits, self.usage)
        self.observatory = ObservatoryHub(directory, observatory)
        self.data = DataService(directory, ids, clock, signer, embedder.gate)
        self.descriptors = DescriptorService(directory, clock)
        self.reembed = ReembedRunner(
            directory, embedder, reembed_target or (lambda: embedder.engine), ids, clock, self._record_corpus_engine
        )
        self._buckets = TokenBuckets(rate_policies)
        self._monotonic = monotonic
        self._health_cache_s = health_cache_s
        self._health: tuple[float, dict[str, Any]] | None = None
        self._health_check: asyncio.Task[dict[str, Any]] | None = None
        self._pids: list[int] = []
        self.restarts: collections.Counter[str] = collections.Counter()  # actor restarts this head saw, by kind
        self.requests = RequestLog()

    async def _roster_changed(self, changes: list[str]) -> None:
        """Another head's change: a scene shard's presence (``mesh.shard_absence``), partitions on the move
        (``head.partition_resizer``), or credentials."""
        agents = await self.resizer.on_roster(self.memory.absence.apply(changes))
        if agents:
            self.identity.changed_elsewhere(agents)

    def _roster_rejoined(self) -> None:
        """Back on the roster after a lapse of the lease (or joined): what was cached on trust may be stale."""
        self.memory.absence.forget()
        self.identity.changed_elsewhere([EVERYTHING])

    def _partitions_moved(self, settled: Settled) -> None:
        self.partitions = settled
        self.memory.forget_scene_homes()
        self.memory.absence.forget()

    async def _record_corpus_engine(self, engine: str) -> None:
        await self.directory.registry().set_corpus_engine(engine)

    async def principal(self, key: str | None, client: str | None = None) -> Principal:
        """The principal of ``key`` (Unauthorized when none). A refused key charges ``client``'s
        ``AuthFailures`` bucket; an address whose bucket is empty is RateLimited before any lookup of
        a key this head has not seen authenticate (``IdentityService.vouched``: a key in use is never
        refused for its neighbours' guessing, also once its cache entry expired)."""
        if not self.heads.started:
            await self.join_heads(2.0)  # once: the cache is trusted only after the roster first answered
        known = self.identity.cached(key)
        if known is not None:
            return known
        address = client or "unknown"
        if not self.identity.vouched(key):
            self._buckets.require(Bucket.AUTH_FAILURES.value, address, self._monotonic(), self._share)
        try:
            return await self.identity.authenticate(key)
        except Unauthorized:
            with contextlib.suppress(RateLimited):  # a vouched key refused at a spent address: still a 401
                self._buckets.charge(Bucket.AUTH_FAILURES.value, address, self._monotonic(), share=self._share)
            raise

    async def admit(self, key: str | None, bucket: Bucket, client: str | None = None, cost: float = 1.0) -> Principal:
        """The one authenticate-and-charge of every transport: the principal of ``key``, charged ``cost``
        tokens of ``bucket``. Raises Unauthorized (no valid key; ``client``'s ``AuthFailures`` bucket is
        charged) or RateLimited (that bucket, or ``bucket``, is empty; with Retry-After). What the
        principal may do (Forbidden) is the use case's to say, or an admin surface's role gate."""
        principal = await self.principal(key, client)
        self.charge(principal, bucket, cost)
        return principal

    def charge(self, principal: Principal, bucket: Bucket, cost: float = 1.0) -> None:
        """Take ``cost`` tokens of ``bucket`` from the caller, or raise RateLimited with Retry-After."""
        self._buckets.charge(bucket.value, principal.agent_id, self._monotonic(), cost, self._share)

    def charge_batch(self, principal: Principal, cells: int) -> None:
        """A batch's Write tokens, one per cell, once its size is one this service writes: past
        ``limits.max_batch_cells`` it is ValidationFailed before any charge (a 429 no retry could end)."""
        if cells > self._max_batch_cells:
            raise ValidationFailed(f"at most {self._max_batch_cells} cells per batch")
        self.charge(principal, Bucket.WRITE, max(1, cells))

    def charge_read(self, principal: Principal, nodes: int, charged: float = 0.0) -> None:
        """The Read tokens of a read that asks for up to ``nodes`` nodes (``k``, a page's ``limit``): one per
        ``NODES_PER_READ_TOKEN``, at least one, less the ``charged`` its admission took. A recall of 1,000 nodes
        costs about ten of 10 in CPU (rendering them), so one key cannot take the cores of every tenant by
        asking for the most at the read rate. ``nodes`` past the most a read may ask costs as that most (the
        use case refuses it), so no cost is one a retry could never pay."""
        cost = max(1.0, min(nodes, self._max_nodes) / NODES_PER_READ_TOKEN) - charged
        if cost > 0:
            self.charge(principal, Bucket.READ, cost)

    def charge_address(self, address: str, bucket: Bucket) -> None:
        """Charge an unauthenticated caller by its address (a console login not yet made)."""
        self._buckets.charge(bucket.value, f"address:{address}", self._monotonic(), share=self._share)

    async def health(self, timeout_s: float = 5.0, cached: bool = False) -> dict[str, Any]:
        """Each actor's own figures; Unavailable when one does not answer in time. With ``cached`` (what the
        unauthenticated ``/healthz`` and ``/metrics`` use) the answer may be up to ``health_cache_s`` old and
        concurrent callers share one actor round, so those routes cannot multiply actor calls."""
        now = self._monotonic()
        if cached and self._health is not None and now - self._health[0] < self._health_cache_s:
            return self._health[1]
        if self._health_check is None or self._health_check.done():
            self._health_check = asyncio.get_running_loop().create_task(self._check_health(timeout_s))
        answer = await asyncio.shield(self._health_check)
        self._health = (self._monotonic(), answer)
        return answer

    async def _check_health(self, timeout_s: float) -> dict[str, Any]:
        spec = self.directory.spec
        try:
            async with asyncio.timeout(timeout_s):
                answers = await asyncio.gather(*(actor.health() for actor in every_actor(self.directory)))
        except (TimeoutError, MemeshError) as exc:
            raise Unavailable("an actor did not answer") from exc
        self._count_restarts(answers)
        shards = answers[: spec.scene_shards]
        beacons = answers[spec.scene_shards : spec.scene_shards + spec.beacon_sets]
        registry_at = spec.scene_shards + spec.beacon_sets + spec.inbox_shards
        inboxes = answers[spec.scene_shards + spec.beacon_sets : registry_at]
        walkers = answers[len(answers) - spec.walkers :] if spec.walkers else []
        return {
            "cells": sum(s["cells"] for s in shards),
            "scenes": sum(s["scenes"] for s in shards),
            "walk_backlog": sum(s.get("walk_backlog", 0) for s in shards),
            "journal_pending": sum(s.get("journal_pending", 0) for s in shards),
            "delivery_journal_pending": sum(i.get("journal_pending", 0) for i in inboxes),
            "walks": sum(w.get("walks", 0) for w in walkers),
            "walk_messages": sum(w.get("walk_messages", 0) for w in walkers),
            "scene_searches_kept": sum(s.get("scene_searches_kept", 0) for s in shards),
            "scene_searches_run": sum(s.get("scene_searches_run", 0) for s in shards),
            "wave_read_pauses": sum(s.get("wave_read_pauses", 0) for s in shards),
            "beacons": sum(b["beacons"] for b in beacons),
            "inboxes": sum(i["inboxes"] for i in inboxes),
            "deliveries": sum(i.get("deliveries", 0) for i in inboxes),
            "deliveries_dropped_acked": sum(i.get("dropped_acked", 0) for i in inboxes),
            "deliveries_dropped_unacked": sum(i.get("dropped_unacked", 0) for i in inboxes),
            "unacked": sum(i.get("unacked", 0) for i in inboxes),
            "unacked_max": max((i.get("unacked_max", 0) for i in inboxes), default=0),
            "since_start": {  # counted since the actors started: a restart resets them
                "delivered": sum(i.get("delivered", 0) for i in inboxes),
                **_merged(answers, "commit", LATENCY_S).fields("commit"),
            },
            "agents": answers[registry_at]["agents"],
            "sessions": answers[registry_at].get("sessions", 0),
            "skipped_rows": sum(a.get("skipped_rows", 0) for a in answers),
            "actors": len(answers),
            "heads": self.heads.heads,  # live heads, as the roster last told this one
            "embedding_engine": self.embedder.name,
        }

    def _count_restarts(self, answers: list[dict[str, int]]) -> None:
        """An actor answering from another process than last time was restarted (by Ray, after a crash)."""
        pids = [a.get("pid", 0) for a in answers]
        if len(pids) == len(self._pids):
            for kind, before, now in zip(actor_kinds(self.directory), self._pids, pids, strict=True):
                if before != now:
                    self.restarts[kind] += 1
        self._pids = pids

    @property
    def _share(self) -> float:
        """This head's share of every rate limit: the live heads split each limit evenly (docs/scaling.md)."""
        return 1.0 / self.heads.heads

    async def join_heads(self, timeout_s: float = 10.0) -> int:
        """Start polling the head roster and wait for its first answer (at most ``timeout_s``: the head
        then serves fenced, without its principal cache, until the roster answers); the live heads."""
        self.heads.start()
        await self.heads.joined(timeout_s)
        return self.heads.heads

    async def close(self, owner: bool = True) -> None:
        """Stop this head; the last head of the deployment (or the ``owner`` of the Ray the actors run
        on) also drains and stops the actors."""
        others = await self.heads.close()
        await self.observatory.close()
        await self.reembed.wait(60.0)
        await self.data.wait_idle(60.0)
        await self.memory.close()
        await self.role_gate.close()
        self.embedder.close()
        await self.directory.close(last=owner or others == 0)


def _merged(answers: list[dict[str, int]], prefix: str, bounds: tuple[float, ...]) -> Histogram:
    """The actors' histograms named ``prefix``, added up."""
    total = Histogram(bounds)
    for answer in answers:
        total.add(Histogram.of_fields(bounds, prefix, answer))
    return total

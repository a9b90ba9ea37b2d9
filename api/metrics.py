"""``GET /metrics``: Prometheus text exposition of the observatory's and the service's figures.

Observatory names follow the spec's OpenTelemetry names in Prometheus form
(dots become underscores, counters end in ``_total`` once, the up-down
counter is a gauge):

- ``service_observatory_events_recorded_total`` (counter)
- ``service_observatory_events_dropped_total{reason}`` (counter):
  ``reason="lagged"`` events a stream's bounded queue dropped because its
  consumer fell behind (plus any the hub could not read before eviction);
  ``reason="saturated"`` events the walks dropped because their recording
  channel to the Observatory was full
- ``service_observatory_buffer_depth`` (gauge)
- ``service_observatory_streams_active`` (gauge)
- ``service_observatory_replay_events_total`` (counter)

The service's own (docs/operations.md, "Retention, quotas and their metrics"):

- ``memesh_cells``, ``memesh_beacons``, ``memesh_sessions``,
  ``memesh_inbox_deliveries`` (gauges): what the actors hold
- ``memesh_inbox_deliveries_dropped_total{acknowledged}`` (counter): deliveries
  retention removed since the actors started (``acknowledged="false"``: an
  inbox over its cap lost deliveries its agent never acknowledged)
- ``memesh_quota_refusals_total{quota}`` (counter): writes refused by a
  tenant quota (``cells``, ``beacons``, ``bytes``) on this head
- ``memesh_walk_backlog`` (gauge): written cells whose walk has not run yet
- ``memesh_write_journal_pending`` (gauge): acknowledged writes journaled, not yet committed to their table
- ``memesh_delivery_journal_pending`` (gauge): batches of deliveries journaled (visible to their agents), not yet
  committed to their table
- ``memesh_walks_total``, ``memesh_walk_messages_total`` (counters): walks decided and the actor calls
  their waves made, since the walkers started (their ratio: messages per walk)
- ``memesh_walk_scene_searches_total{answer}`` (counter): the waves' searches of scene centroids, answered
  without a search (``kept``: an answer kept since the tenant's scenes last changed, or a repeat within the
  wave) or run (``run``): ``mesh.nearest_cache``
- ``memesh_walk_read_pauses_total`` (counter): pauses the scene shards' waves took because searches were
  recent (``propagation.read_yield_s``: walks yield to reads)
- ``memesh_embedding_queue_texts`` (gauge) and
  ``memesh_embedding_requests_dropped_total`` (counter): texts waiting for
  the model, and requests dropped unencoded because their caller gave up
- ``memesh_inbox_streams_open`` (gauge): open ``/v1/inbox`` streams on this head
- ``memesh_storage_rows_skipped`` (gauge): stored rows the actors' last load
  could not decode (anything but 0 deserves a look at the logs)
- ``memesh_requests_total{surface,route,status}`` (counter) and
  ``memesh_request_duration_seconds{surface,route}`` (histogram): requests this
  head answered over REST, MCP, A2A, the console and gRPC (``head.request_log``)
- ``memesh_embedding_batch_texts`` (histogram): texts per encode call
- ``memesh_deliveries_total`` (counter), ``memesh_inbox_unacked`` and
  ``memesh_inbox_unacked_max`` (gauges): deliveries made, and how far agents
  lag behind them
- ``memesh_storage_commit_seconds`` (histogram): the partition actors' storage
  commits since they started
- ``memesh_actor_restarts_total{kind}`` (counter): actors this head saw come
  back in a new process

The actor figures are fetched (bounded by a short timeout; on failure the last
ones are reported, and at most once per ``server.health_cache_s``) before
rendering, so ``collect`` never calls an actor. Each app has its own
:class:`CollectorRegistry`, never the process-global one. The route carries
aggregate counts only, no tenant id; with ``server.metrics_token`` set it
needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from api.errors import error_response
from head.facade import Memesh
from head.observatory_hub import ObservatoryHub
from mesh.errors import ErrorCode, MemeshError
from mesh.histogram import LATENCY_S, Histogram
from mesh.layout import Settled
from mesh.seam import actor_kinds

METRICS_PATH = "/metrics"
REFRESH_TIMEOUT_S = 1.0


class ObservatoryCollector(Collector):
    """The hub's figures as they stand; reads memory only."""

    def __init__(self, hub: ObservatoryHub) -> None:
        self._hub = hub

    def collect(self) -> Iterator[Metric]:
        f = self._hub.figures()
        yield CounterMetricFamily("service_observatory_events_recorded", "Hop events the observatory recorded.", value=f.recorded)
        dropped = CounterMetricFamily(
            "service_observatory_events_dropped",
            "Hop events dropped: lagged (a stream's queue overflowed), saturated (the recording channel was full).",
            labels=["reason"],
        )
        dropped.add_metric(["lagged"], f.lagged)
        dropped.add_metric(["saturated"], f.saturated)
        yield dropped
        yield GaugeMetricFamily("service_observatory_buffer_depth", "Hop events in the ring buffer.", value=f.depth)
        yield GaugeMetricFamily("service_observatory_streams_active", "Open observatory streams.", value=f.streams_active)
        yield CounterMetricFamily("service_observatory_replay_events", "Hop events sent by stream replays.", value=f.replayed)

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class ServiceCollector(Collector):
    """The actors' figures as last fetched, and this head's own counters."""

    def __init__(self, memesh: Memesh) -> None:
        self._memesh = memesh
        self.health: dict[str, Any] = {}

    def collect(self) -> Iterator[Metric]:
        h, memesh = self.health, self._memesh
        for name, key, help_text in (
            ("memesh_cells", "cells", "Cells held (live or not)."),
            ("memesh_beacons", "beacons", "Beacons held."),
            ("memesh_sessions", "sessions", "Sessions held (open, and closed ones not yet purged)."),
            ("memesh_inbox_deliveries", "deliveries", "Deliveries held in inboxes."),
            ("memesh_walk_backlog", "walk_backlog", "Written cells whose walk has not run yet."),
            ("memesh_write_journal_pending", "journal_pending", "Acknowledged writes journaled, not yet in their table."),
            (
                "memesh_delivery_journal_pending",
                "delivery_journal_pending",
                "Batches of deliveries journaled (visible to their agents), not yet in their table.",
            ),
            ("memesh_storage_rows_skipped", "skipped_rows", "Stored rows the actors' last load could not decode."),
        ):
            yield GaugeMetricFamily(name, help_text, value=float(h.get(key, 0)))
        for name, key, help_text in (
            ("memesh_walks", "walks", "Walks decided since the walkers started."),
            ("memesh_walk_messages", "walk_messages", "Actor calls their waves made (owner-addressed: owners only)."),
            ("memesh_walk_read_pauses", "wave_read_pauses", "Pauses waves took to yield to recent searches."),
        ):
            yield CounterMetricFamily(name, help_text, value=float(h.get(key, 0)))
        searches = CounterMetricFamily(
            "memesh_walk_scene_searches",
            "A wave's searches of scene centroids: answered without a search (kept, or a repeat in the wave), or run.",
            labels=["answer"],
        )
        searches.add_metric(["kept"], float(h.get("scene_searches_kept", 0)))
        searches.add_metric(["run"], float(h.get("scene_searches_run", 0)))
        yield searches
        dropped = CounterMetricFamily(
            "memesh_inbox_deliveries_dropped", "Deliveries removed by retention.", labels=["acknowledged"]
        )
        dropped.add_metric(["true"], float(h.get("deliveries_dropped_acked", 0)))
        dropped.add_metric(["false"], float(h.get("deliveries_dropped_unacked", 0)))
        yield dropped
        refusals = CounterMetricFamily(
            "memesh_quota_refusals", "Writes refused by a quota (cells, beacons, bytes).", labels=["quota"]
        )
        for quota in ("cells", "beacons", "bytes"):
            refusals.add_metric([quota], float(memesh.usage.refusals[quota]))
        yield refusals
        yield GaugeMetricFamily("memesh_embedding_queue_texts", "Texts waiting for the model.", value=memesh.embedder.queued)
        yield CounterMetricFamily(
            "memesh_embedding_requests_dropped",
            "Embedding requests dropped unencoded: their caller stopped waiting.",
            value=memesh.embedder.dropped,
        )
        yield GaugeMetricFamily(
            "memesh_inbox_streams_open", "Open /v1/inbox streams on this head.", value=memesh.inbox.open_streams
        )
        yield from partition_metrics(memesh.partitions)
        yield from request_metrics(memesh)
        yield from flow_metrics(h, memesh)

    def describe(self) -> Iterator[Metric]:
        return iter(())


def partition_metrics(settled: Settled) -> Iterator[Metric]:
    """The partition layout in force, and what the resize at this head's start moved (``actors.resize``)."""
    kinds = ["kind"]
    count = GaugeMetricFamily("memesh_partitions", "Actors of each partitioned kind.", labels=kinds)
    generation = GaugeMetricFamily("memesh_partition_generation", "Resizes each kind has had.", labels=kinds)
    rows = GaugeMetricFamily("memesh_partition_moved_rows", "Rows the resize at this head's start moved.", labels=kinds)
    seconds = GaugeMetricFamily("memesh_partition_move_seconds", "How long the resize at this head's start took.", labels=kinds)
    partitions = GaugeMetricFamily(
        "memesh_partitions_moved", "Virtual partitions the resize at this head's start gave a new owner.", labels=kinds
    )
    moves = {move.kind: move for move in settled.moves}
    for kind, n in sorted(settled.layout.counts.items()):
        count.add_metric([kind], float(n))
        generation.add_metric([kind], float(settled.layout.generation(kind)))
        rows.add_metric([kind], float(moves[kind].rows if kind in moves else 0))
        seconds.add_metric([kind], moves[kind].seconds if kind in moves else 0.0)
        partitions.add_metric([kind], float(moves[kind].partitions if kind in moves else 0))
    yield from (count, generation, rows, seconds, partitions)


def request_metrics(memesh: Memesh) -> Iterator[Metric]:
    """Requests this head answered, by surface, route and status, and their latency (``head.request_log``)."""
    log = memesh.requests
    counts = CounterMetricFamily(
        "memesh_requests", "Requests answered, by surface, route and status.", labels=["surface", "route", "status"]
    )
    for (surface, route, status), n in sorted(log.counts.items()):
        counts.add_metric([surface, route, status], float(n))
    yield counts
    latency = HistogramMetricFamily(
        "memesh_request_duration_seconds", "Time to answer a request, by surface and route.", labels=["surface", "route"]
    )
    for (surface, route), timing in sorted(log.latency.items()):
        latency.add_metric([surface, route], timing.buckets(), timing.total)
    yield latency


def flow_metrics(h: dict[str, Any], memesh: Memesh) -> Iterator[Metric]:
    """Embedding batches, deliveries, inbox lag, storage commits and actor restarts."""
    batches = memesh.embedder.batch_sizes
    sizes = HistogramMetricFamily("memesh_embedding_batch_texts", "Texts per encode call of this head's embedder.")
    sizes.add_metric([], batches.buckets(), batches.total)
    yield sizes
    since = h.get("since_start", {})
    delivered = float(since.get("delivered", 0))
    yield CounterMetricFamily("memesh_deliveries", "Deliveries committed since the inbox shards started.", value=delivered)
    unacked = float(h.get("unacked", 0))
    yield GaugeMetricFamily("memesh_inbox_unacked", "Deliveries above their agent's acknowledged cursor.", value=unacked)
    yield GaugeMetricFamily(
        "memesh_inbox_unacked_max", "The most unacknowledged deliveries one agent has.", value=float(h.get("unacked_max", 0))
    )
    commits = Histogram.of_fields(LATENCY_S, "commit", since)
    commit = HistogramMetricFamily(
        "memesh_storage_commit_seconds", "Storage commits of the partition actors (since they started), by duration."
    )
    commit.add_metric([], commits.buckets(), commits.total)
    yield commit
    restarts = CounterMetricFamily(
        "memesh_actor_restarts", "Actor restarts this head saw (a new process between two health rounds).", labels=["kind"]
    )
    for kind in sorted(set(actor_kinds(memesh.directory))):
        restarts.add_metric([kind], float(memesh.restarts[kind]))
    yield restarts


def metrics_registry(memesh: Memesh) -> tuple[CollectorRegistry, ServiceCollector]:
    """A registry of this app's own (tests build several apps in one process)."""
    registry = CollectorRegistry()
    registry.register(ObservatoryCollector(memesh.observatory))
    service = ServiceCollector(memesh)
    registry.register(service)
    return registry, service


def install_metrics(app: FastAPI, memesh: Memesh, token: str | None = None) -> CollectorRegistry:
    """Serve ``GET /metrics`` (the exact path, as a route: a mount would answer it with 307)."""
    registry, service = metrics_registry(memesh)
    expected = f"Bearer {token}".encode() if token else None

    @app.get(METRICS_PATH, include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if expected is not None and not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            return error_response(401, ErrorCode.UNAUTHORIZED, "a valid bearer token is required")
        await memesh.observatory.refresh_stats(REFRESH_TIMEOUT_S)
        with contextlib.suppress(TimeoutError, MemeshError):  # on failure the last figures stay
            async with asyncio.timeout(REFRESH_TIMEOUT_S * 2):
                service.health = await memesh.health(REFRESH_TIMEOUT_S, cached=True)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry

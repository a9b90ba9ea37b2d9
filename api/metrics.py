"""``GET /metrics``: Prometheus text exposition of the observatory's figures.

Names follow the spec's OpenTelemetry names in Prometheus form (dots become
underscores, counters end in ``_total`` once, the up-down counter is a gauge):

- ``service_observatory_events_recorded_total`` (counter)
- ``service_observatory_events_dropped_total{reason}`` (counter):
  ``reason="lagged"`` events a stream's bounded queue dropped because its
  consumer fell behind (plus any the hub could not read before eviction);
  ``reason="saturated"`` events the walks dropped because their recording
  channel to the Observatory was full
- ``service_observatory_buffer_depth`` (gauge)
- ``service_observatory_streams_active`` (gauge)
- ``service_observatory_replay_events_total`` (counter)

The recorded, saturated and depth figures live in the Observatory actor: the
route fetches them (bounded by a short timeout; on failure the last ones are
reported) before rendering, so ``collect`` never calls an actor. Each app has
its own :class:`CollectorRegistry`, never the process-global one. The route is
unauthenticated: it carries aggregate counts only, no tenant id.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from actors.facade import Memesh
from actors.observatory_hub import ObservatoryHub

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


def metrics_registry(memesh: Memesh) -> CollectorRegistry:
    """A registry of this app's own (tests build several apps in one process)."""
    registry = CollectorRegistry()
    registry.register(ObservatoryCollector(memesh.observatory))
    return registry


def install_metrics(app: FastAPI, memesh: Memesh) -> CollectorRegistry:
    """Serve ``GET /metrics`` (the exact path, as a route: a mount would answer it with 307)."""
    registry = metrics_registry(memesh)

    @app.get(METRICS_PATH, include_in_schema=False)
    async def metrics() -> Response:
        await memesh.observatory.refresh_stats(REFRESH_TIMEOUT_S)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry

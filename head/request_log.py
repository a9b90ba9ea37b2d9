"""Requests a head answered, by surface, route and status, with their latency: what ``/metrics`` reports.

Guarantees: bounded. Every label comes from a fixed set: the surface
(``rest``, ``mcp``, ``a2a``, ``console``, ``grpc``, ``other``), the route
template or RPC name the request matched (``unmatched`` when none did, never
the raw path), and the status (an HTTP status or a gRPC code name). Recording
is a few dictionary updates on the event loop; nothing here does I/O.
"""

from __future__ import annotations

import collections

from mesh.histogram import LATENCY_S, Histogram


class RequestLog:
    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str, str]] = collections.Counter()  # (surface, route, status)
        self.latency: dict[tuple[str, str], Histogram] = {}  # (surface, route) -> seconds

    def record(self, surface: str, route: str, status: str, seconds: float) -> None:
        self.counts[(surface, route, status)] += 1
        timing = self.latency.get((surface, route))
        if timing is None:
            timing = self.latency[(surface, route)] = Histogram(LATENCY_S)
        timing.observe(seconds)

"""The gRPC data plane's own listener: ``DataService``, ``grpc.health.v1`` and (optionally) reflection.

Why its own listener: the admin service's listener stays on loopback by
default, while the data plane faces agents like REST does (docs/grpc.md).

Guarantees:
- One ``grpc.aio`` server on the running event loop (the one REST serves on),
  TLS with the configured certificate when given, else plaintext.
- Bounded: at most ``max_concurrent_rpcs`` calls at once (long streams
  included; beyond, gRPC answers RESOURCE_EXHAUSTED), messages received of at
  most ``max_message_bytes`` (REST's body cap); HTTP/2 keepalive pings every
  30 s, clients' pings accepted every 10 s and while no call is open.
- Health ``Watch`` and reflection streams take no key, so they are held to a share of their own
  (:mod:`api.grpc_data.keyless_streams`: 64 at once, 8 from one address), never the slots keyed calls need.
- Health is unauthenticated. ``""`` and ``memesh.data.v1.DataService`` are
  SERVING exactly when the facade's cached readiness (``memesh.health(cached=
  True)``, what ``/healthz`` answers) holds, else NOT_SERVING: judged again
  on every ``Check`` and every :data:`HEALTH_REFRESH_S` seconds for
  ``Watch``. At shutdown both turn NOT_SERVING before the listener stops.
- Reflection lists ``DataService``, health and reflection itself when on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from api.grpc_data.call_metrics import CallMetrics
from api.grpc_data.keyless_streams import KeylessStreams
from api.grpc_data.servicer import DataServicer
from api.grpc_data.stream import InboxStreams
from api.grpc_data.undecodable import UndecodableRequests
from api.partition_hold import GrpcPartitionHold
from head.facade import Bucket, Memesh
from memesh_proto import data_pb2, data_pb2_grpc
from mesh.errors import ConfigInvalid, MemeshError

log = logging.getLogger(__name__)

SERVICE_NAME: str = data_pb2.DESCRIPTOR.services_by_name["DataService"].full_name
HEALTH_REFRESH_S = 5.0
SHUTDOWN_GRACE_S = 2.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass(frozen=True, slots=True)
class DataPlaneConfig:
    host: str = "0.0.0.0"
    port: int = 50052
    certfile: Path | None = None  # TLS with this PEM chain and keyfile; both or neither
    keyfile: Path | None = None
    reflection: bool = True
    max_message_bytes: int = 4 * 1024 * 1024
    max_concurrent_rpcs: int = 1024
    request_timeout_s: float = 30.0  # each unary call, as server.request_timeout_s bounds a /v1 request
    share_port: bool = False  # the heads of ``--workers`` share the port (SO_REUSEPORT); otherwise it is refused

    @property
    def tls(self) -> bool:
        return self.certfile is not None and self.keyfile is not None


class Readiness(health.aio.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1.Health`` answering from the facade's readiness, the one ``/healthz`` uses."""

    def __init__(self, memesh: Memesh) -> None:
        super().__init__()
        self.memesh = memesh

    async def refresh(self) -> None:
        """SERVING when the readiness holds; NOT_SERVING when it does not, or cannot be judged."""
        try:
            await self.memesh.health(cached=True)
            status = SERVING
        except MemeshError:
            status = NOT_SERVING
        except Exception:
            log.exception("gRPC health: the readiness check failed")
            status = NOT_SERVING
        for service in ("", SERVICE_NAME):
            await self.set(service, status)

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> health_pb2.HealthCheckResponse:  # noqa: N802
        await self.refresh()
        return await super().Check(request, context)

    async def keep_current(self, interval_s: float) -> None:
        """Refresh every ``interval_s`` seconds (what ``Watch`` streams see) until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            await self.refresh()


class DataPlane:
    """The running listener; :meth:`stop` ends it (health first)."""

    def __init__(self, server: grpc.aio.Server, readiness: Readiness, refresher: asyncio.Task[None], port: int) -> None:
        self.server = server
        self.readiness = readiness
        self._refresher = refresher
        self.port = port

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        await self.readiness.enter_graceful_shutdown()
        self._refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._refresher
        await self.server.stop(grace=grace_s)


async def start_data_plane(memesh: Memesh, config: DataPlaneConfig) -> DataPlane:
    """Bind and start the listener; ConfigInvalid when its address cannot be bound."""
    server = grpc.aio.server(
        interceptors=[
            CallMetrics(memesh.requests),
            GrpcPartitionHold(memesh.directory.gate),
            UndecodableRequests(memesh, Bucket.READ),
            KeylessStreams(),
        ],
        maximum_concurrent_rpcs=config.max_concurrent_rpcs,
        options=[
            ("grpc.so_reuseport", int(config.share_port)),  # else a port another process holds is refused
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ],
    )
    data_pb2_grpc.add_DataServiceServicer_to_server(DataServicer(memesh, InboxStreams(memesh), config.request_timeout_s), server)
    readiness = Readiness(memesh)
    health_pb2_grpc.add_HealthServicer_to_server(readiness, server)
    if config.reflection:
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    address = f"{config.host}:{config.port}"
    try:
        if config.certfile is not None and config.keyfile is not None:
            credentials = grpc.ssl_server_credentials([(config.keyfile.read_bytes(), config.certfile.read_bytes())])
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ConfigInvalid(f"the gRPC data plane could not listen on {address}") from exc
    await readiness.refresh()
    await server.start()
    refresher = asyncio.get_running_loop().create_task(readiness.keep_current(HEALTH_REFRESH_S))
    return DataPlane(server, readiness, refresher, port)

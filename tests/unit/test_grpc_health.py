"""gRPC health follows the same readiness as ``/healthz``: the data plane's listener, in process, over a real channel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from api.grpc_data.server import DataPlaneConfig, start_data_plane
from head.facade import Memesh
from mesh.errors import StorageUnavailable
from tests.unit.conftest import Api

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE = "memesh.data.v1.DataService"


async def test_health_is_the_readiness_of_healthz_and_ends_not_serving(make_core: Callable[..., Memesh]) -> None:
    core = make_core(server={"health_cache_s": 0})
    api = Api(core)
    plane = await start_data_plane(core, DataPlaneConfig(host="127.0.0.1", port=0, reflection=False))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{plane.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status(service: str) -> Any:
                return (await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)).status

            assert await status("") == SERVING and await status(SERVICE) == SERVING
            shard = core.directory.scene_shard(0).target  # type: ignore[attr-defined]
            original = shard.health

            async def failing() -> Any:
                raise StorageUnavailable("the shard's storage is gone")

            shard.health = failing  # a shard that cannot answer: /healthz answers 503
            assert (await api.http.get("/healthz")).status_code == 503
            assert await status("") == NOT_SERVING and await status(SERVICE) == NOT_SERVING
            shard.health = original
            assert (await api.http.get("/healthz")).status_code == 200
            assert await status(SERVICE) == SERVING
            await plane.readiness.enter_graceful_shutdown()  # what stop() does first
            assert await status(SERVICE) == NOT_SERVING  # no longer judged: shutting down
    finally:
        await plane.stop(grace_s=0)
        await api.http.aclose()
        await core.close()

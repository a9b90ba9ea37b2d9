"""``memesh serve``: REST and gRPC on one event loop, over Ray actors.

Start-up order: settings -> Ray (local, or joined with ``ray.address``) ->
actors -> bootstrap admin key -> embedding warm-up -> listeners. Shutdown on
SIGINT or SIGTERM: stop accepting, drain in-flight requests, stop gRPC, kill
this deployment's actors, disconnect from Ray (a local Ray is stopped).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import uvicorn
from fastapi import FastAPI

from api.app import create_app
from api.console.grpc_service import add_admin_service
from api.console.oidc import ConsoleConfig
from cluster.compose import build_memesh, start_core
from cluster.settings import Settings
from head.facade import Memesh
from mesh.errors import ConfigInvalid

log = logging.getLogger("memesh")


def _quiet_ray_env() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


async def serve(settings: Settings) -> None:
    _quiet_ray_env()
    try:
        memesh = build_memesh(settings)
    except BaseException:
        _disconnect(settings)
        raise
    try:
        # Refused here, before any listener opens: a changed shard count or engine (ConfigInvalid).
        key_path = await start_core(memesh, settings)
        if key_path is not None:
            print(f"memesh: bootstrap ServiceAdmin key written to {key_path.resolve()}", flush=True)
        await memesh.embedder.warm_up()
        await memesh.health(timeout_s=60.0)
        await _listen(settings, memesh)
    finally:
        await memesh.close()
        _disconnect(settings)


def console_config(settings: Settings) -> ConsoleConfig | None:
    """The console's part of the settings, or None when ``admin.console_enabled`` is off."""
    admin = settings.admin
    if not admin.console_enabled:
        return None
    assert admin.oidc_issuer and admin.oidc_client_id  # the settings validator requires both
    return ConsoleConfig(
        issuer=admin.oidc_issuer,
        client_id=admin.oidc_client_id,
        client_secret=admin.oidc_client_secret.get_secret_value() if admin.oidc_client_secret else None,
        public_url=admin.public_url,
        session_ttl_s=admin.session_ttl_s,
        state_ttl_s=admin.state_ttl_s,
        max_sessions=admin.max_sessions,
        max_pending_logins=admin.max_pending_logins,
        provider_timeout_s=admin.oidc_timeout_s,
    )


def _disconnect(settings: Settings) -> None:
    if not settings.ray.in_process:
        from actors.ray_directory import shutdown

        shutdown()


async def _listen(settings: Settings, memesh: Memesh) -> None:
    grpc_server: grpc.aio.Server | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal grpc_server
        if settings.server.grpc_enabled:
            grpc_server = grpc.aio.server()
            add_admin_service(grpc_server, memesh)
            address = f"{settings.server.grpc_host}:{settings.server.grpc_port}"
            server_settings = settings.server
            if server_settings.grpc_tls_certfile is not None and server_settings.grpc_tls_keyfile is not None:
                credentials = grpc.ssl_server_credentials(
                    [(server_settings.grpc_tls_keyfile.read_bytes(), server_settings.grpc_tls_certfile.read_bytes())]
                )
                bound = grpc_server.add_secure_port(address, credentials)
            else:
                bound = grpc_server.add_insecure_port(address)
            await grpc_server.start()
            scheme = "TLS" if server_settings.grpc_tls else "plaintext"
            print(f"memesh: gRPC admin on {settings.server.grpc_host}:{bound} ({scheme})", flush=True)
        scheme = "https" if settings.server.tls else "http"
        print(f"memesh: REST on {scheme}://{settings.server.host}:{settings.server.port} (MCP at /mcp)", flush=True)
        if settings.admin.console_enabled:
            print(f"memesh: operator console at {scheme}://{settings.server.host}:{settings.server.port}/admin", flush=True)
        try:
            yield
        finally:
            await app.state.mcp.close()
            if grpc_server is not None:
                await grpc_server.stop(grace=2.0)

    token = settings.server.metrics_token
    app = create_app(
        memesh,
        settings.server.max_body_bytes,
        settings.server.request_timeout_s,
        console_config(settings),
        metrics_token=token.get_secret_value() if token is not None else None,
    )
    app.router.lifespan_context = lifespan
    config = uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=10,
        ssl_certfile=settings.server.tls_certfile,
        ssl_keyfile=settings.server.tls_keyfile,
    )
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()
    # Ray installs its own SIGTERM handler, which would skip the lifespan shutdown;
    # route both signals to uvicorn's graceful exit instead.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.handle_exit, sig, None)
    server.capture_signals = _no_capture  # type: ignore[method-assign,assignment]
    await server.serve()
    if not server.started:
        raise ConfigInvalid(f"could not listen on {settings.server.host}:{settings.server.port}")


def _no_capture() -> object:
    from contextlib import nullcontext

    return nullcontext()


def run(settings: Settings) -> None:
    logging.basicConfig(level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings))

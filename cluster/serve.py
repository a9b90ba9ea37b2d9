"""``memesh serve``: REST and gRPC on one event loop, over Ray actors.

Start-up order: settings -> Ray (local, or joined with ``ray.address``) ->
actors -> bootstrap admin key -> embedding warm-up -> the head roster ->
listeners. Shutdown on SIGINT or SIGTERM: stop accepting, drain in-flight
requests, stop gRPC, leave the roster; the last head of the deployment also
drains and stops its actors; disconnect from Ray (a local Ray is stopped).

Several heads: any number of ``memesh serve`` processes joined to one Ray
cluster (``ray.address``) serve one deployment; ``--workers N`` (``heads.workers``)
starts N heads on this machine: this process, then N - 1 more attached to its
Ray, all listening on the same ports (``SO_REUSEPORT``: the kernel spreads
connections). The first head's Ray owns the actors, so the others stop when it
is gone, and it stops them when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import grpc
import uvicorn
import uvloop
from fastapi import FastAPI

from actors.heap import keep_pauses_short
from api.a2a.card import A2aConfig
from api.app import create_app
from api.console.grpc_service import add_admin_service, admin_interceptors
from api.console.oidc import ConsoleConfig
from api.grpc_data.server import DataPlane, DataPlaneConfig, start_data_plane
from api.http_protocol import WS_MAX_MESSAGE_BYTES, DenialAwareWebSocketProtocol, EnvelopeHttpToolsProtocol
from cluster.compose import build_memesh, start_core
from cluster.settings import Settings
from head.facade import Memesh
from mesh.errors import ConfigInvalid

log = logging.getLogger("memesh")


def _quiet_ray_env() -> None:
    # A local Ray started here runs its workers at this process's priority: Ray's default starts their
    # Python threads at niceness 15 (so a user's tasks never starve its daemons), but memesh's actors are the
    # service, and only its walkers run lower (propagation.walker_nice). Nodes joined with ``ray start`` set
    # it themselves (cluster/ray-cluster.yaml, cluster/kuberay.yaml).
    os.environ.setdefault("RAY_worker_niceness", "0")
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
        heads = await memesh.join_heads()
        log.info("head %s joined; %d live heads", memesh.heads.head_id, heads)
        keep_pauses_short()  # what the start made is never scanned again by a full collection (actors.heap)
        with workers(settings):
            await _listen(settings, memesh)
    finally:
        await memesh.close(owner=settings.ray.address is None)  # a local Ray's owner stops what runs on it
        _disconnect(settings)


@contextmanager
def workers(settings: Settings) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start ``heads.workers - 1`` more heads attached to this head's Ray (same flags and settings);
    stop them (SIGTERM, then SIGKILL after 30 s) before this head stops."""
    extra = settings.heads.workers - 1 if not settings.heads.attached else 0
    if extra and (settings.server.port == 0 or settings.server.grpc_data_port == 0 or settings.server.grpc_port == 0):
        raise ConfigInvalid("heads.workers above 1 needs fixed ports (the heads share them)")
    spawned: list[subprocess.Popen[bytes]] = []
    if extra:
        from actors.ray_directory import gcs_address

        env = {**os.environ, "MEMESH_RAY__ADDRESS": gcs_address(), "MEMESH_HEADS__ATTACHED": "true"}
        for _ in range(extra):
            spawned.append(subprocess.Popen([sys.executable, "-m", "cluster.cli", *sys.argv[1:]], env=env))
    try:
        yield spawned
    finally:
        for child in spawned:
            child.terminate()
        for child in spawned:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


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


def a2a_config(settings: Settings) -> A2aConfig | None:
    """The A2A binding's part of the settings, or None when ``a2a.enabled`` is off. Without
    ``a2a.public_url`` the card advertises this listener (a wildcard host as ``localhost``)."""
    a2a = settings.a2a
    if not a2a.enabled:
        return None
    server = settings.server
    host = "localhost" if server.host in ("0.0.0.0", "::", "") else server.host
    host = f"[{host}]" if ":" in host else host
    base_url = a2a.public_url or f"{'https' if server.tls else 'http'}://{host}:{server.port}"
    return A2aConfig(base_url=base_url, data_dir=settings.storage.data_dir, name=a2a.name, description=a2a.description)


def data_plane_config(settings: Settings) -> DataPlaneConfig | None:
    """The gRPC data plane's listener (its own: the admin one stays on loopback), or None when
    ``server.grpc_data_enabled`` is off. TLS with REST's certificate when REST has one."""
    server = settings.server
    if not server.grpc_data_enabled:
        return None
    return DataPlaneConfig(
        host=server.grpc_data_host,
        port=server.grpc_data_port,
        certfile=server.tls_certfile,
        keyfile=server.tls_keyfile,
        reflection=settings.grpc_reflection_enabled,
        max_message_bytes=server.max_body_bytes,
        request_timeout_s=server.request_timeout_s,
        max_concurrent_rpcs=settings.limits.max_inbox_streams + 1024,  # every stream, and room for unary calls beside
        share_port=_shares_ports(settings),
    )


def _disconnect(settings: Settings) -> None:
    if not settings.ray.in_process:
        from actors.ray_directory import shutdown

        shutdown()


def _shares_ports(settings: Settings) -> bool:
    """The heads ``--workers`` starts share this machine's ports; a lone head refuses a port already held."""
    return settings.heads.workers > 1 or settings.heads.attached


def _shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket other heads of this machine may bind too (``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


async def _watch_first_head(server: uvicorn.Server) -> None:
    """An attached head stops when the head that started it is gone (its Ray and actors went with it)."""
    parent = os.getppid()
    while not server.should_exit:
        if os.getppid() != parent:
            log.warning("the first head is gone: stopping")
            server.should_exit = True
        await asyncio.sleep(0.5)


async def _listen(settings: Settings, memesh: Memesh) -> None:
    grpc_server: grpc.aio.Server | None = None
    data_plane: DataPlane | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal grpc_server, data_plane
        if settings.server.grpc_enabled:
            grpc_server = grpc.aio.server(
                interceptors=admin_interceptors(memesh),
                options=[("grpc.so_reuseport", int(_shares_ports(settings)))],
            )
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
        data_config = data_plane_config(settings)
        if data_config is not None:
            data_plane = await start_data_plane(memesh, data_config)
            scheme = "TLS" if data_config.tls else "plaintext"
            print(f"memesh: gRPC data plane on {data_config.host}:{data_plane.port} ({scheme})", flush=True)
        scheme = "https" if settings.server.tls else "http"
        print(f"memesh: REST on {scheme}://{settings.server.host}:{settings.server.port} (MCP at /mcp)", flush=True)
        if settings.admin.console_enabled:
            print(f"memesh: operator console at {scheme}://{settings.server.host}:{settings.server.port}/admin", flush=True)
        if app.state.a2a is not None:
            print(f"memesh: A2A at {scheme}://{settings.server.host}:{settings.server.port}/a2a/v1 (card public)", flush=True)
        try:
            yield
        finally:
            await app.state.mcp.close()
            if app.state.a2a is not None:
                await app.state.a2a.close()
            if data_plane is not None:
                await data_plane.stop()
            if grpc_server is not None:
                await grpc_server.stop(grace=2.0)

    token = settings.server.metrics_token
    app = create_app(
        memesh,
        settings.server.max_body_bytes,
        settings.server.request_timeout_s,
        console_config(settings),
        metrics_token=token.get_secret_value() if token is not None else None,
        a2a=a2a_config(settings),
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
        http=EnvelopeHttpToolsProtocol,  # uvicorn's own 400s in the spec's envelope
        ws=DenialAwareWebSocketProtocol,  # a refused handshake is not a server error in the log
        ws_max_size=WS_MAX_MESSAGE_BYTES,
    )
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()
    # Ray installs its own SIGTERM handler, which would skip the lifespan shutdown;
    # route both signals to uvicorn's graceful exit instead.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.handle_exit, sig, None)
    server.capture_signals = _no_capture  # type: ignore[method-assign,assignment]
    sockets = [_shared_socket(settings.server.host, settings.server.port)] if _shares_ports(settings) else None
    watch = asyncio.create_task(_watch_first_head(server)) if settings.heads.attached else None
    try:
        await server.serve(sockets=sockets)
    finally:
        if watch is not None:
            watch.cancel()
    if not server.started:
        raise ConfigInvalid(f"could not listen on {settings.server.host}:{settings.server.port}")


def _no_capture() -> object:
    from contextlib import nullcontext

    return nullcontext()


def run(settings: Settings) -> None:
    """Serve until a signal, on the event loop ``server.event_loop`` names: uvloop by default (concurrent
    writes cost a little less on it, docs/benchmarks.md), the standard library's loop on request."""
    logging.basicConfig(level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loop_factory = uvloop.new_event_loop if settings.server.event_loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(settings))

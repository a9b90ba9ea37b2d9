"""The head node's FastAPI application: /v1, /healthz, /openapi.json, /metrics, the console, and A2A.

The facade is ``app.state.memesh`` (every router reaches it through
:data:`api.deps.Core`). The /v1 gate (:mod:`api.data.gate`) judges every
``/v1/*`` request; the console (:mod:`api.console.mount`) adds its own gate.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Response
from fastapi.responses import JSONResponse

from api.a2a.card import A2aConfig
from api.a2a.door import mount_a2a
from api.console.mount import mount_admin
from api.console.oidc import ConsoleConfig
from api.console.operator_api import public_router as published_keys_router
from api.data.documented_limits import documented_limits
from api.data.gate import V1Gate
from api.data.inbox import router as inbox_router
from api.data.memory import router as memory_router
from api.data.schemas import HealthOut
from api.errors import error_response, install_error_handlers
from api.mcp.door import McpDoor, McpRoute
from api.metrics import install_metrics
from api.openapi import API_VERSION, build_openapi
from api.partition_hold import PartitionHold
from api.request_metrics import RequestMetrics
from api.websocket import websocket_not_found
from head.facade import Memesh
from mesh.errors import ErrorCode, MemeshError


def create_app(
    memesh: Memesh,
    max_body_bytes: int = 4 * 1024 * 1024,
    request_timeout_s: float = 30.0,
    console: ConsoleConfig | None = None,
    metrics_token: str | None = None,
    a2a: A2aConfig | None = None,
) -> FastAPI:
    """An app serving ``memesh``; with ``console``, also the control plane (``/admin``, the
    console login and its session gate); with ``a2a``, the A2A card and JSON-RPC binding
    (``app.state.a2a``, else None). Its lifespan is the caller's (``cluster.serve``)."""
    # redirect_slashes off: `/v1/query/` is a 404 in the envelope, never a 307 to an absolute http:// URL (which a
    # client behind a TLS proxy would follow in plaintext, key and body with it)
    app = FastAPI(title="memesh", version=API_VERSION, openapi_url=None, docs_url=None, redoc_url=None, redirect_slashes=False)
    app.state.memesh = memesh
    app.router.default = websocket_not_found(memesh, app.router.default)  # a handshake to no stream: 401/404
    install_error_handlers(app)
    v1 = APIRouter()
    v1.include_router(memory_router)
    v1.include_router(inbox_router)
    app.include_router(v1)
    limits = documented_limits(memesh.memory.limits, memesh.inbox.limits, memesh.embedder.dims)
    openapi_doc = build_openapi(v1, refinements=limits)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(openapi_doc)

    @app.get("/healthz", response_model=HealthOut, include_in_schema=False)
    async def healthz(response: Response) -> Any:
        """No tenant data without a key: the actors, live heads and engine; ``x-memesh-head`` names the
        head that answered (behind a load balancer, which one a connection reached)."""
        try:
            health = await memesh.health(cached=True)
            detail = {"actors": health["actors"], "heads": health["heads"], "embedding_engine": health["embedding_engine"]}
        except MemeshError as exc:
            return error_response(503, ErrorCode.UNAVAILABLE, exc.message)
        response.headers["x-memesh-head"] = memesh.heads.head_id
        return HealthOut(status="ok", version=API_VERSION, detail=detail)

    app.include_router(published_keys_router)  # the erasure-receipt public keys, for anyone to verify with
    install_metrics(app, memesh, metrics_token)  # aggregate counts only; a bearer token when metrics_token is set
    if console is not None:
        mount_admin(app, memesh, console, max_body_bytes, request_timeout_s)
    app.state.a2a = mount_a2a(app, memesh, a2a, max_body_bytes, request_timeout_s) if a2a is not None else None
    app.add_middleware(V1Gate, memesh=memesh, max_body_bytes=max_body_bytes, timeout_s=request_timeout_s)
    app.state.mcp = McpDoor(
        memesh, max_body_bytes, request_timeout_s
    )  # MCP over Streamable HTTP at /mcp (cluster.serve closes it)
    app.add_middleware(McpRoute, door=app.state.mcp)
    app.add_middleware(PartitionHold, gate=memesh.directory.gate)  # requests wait here while partitions move
    app.add_middleware(RequestMetrics, log=memesh.requests)  # outermost: gate refusals count too
    return app

"""The A2A surface on the REST listener: the card, its signing keys, and the JSON-RPC door at ``/a2a/v1``.

Guarantees:
- Mounted only when ``a2a.enabled`` (:func:`mount_a2a`); otherwise every path
  below is the ordinary 404 envelope. None of them is in ``/openapi.json``,
  which describes the ``/v1`` router alone.
- ``GET /.well-known/agent-card.json`` (the SDK's route: weak ``ETag``, 304
  on ``If-None-Match``, ``Cache-Control: public, max-age=300``) and
  ``GET /.well-known/memesh-card-keys.json`` (the JWKS its signature names as
  ``jku``) need no key (spec section 5, data-plane rule 5).
- ``/a2a/v1`` (and ``/a2a/v1/``, the same endpoint, no redirect) admits the
  caller before any JSON-RPC: the key is ``x-service-key`` or
  ``Authorization: Bearer <key>``, resolved by the same principal cache and
  auth-failure bucket as ``/v1`` (``Memesh.principal``); a refusal is the
  spec's envelope (401 ``unauthorized``, 429 ``rate_limited`` with
  ``Retry-After``) and the SDK never sees the request. Then the ``/v1`` body
  rules: only POST (405), a JSON content type (415), at most
  ``max_body_bytes`` (400), answered within ``timeout_s`` (504).
- Every call costs its caller tokens: a message send costs its operation's
  bucket (charged by the operation, :mod:`api.a2a.operations`; a refusal is
  the reply's ``rate_limited`` envelope), or one Read token when it is
  refused before its operation runs (:class:`api.a2a.executor.MemeshRequestHandler`);
  any other method (``GetTask``, ``ListTasks``, ``tasks/get``, a malformed
  body, ...) one Read token, charged here, so its refusal is an HTTP 429 with
  ``Retry-After`` before JSON-RPC.
- A body of more than ``MAX_JSON_VALUES`` JSON values or nested deeper than
  ``MAX_JSON_DEPTH`` (:func:`api.gate_common.json_shape_refusal`) is 400
  ``validation`` before the SDK parses it (charged one Read token): the SDK
  builds its objects on the event loop every request shares.
- Both protocol versions share the endpoint: v1.0 method names
  (``SendMessage``) with ``A2A-Version: 1.0``, v0.3 names (``message/send``)
  without it or with ``A2A-Version: 0.3``. The header is never invented: as
  the A2A specification says, a request without it is read as 0.3, so a
  v1.0 name without it is ``-32009`` (VersionNotSupported).
"""

from __future__ import annotations

from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from api.a2a.card import RPC_PATH, A2aConfig, signed_card
from api.a2a.executor import CallerContext, MemeshRequestHandler, owner_of
from api.a2a.keys import KEYS_PATH, CardKey
from api.a2a.sdk_logs import quiet_client_mistakes
from api.a2a.wire_checks import invalid_params, is_text, loads
from api.admission import admit_at_door
from api.errors import error_response, memesh_error_response
from api.gate_common import header_map, json_shape_refusal, read_body, replay, run_guarded
from head.facade import Bucket, Memesh
from mesh.errors import ErrorCode, MemeshError

PARSE_ERROR = object()
SEND_METHODS = frozenset({"SendMessage", "message/send"})  # charged by their operation, not here
CARD_CACHE = "public, max-age=300"


class A2aDoor:
    """``/a2a/v1`` as an ASGI app: admission and the body rules, then the SDK's JSON-RPC route."""

    def __init__(self, memesh: Memesh, config: A2aConfig, max_body_bytes: int, timeout_s: float) -> None:
        self.memesh = memesh
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        quiet_client_mistakes()
        self.key = CardKey.load_or_create(config.data_dir)
        self.card = signed_card(config, self.key)
        self.handler = MemeshRequestHandler(memesh, InMemoryTaskStore(owner_resolver=owner_of), self.card)
        (self.rpc,) = create_jsonrpc_routes(self.handler, RPC_PATH, context_builder=CallerContext(), enable_v0_3_compat=True)

    def routes(self) -> list[BaseRoute]:
        """The card, its keys, and this door (at ``/a2a/v1`` and ``/a2a/v1/``)."""
        return [
            *create_agent_card_routes(self.card, cache_control=CARD_CACHE),
            Route(KEYS_PATH, self.published_keys, methods=["GET"]),
            Route(RPC_PATH, self),
            Route(RPC_PATH + "/", self),
        ]

    async def published_keys(self, request: Request) -> Response:
        """The JWKS that verifies the card's signature (no key needed)."""
        return JSONResponse(self.key.jwks(), headers={"Cache-Control": CARD_CACHE})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = await admit_at_door(self.memesh, scope, receive, send, self.max_body_bytes, "A2A JSON-RPC")
        if principal is None:
            return
        scope = {**scope, "state": {**scope.get("state", {}), "principal": principal}}
        await run_guarded(self._admitted, scope, receive, send, self.max_body_bytes, self.timeout_s)

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Charge a call that is no message send one Read token, then hand the request to the SDK."""
        body = await read_body(receive)
        if body is None:
            return  # the client left
        try:
            request = loads(body)
        except (ValueError, RecursionError):  # the SDK would answer -32603 with the decoder's own text
            request = PARSE_ERROR
        method = request.get("method") if isinstance(request, dict) else None
        too_large = json_shape_refusal(request)
        refusal = _refusal(request, method, header_map(scope).get("a2a-version", "")) if too_large is None else None
        if method not in SEND_METHODS or refusal is not None or too_large is not None:
            try:
                self.memesh.charge(scope["state"]["principal"], Bucket.READ)
            except MemeshError as exc:
                await memesh_error_response(exc)(scope, receive, send)
                return
        if too_large is not None:  # before the SDK turns every value into an object of its own
            await error_response(400, ErrorCode.VALIDATION, too_large)(scope, receive, send)
            return
        if refusal is not None:
            reply_id = request.get("id") if isinstance(request, dict) else None
            if isinstance(reply_id, bool) or not isinstance(reply_id, str | int) or not is_text(str(reply_id)):
                reply_id = None  # JSON-RPC ids are strings and numbers (and an answer is UTF-8)
            await JSONResponse({"jsonrpc": "2.0", "id": reply_id, "error": refusal})(scope, receive, send)
            return
        await self.rpc.handle(scope, replay(body, receive), send)

    async def close(self) -> None:
        """Drain the SDK handler's in-flight work (at shutdown)."""
        await self.handler.aclose()


def _refusal(request: object, method: object, version: str) -> dict[str, object] | None:
    """The JSON-RPC error memesh answers itself before the SDK, or None:
    - a body that is not JSON: ``-32700``;
    - an ``id`` that is not Unicode text (a lone surrogate: the SDK's answer echoing it failed to encode,
      a 500): ``-32600`` with a null id;
    - a request without an ``id``: ``-32600`` (A2A defines no notification; the SDK ran a v1.0 one and
      answered it with a null id, and refused a v0.3 one with a pydantic dump);
    - a v0.3 method name (``message/send``: v0.3 names hold a ``/``) under ``A2A-Version: 1.x``: ``-32009``
      VersionNotSupported, as the SDK answers a v1.0 name without the header (it answered -32603);
    - params the SDK's conversions fail on (:func:`api.a2a.wire_checks.invalid_params`): ``-32602``
      ``validation: ...`` (they were ``-32603`` with the library's words and an ERROR traceback)."""
    if request is PARSE_ERROR:
        return {"code": -32700, "message": "Parse error: the body is not a JSON document this service reads"}
    if isinstance(request, dict) and isinstance(request.get("id"), str) and not is_text(request["id"]):
        return {"code": -32600, "message": "Invalid Request: the id holds a lone surrogate, which is not Unicode text"}
    if isinstance(request, dict) and isinstance(method, str) and "id" not in request:
        return {"code": -32600, "message": "Invalid Request: A2A has no notifications; give the request an id"}
    if isinstance(method, str) and "/" in method and version.strip().startswith("1"):
        return {
            "code": -32009,
            "message": f"{method!r} is an A2A 0.3 method, and this request says A2A-Version {version.strip()[:20]}",
        }
    problem = invalid_params(request)
    return {"code": -32602, "message": problem} if problem is not None else None


def mount_a2a(app: FastAPI, memesh: Memesh, config: A2aConfig, max_body_bytes: int, timeout_s: float) -> A2aDoor:
    """Serve the A2A surface on ``app`` (outside ``/openapi.json``); the caller closes the door at shutdown."""
    door = A2aDoor(memesh, config, max_body_bytes, timeout_s)
    app.router.routes.extend(door.routes())
    return door

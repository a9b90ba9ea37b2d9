"""The /v1 gate: the order in which a data-plane request is judged.

1. Authentication (``x-service-key``) first, :func:`api.admission.authenticate_at_gate`:
   a request without a valid key gets 401 whatever its body (429 once its
   address has sent too many refused keys: the ``auth_failures`` bucket).
2. A body sent with a non-JSON content type gets 415; one over
   ``max_body_bytes`` gets 400.
3. Then the route: body parsing (400 malformed JSON / out-of-range values,
   422 wrong shape), the rate-limit bucket (:mod:`api.deps`), the use case.
4. A request still running after ``timeout_s`` gets 504 ``timeout``.

Unauthenticated paths: ``/healthz`` and ``/openapi.json`` (not under /v1).
The WebSocket inbox stream is admitted by its own handshake
(:mod:`api.data.inbox`). The console's ``/admin/api`` gate
(:mod:`api.console.gate`) shares steps 2 and 4 through :mod:`api.gate_common`.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api.admission import authenticate_at_gate
from api.errors import memesh_error_response
from api.gate_common import body_refusal, header_map, header_pairs, run_guarded
from head.facade import Memesh
from mesh.errors import MemeshError


class V1Gate:
    def __init__(self, app: ASGIApp, memesh: Memesh, max_body_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.memesh = memesh
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        pairs = header_pairs(scope)
        headers = header_map(scope, pairs)
        try:
            await authenticate_at_gate(self.memesh, scope, pairs)
        except MemeshError as exc:
            await memesh_error_response(exc)(scope, receive, send)
            return
        refusal = body_refusal(scope, headers, self.max_body_bytes)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await run_guarded(self.app, scope, receive, send, self.max_body_bytes, self.timeout_s)

"""The /admin/api gate: the order in which a console request is judged.

For every HTTP request and WebSocket handshake under ``/admin/api/``:

1. The session first: the ``service_admin_session`` cookie names a live
   console session, and the session's agent is *active* now (its principal is
   resolved afresh on every request, never cached). Otherwise 401
   ``unauthorized``, whatever the body. An API key is not accepted here.
2. The role: a principal with neither ServiceAdmin nor ProjectAdmin gets 403
   ``forbidden`` (and an ``AuthzDenied`` audit row). Then a browser request
   from another origin that could change state (a non-GET method or a
   WebSocket handshake whose ``Origin`` is neither this server's nor the
   console's ``public_url``) gets 403: defence in depth beside ``SameSite=Lax``.
3. HTTP only: a body with a non-JSON content type gets 415, one over
   ``max_body_bytes`` 400 (:mod:`api.gate_common`, as on /v1).
4. The Admin rate-limit bucket is charged one token (429 ``rate_limited`` with
   ``Retry-After`` when empty), for every path except ``GET /admin/api/me``,
   including paths no route serves (they are charged, then get 404).
5. The principal is put in ``scope["state"]["principal"]`` (routes read
   the ``Operator`` dependency of :mod:`api.deps`) and the console session in
   ``scope["state"]["console_session"]`` (``OperatorSession``), and the check
   itself in ``scope["state"]["readmit"]`` (a WebSocket stream runs it again
   before each batch it sends, so a revoked agent or a logged-out session
   stops receiving at once); HTTP requests
   then run under the body cap and the request timeout (504).

A WebSocket refused at any step gets the HTTP answer before the upgrade,
never an accepted socket.
"""

from __future__ import annotations

import functools

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from api.console.store import ConsoleStore
from api.errors import error_response, memesh_error_response
from api.gate_common import body_refusal, cross_origin, header_map, refuse, run_guarded
from head.clock import utc_now
from head.facade import Bucket, Memesh
from mesh.console_sessions import ConsoleSession
from mesh.errors import ErrorCode, MemeshError, Unauthorized
from mesh.identity import Principal
from mesh.ids import Clock

SESSION_COOKIE = "service_admin_session"
ADMIN_API = "/admin/api"
ME_PATH = "/admin/api/me"


def is_admin_api(path: str) -> bool:
    return path == ADMIN_API or path.startswith(ADMIN_API + "/")


def session_token(headers: dict[str, str]) -> str | None:
    """The ``service_admin_session`` cookie's value, if the request carries one."""
    cookie = headers.get("cookie")
    return cookie_parser(cookie).get(SESSION_COOKIE) if cookie else None


def _uncharged(scope: Scope) -> bool:
    return scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and scope["path"] == ME_PATH


class AdminGate:
    def __init__(
        self,
        app: ASGIApp,
        memesh: Memesh,
        sessions: ConsoleStore,
        max_body_bytes: int,
        timeout_s: float,
        clock: Clock = utc_now,
        allowed_origins: frozenset[str] = frozenset(),
    ) -> None:
        """``allowed_origins``: origins besides the request's own host that may change state
        (the console's ``public_url`` behind a proxy that rewrites ``Host``)."""
        self.allowed_origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        self.app = app
        self.memesh = memesh
        self.sessions = sessions
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not is_admin_api(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = header_map(scope)
        try:
            token = session_token(headers)
            principal, session = await self.admit(token, scope["path"])
        except MemeshError as exc:
            await refuse(memesh_error_response(exc), scope, receive, send)
            return
        if cross_origin(scope, headers, self.allowed_origins):
            await refuse(error_response(403, ErrorCode.FORBIDDEN, "cross-origin request refused"), scope, receive, send)
            return
        refusal = body_refusal(scope, headers, self.max_body_bytes)
        if refusal is not None:
            await refuse(refusal, scope, receive, send)
            return
        if not _uncharged(scope):
            try:
                self.memesh.charge(principal, Bucket.ADMIN)
            except MemeshError as exc:
                await refuse(memesh_error_response(exc), scope, receive, send)
                return
        state = scope.setdefault("state", {})
        state["principal"] = principal
        state["console_session"] = session
        state["readmit"] = functools.partial(self.admit, token, scope["path"])  # long-lived streams re-check it
        state["watch"] = functools.partial(self.memesh.identity.watch, principal.agent_id)  # ...at once on a change
        if scope["type"] == "http":
            await run_guarded(self.app, scope, receive, send, self.max_body_bytes, self.timeout_s)
        else:
            await self.app(scope, receive, send)

    async def admit(self, token: str | None, path: str) -> tuple[Principal, ConsoleSession]:
        """The admin principal behind a session cookie: Unauthorized (no live session, or its
        agent is no longer active; the session is then dropped) or Forbidden (not an admin)."""
        now = self.clock()
        session = await self.sessions.get(token, now)
        if session is None:
            raise Unauthorized("a console session is required: log in at /admin/auth/login")
        principal = await self.memesh.identity.principal_for_subject(session.subject)
        if principal is None or principal.agent_id != session.agent_id:
            await self.sessions.drop(token, now)
            raise Unauthorized("the session's identity is no longer active: log in again")
        if not principal.is_admin:
            self.memesh.charge(principal, Bucket.ADMIN)  # a refused caller cannot add audit rows without limit
            await self.memesh.role_gate.refuse_non_admin(principal, "admin_console", path)
        return principal, session

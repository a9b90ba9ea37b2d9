"""The operator console's login routes (mounted only when the console is enabled, :mod:`api.console.mount`).

- ``GET /admin/auth/login``: 302 to the provider's authorize URL
  (:meth:`api.console.oidc.Console.begin`). The state goes in the transient
  cookie ``service_admin_login_state`` (HttpOnly, SameSite=Lax,
  Path=/admin/auth, Secure over TLS, max-age ``state_ttl_s``).
- ``GET /admin/auth/callback``: :meth:`~api.console.oidc.Console.complete`.
  Success: a new session, the cookie ``service_admin_session`` (HttpOnly,
  SameSite=Lax, Path=/admin, Secure over TLS) and a 302 to ``/admin``. Any
  failure: the spec envelope (400 ``validation`` for state problems, 401
  ``unauthorized`` for a refused or unbound login, 503 when the provider does
  not answer). Both answers clear the state cookie.
- ``POST /admin/auth/logout``: drops the session server-side, clears the
  cookie, 204; idempotent. A browser request from another origin gets 403.
- ``GET /admin/api/me``: the session's identity (behind
  :mod:`api.console.gate`; no audit, no rate charge).
- ``GET /admin``: the console page (:mod:`api.console.page`; the callback's redirect target).
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel

from api.console.gate import SESSION_COOKIE
from api.console.oidc import CALLBACK_PATH, LOGIN_PATH, STATE_COOKIE
from api.deps import ConsoleState, Operator, OperatorSession
from api.errors import error_response, memesh_error_response
from api.gate_common import cross_origin, header_map
from mesh.errors import ErrorCode, MemeshError

LOGOUT_PATH = "/admin/auth/logout"
STATE_COOKIE_PATH = "/admin/auth"
SESSION_COOKIE_PATH = "/admin"


class MeOut(BaseModel):
    agent_id: str
    tenant_id: str
    roles: list[str]
    display_name: str
    subject: str
    expires_at: datetime


router = APIRouter(include_in_schema=False)


def _clear_state_cookie(response: Response, secure: bool) -> None:
    response.delete_cookie(STATE_COOKIE, path=STATE_COOKIE_PATH, secure=secure, httponly=True, samesite="lax")


@router.get(LOGIN_PATH)
async def login(request: Request, console: ConsoleState) -> Response:
    url, state = await console.begin(request)
    response = RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        STATE_COOKIE,
        state,
        max_age=max(1, int(console.config.state_ttl_s)),
        path=STATE_COOKIE_PATH,
        secure=console.secure(request),
        httponly=True,
        samesite="lax",
    )
    return response


@router.get(CALLBACK_PATH)
async def callback(request: Request, console: ConsoleState) -> Response:
    secure = console.secure(request)
    try:
        principal, subject = await console.complete(request)
    except MemeshError as exc:
        failed = memesh_error_response(exc)
        _clear_state_cookie(failed, secure)
        return failed
    token, _ = await console.sessions.open(principal.agent_id, subject, console.clock())
    response = RedirectResponse("/admin", status_code=302, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=max(1, int(console.config.session_ttl_s)),
        path=SESSION_COOKIE_PATH,
        secure=secure,
        httponly=True,
        samesite="lax",
    )
    _clear_state_cookie(response, secure)
    return response


@router.post(LOGOUT_PATH, status_code=204)
async def logout(request: Request, console: ConsoleState) -> Response:
    """Drop the session server-side (a browser request from another origin is refused with 403). Open
    observatory streams of the session's operator check their session again at once, and close."""
    if cross_origin(request.scope, header_map(request.scope), console.allowed_origins):
        return error_response(403, ErrorCode.FORBIDDEN, "cross-origin request refused")
    token = request.cookies.get(SESSION_COOKIE)
    session = await console.sessions.get(token, console.clock())
    await console.sessions.drop(token, console.clock())
    if session is not None:
        console.memesh.identity.nudge(session.agent_id)
    response = Response(status_code=204)
    response.delete_cookie(
        SESSION_COOKIE, path=SESSION_COOKIE_PATH, secure=console.secure(request), httponly=True, samesite="lax"
    )
    return response


@router.get("/admin/api/me", response_model=MeOut)
async def me(principal: Operator, session: OperatorSession, console: ConsoleState) -> MeOut:
    agent = await console.memesh.identity.get(principal, principal.agent_id)
    return MeOut(
        agent_id=agent.id,
        tenant_id=agent.tenant_id,
        roles=sorted(r.value for r in agent.roles),
        display_name=agent.display_name,
        subject=session.subject,
        expires_at=session.expires_at,
    )


__all__ = ["LOGOUT_PATH", "MeOut", "router"]

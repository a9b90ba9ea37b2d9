"""The operator console's login: OIDC Authorization-Code with PKCE (Authlib), server-side sessions.

Routes (mounted only when the console is enabled, ``api.admin.mount_admin``):

- ``GET /admin/auth/login``: 302 to the provider's authorize URL, with PKCE
  (S256), a nonce and a state. The state also goes in a transient cookie
  (``service_admin_login_state``: HttpOnly, SameSite=Lax, Path=/admin/auth,
  Secure over TLS, max-age ``state_ttl_s``); nonce and verifier stay on this
  head, keyed by the state.
- ``GET /admin/auth/callback``: the state parameter must equal the cookie and
  name a pending login (taken once). The code is exchanged with the verifier;
  the ID token's signature (the provider's JWKS, from its discovery document),
  ``iss``, ``aud``, ``exp`` and ``nonce`` are checked by Authlib/joserfc; ``sub``
  must resolve to an *active* agent. Success: an AuthSuccess row, a new
  session, the cookie ``service_admin_session`` (HttpOnly, SameSite=Lax,
  Path=/admin, Secure over TLS) and a 302 to ``/admin``. Any failure: an
  AuthFailure row and the spec envelope (400 ``validation`` for state
  problems, 401 ``unauthorized`` for a refused or unbound login, 503 when the
  provider does not answer). Both answers clear the state cookie.
- ``POST /admin/auth/logout``: drops the session server-side, clears the
  cookie, 204; idempotent.
- ``GET /admin/api/me``: the session's identity (behind ``api.admin_gate``;
  no audit, no rate charge).
- ``GET /admin``: a static landing page (the callback's redirect target).

Login does not require an admin role: a non-admin subject logs in and then
gets 403 from the gate. Nothing from the provider (code, tokens, ID token) is
kept after the callback, logged or written to an audit row; the session
cookie is an opaque random id, never a token.

Callback failures before the provider vouched for a subject (a forged state,
a provider error) are charged to one shared Admin bucket, so unauthenticated
clients cannot grow the audit log faster than the Admin rate (429 beyond it).
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, NoReturn
from urllib.parse import urlsplit

import httpx2  # the HTTP client Authlib uses (its httpx fallback is deprecated)
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import OAuthError
from authlib.integrations.starlette_client import OAuth
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from joserfc.errors import JoseError
from pydantic import BaseModel

from api.admin_gate import SESSION_COOKIE
from api.console_sessions import ConsoleSession, ConsoleSessions, PendingLogin, PendingLogins, address_owner
from api.errors import error_response, memesh_error_response
from api.gate_common import cross_origin, header_map
from head.clock import utc_now
from head.facade import Bucket, Memesh
from mesh.errors import ConfigInvalid, ErrorCode, MemeshError, Unauthorized, Unavailable, ValidationFailed
from mesh.identity import Principal
from mesh.ids import Clock

log = logging.getLogger(__name__)

STATE_COOKIE = "service_admin_login_state"
LOGIN_PATH = "/admin/auth/login"
LOGOUT_PATH = "/admin/auth/logout"
CALLBACK_PATH = "/admin/auth/callback"
STATE_COOKIE_PATH = "/admin/auth"
SESSION_COOKIE_PATH = "/admin"
# The actor charged for callback failures no subject is known for (one shared bucket).
_ANONYMOUS_LOGINS = Principal(agent_id="anonymous-console-logins", tenant_id="", roles=frozenset())
_PROVIDER_ERROR = re.compile(r"[a-z0-9_.-]{1,64}")
_TRANSPORT_ERRORS = (httpx2.HTTPError, ValueError)  # unreachable provider, bad status, a body that is not JSON


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """What the console needs from the settings (``admin.*``), built by ``cluster.serve``."""

    issuer: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    public_url: str | None = None  # external base URL; None derives it from each request
    session_ttl_s: float = 8 * 3600.0
    state_ttl_s: float = 600.0
    max_sessions: int = 10_000
    max_pending_logins: int = 10_000
    provider_timeout_s: float = 10.0


class MeOut(BaseModel):
    agent_id: str
    tenant_id: str
    roles: list[str]
    display_name: str
    subject: str
    expires_at: datetime


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL (an origin, as browsers send it), lower-cased."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class Console:
    """The console's login state on this head: the OIDC client, pending logins and sessions."""

    def __init__(self, config: ConsoleConfig, memesh: Memesh, clock: Clock = utc_now) -> None:
        self.config = config
        self.memesh = memesh
        self.clock = clock
        self.sessions = ConsoleSessions(config.session_ttl_s, config.max_sessions)
        self.pending = PendingLogins(config.state_ttl_s, config.max_pending_logins)
        public = config.public_url
        self.allowed_origins = frozenset({_origin(public)} if public else ())  # besides the request's own host
        issuer = config.issuer.rstrip("/")
        self.oauth: Any = OAuth().register(
            name="memesh-console",
            client_id=config.client_id,
            client_secret=config.client_secret,
            server_metadata_url=f"{issuer}/.well-known/openid-configuration",
            client_kwargs={
                "scope": "openid",
                "code_challenge_method": "S256",
                "timeout": config.provider_timeout_s,
                "follow_redirects": False,
            },
        )
        # Authlib logs the PKCE verifier at DEBUG: keep it out of the logs whatever server.log_level says.
        logging.getLogger("authlib.integrations.base_client").setLevel(logging.INFO)
        self.claims_options = {
            "iss": {"essential": True, "value": config.issuer},
            "aud": {"essential": True, "value": config.client_id},
            "sub": {"essential": True},
        }

    def base_url(self, request: Request) -> str:
        if self.config.public_url:
            return self.config.public_url.rstrip("/")
        return f"{request.url.scheme}://{request.url.netloc}"

    def secure(self, request: Request) -> bool:
        """Cookies are ``Secure`` when the console is reached over TLS."""
        return request.url.scheme == "https" or self.base_url(request).startswith("https://")

    async def begin(self, request: Request) -> tuple[str, str]:
        """The provider's authorize URL and the state; the login is kept pending on this head.

        Charged to the Admin bucket of the caller's address (RateLimited when empty); QuotaExceeded
        when the pending-login table is full: a flood cannot push other operators' logins out."""
        client = request.client.host if request.client else "unknown"
        self.memesh.charge_address(address_owner(client), Bucket.ADMIN)
        redirect_uri = self.base_url(request) + CALLBACK_PATH
        try:
            started = await self.oauth.create_authorization_url(redirect_uri)
        except (*_TRANSPORT_ERRORS, AuthlibBaseError) as exc:
            log.warning("the identity provider's discovery failed: %s", type(exc).__name__)
            raise Unavailable("the identity provider did not answer") from exc
        except RuntimeError as exc:  # Authlib: the discovery document names no authorize endpoint
            raise ConfigInvalid("the identity provider's discovery document has no authorization_endpoint") from exc
        state: str = started["state"]
        pending = PendingLogin(started["nonce"], started["code_verifier"], redirect_uri)
        self.pending.put(state, pending, self.clock(), owner=address_owner(client))
        return started["url"], state

    async def complete(self, request: Request) -> tuple[Principal, str]:
        """The principal and subject of a finished login, after its AuthSuccess row is durable.

        Raises ValidationFailed (state), Unauthorized (refused, invalid or
        unbound) or Unavailable (provider down), each after an AuthFailure row.
        """
        params = request.query_params
        client = request.client.host if request.client else "unknown"
        state, cookie = params.get("state"), request.cookies.get(STATE_COOKIE)
        if not state or not cookie or not hmac.compare_digest(state.encode(), cookie.encode()):
            await self._fail(
                None,
                "state_mismatch",
                ValidationFailed("the login state does not match: start again at " + LOGIN_PATH),
                client=client,
            )
        pending = self.pending.take(state, self.clock())
        if pending is None:
            await self._fail(
                None,
                "state_unknown",
                ValidationFailed("the login expired or was used: start again at " + LOGIN_PATH),
                client=client,
            )
        error = params.get("error")
        if error is not None:
            detail = {"provider_error": error if _PROVIDER_ERROR.fullmatch(error) else "other"}
            await self._fail(
                None, "provider_error", Unauthorized("the identity provider refused the login"), detail, client=client
            )
        code = params.get("code")
        if not code:
            await self._fail(None, "missing_code", ValidationFailed("the callback carries no authorization code"), client=client)
        subject = await self._verified_subject(pending, code, client)
        principal = await self.memesh.identity.principal_for_subject(subject)
        if principal is None:
            await self._fail(
                subject, "no_active_identity", Unauthorized("this subject has no active console identity"), client=client
            )
        await self.memesh.identity.record_login(subject, "ok", {"agent_id": principal.agent_id}, principal)
        return principal, subject

    async def _verified_subject(self, pending: PendingLogin, code: str, client: str) -> str:
        """Exchange the code (with the PKCE verifier) and validate the ID token; its ``sub``."""
        try:
            token = await self.oauth.fetch_access_token(
                redirect_uri=pending.redirect_uri, code=code, code_verifier=pending.code_verifier
            )
        except OAuthError as exc:
            reason = exc.error if isinstance(exc.error, str) and _PROVIDER_ERROR.fullmatch(exc.error) else "other"
            await self._fail(
                None,
                "token_refused",
                Unauthorized("the identity provider refused the code"),
                {"provider_error": reason},
                client=client,
            )
        except (*_TRANSPORT_ERRORS, AuthlibBaseError) as exc:
            log.warning("the token exchange failed: %s", type(exc).__name__)
            await self._fail(None, "provider_unavailable", Unavailable("the identity provider did not answer"), client=client)
        try:
            claims = await self.oauth.parse_id_token(token, nonce=pending.nonce, claims_options=self.claims_options)
        except httpx2.HTTPError as exc:  # the JWKS could not be fetched
            log.warning("the provider's JWKS could not be fetched: %s", type(exc).__name__)
            await self._fail(None, "provider_unavailable", Unavailable("the identity provider did not answer"), client=client)
        except (JoseError, ValueError, AuthlibBaseError) as exc:  # signature, claims, or a malformed token
            log.warning("an ID token was refused: %s", type(exc).__name__)
            await self._fail(None, "id_token_invalid", Unauthorized("the ID token is not valid"), client=client)
        subject = claims.get("sub") if claims is not None else None
        if not isinstance(subject, str) or not subject:
            await self._fail(None, "id_token_missing", Unauthorized("the provider sent no usable ID token"), client=client)
        return subject

    async def _fail(
        self, subject: str | None, reason: str, error: MemeshError, extra: dict[str, Any] | None = None, client: str = ""
    ) -> NoReturn:
        """Write the AuthFailure row, then raise ``error`` (RateLimited instead when anonymous failures flood:
        from this address, or from everywhere together)."""
        if subject is None:
            self.memesh.charge_address(address_owner(client or "unknown"), Bucket.AUTH_FAILURES)
            self.memesh.charge(_ANONYMOUS_LOGINS, Bucket.ADMIN)
        await self.memesh.identity.record_login(subject, "denied", {"reason": reason, **(extra or {})})
        raise error


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


ConsoleDep = Annotated[Console, Depends(_console)]
router = APIRouter(include_in_schema=False)

_LANDING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>memesh operator console</title></head>
<body><h1>memesh operator console</h1>
<p><a href="/admin/auth/login">Log in</a> with your identity provider.
Signed-in operators use <code>/admin/api/*</code>; <code>/admin/api/me</code> shows the session.</p>
<form method="post" action="/admin/auth/logout"><button type="submit">Log out</button></form>
</body></html>
"""


def _clear_state_cookie(response: Response, secure: bool) -> None:
    response.delete_cookie(STATE_COOKIE, path=STATE_COOKIE_PATH, secure=secure, httponly=True, samesite="lax")


@router.get("/admin")
async def landing() -> HTMLResponse:
    headers = {"Content-Security-Policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'"}
    return HTMLResponse(_LANDING, headers=headers)


@router.get(LOGIN_PATH)
async def login(request: Request, console: ConsoleDep) -> Response:
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
async def callback(request: Request, console: ConsoleDep) -> Response:
    secure = console.secure(request)
    try:
        principal, subject = await console.complete(request)
    except MemeshError as exc:
        failed = memesh_error_response(exc)
        _clear_state_cookie(failed, secure)
        return failed
    token, _ = console.sessions.open(principal.agent_id, subject, console.clock())
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
async def logout(request: Request, console: ConsoleDep) -> Response:
    """Drop the session server-side (a browser request from another origin is refused with 403). Open
    observatory streams of the session's operator check their session again at once, and close."""
    if cross_origin(request.scope, header_map(request.scope), console.allowed_origins):
        return error_response(403, ErrorCode.FORBIDDEN, "cross-origin request refused")
    token = request.cookies.get(SESSION_COOKIE)
    session = console.sessions.get(token, console.clock())
    console.sessions.drop(token, console.clock())
    if session is not None:
        console.memesh.identity.nudge(session.agent_id)
    response = Response(status_code=204)
    response.delete_cookie(
        SESSION_COOKIE, path=SESSION_COOKIE_PATH, secure=console.secure(request), httponly=True, samesite="lax"
    )
    return response


@router.get("/admin/api/me", response_model=MeOut)
async def me(request: Request, console: ConsoleDep) -> MeOut:
    principal: Principal = request.state.principal
    session: ConsoleSession = request.state.console_session
    agent = await console.memesh.identity.get(principal, principal.agent_id)
    return MeOut(
        agent_id=agent.id,
        tenant_id=agent.tenant_id,
        roles=sorted(r.value for r in agent.roles),
        display_name=agent.display_name,
        subject=session.subject,
        expires_at=session.expires_at,
    )


__all__ = ["CALLBACK_PATH", "LOGIN_PATH", "LOGOUT_PATH", "STATE_COOKIE", "Console", "ConsoleConfig", "MeOut", "router"]

"""The operator console's login state: OIDC Authorization-Code with PKCE (Authlib), server-side sessions.

:class:`Console` is, on this head, the OIDC client, the logins under way and
the console sessions (:mod:`mesh.console_sessions`); the routes that drive it
are :mod:`api.console.login`. Guarantees:

- A login starts (:meth:`Console.begin`) with PKCE (S256), a nonce and a
  state. The state also goes in a transient cookie (``STATE_COOKIE``); nonce
  and verifier stay on this head, keyed by the state. Starting a login is
  charged to the Admin bucket of the caller's address, and the table of
  logins under way is bounded (429 ``quota_exceeded`` beyond it).
- A login completes (:meth:`Console.complete`) only when the state parameter
  equals the cookie and names a pending login (taken once). The code is
  exchanged with the verifier; the ID token's signature (the provider's JWKS,
  from its discovery document), ``iss``, ``aud``, ``exp`` and ``nonce`` are
  checked by Authlib/joserfc; ``sub`` must resolve to an *active* agent.
  Success writes an AuthSuccess row. Any failure writes an AuthFailure row
  and raises ValidationFailed (state problems, 400), Unauthorized (a refused
  or unbound login, 401) or Unavailable (the provider does not answer, 503).
- Login does not require an admin role: a non-admin subject logs in and then
  gets 403 from the gate (:mod:`api.console.gate`).
- Nothing from the provider (code, tokens, ID token) is kept after the
  callback, logged or written to an audit row; the session cookie is an
  opaque random id, never a token.
- Callback failures before the provider vouched for a subject (a forged
  state, a provider error) are charged to the address's AuthFailures bucket
  and to one shared Admin bucket, so unauthenticated clients cannot grow the
  audit log faster than the Admin rate (429 beyond it).
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx2  # the HTTP client Authlib uses (its httpx fallback is deprecated)
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import OAuthError
from authlib.integrations.starlette_client import OAuth
from fastapi import Request
from joserfc.errors import JoseError

from api.console.store import ConsoleStore
from head.clock import utc_now
from head.facade import Bucket, Memesh
from mesh.console_sessions import PendingLogin, address_owner
from mesh.errors import ConfigInvalid, MemeshError, Unauthorized, Unavailable, ValidationFailed
from mesh.identity import Principal
from mesh.ids import Clock

log = logging.getLogger(__name__)

STATE_COOKIE = "service_admin_login_state"
LOGIN_PATH = "/admin/auth/login"
CALLBACK_PATH = "/admin/auth/callback"
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


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL (an origin, as browsers send it), lower-cased."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class Console:
    """The console's login state: the OIDC client on this head; pending logins and sessions in the
    deployment's ConsoleState actor, so any head completes a login and serves a session."""

    def __init__(self, config: ConsoleConfig, memesh: Memesh, clock: Clock = utc_now) -> None:
        self.config = config
        self.memesh = memesh
        self.clock = clock
        self.sessions = ConsoleStore(memesh.directory)  # shared by every head (the ConsoleState actor)
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
        await self.sessions.put_login(state, pending, self.clock(), address_owner(client))
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
        pending = await self.sessions.take_login(state, self.clock())
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
        if not isinstance(token, dict) or not isinstance(token.get("id_token"), str):  # Authlib fails on it with a TypeError
            await self._fail(None, "id_token_missing", Unauthorized("the provider sent no usable ID token"), client=client)
        try:
            claims = await self.oauth.parse_id_token(token, nonce=pending.nonce, claims_options=self.claims_options)
        except httpx2.HTTPError as exc:  # the JWKS could not be fetched
            log.warning("the provider's JWKS could not be fetched: %s", type(exc).__name__)
            await self._fail(None, "provider_unavailable", Unavailable("the identity provider did not answer"), client=client)
        except (JoseError, ValueError, TypeError, AuthlibBaseError) as exc:  # signature, claims, or a malformed token
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


__all__ = ["CALLBACK_PATH", "LOGIN_PATH", "STATE_COOKIE", "Console", "ConsoleConfig"]

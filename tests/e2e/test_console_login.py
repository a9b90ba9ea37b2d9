"""The operator console login against a real OpenID provider (oidc-provider on loopback).

``memesh serve`` runs as a subprocess with the console on; a headless client
walks the provider's login and consent pages (tests/servers.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import closing
from http.cookies import SimpleCookie
from typing import Any

import httpx
import pytest

from tests.servers import (
    BOOTSTRAP_SUBJECT,
    OIDC_CLIENT_SECRET,
    OidcProvider,
    Server,
    assert_envelope,
    audit_rows,
    console_login,
    console_login_steps,
)


def _cookies(response: httpx.Response) -> dict[str, Any]:
    """The Set-Cookie headers of ``response``, parsed: name -> morsel."""
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        jar.load(header)
    return dict(jar)


def _login_rows(server: Server, subject: str) -> list[tuple[str, str]]:
    return [(r["kind"], r["outcome"]) for r in audit_rows(server) if r["target"] == subject and r["kind"].startswith("Auth")]


def test_the_bootstrap_operator_logs_in(admin_server: Server, oidc_provider: OidcProvider) -> None:
    steps = console_login_steps(admin_server.base_url, oidc_provider, BOOTSTRAP_SUBJECT)
    assert steps.callback.status_code == 302 and steps.callback.headers["location"] == "/admin"
    with closing(steps.client) as http:
        me = http.get("/admin/api/me")
        assert me.status_code == 200, me.text
        body = me.json()
        assert set(body) == {"agent_id", "tenant_id", "roles", "display_name", "subject", "expires_at"}
        assert body["roles"] == ["ServiceAdmin"] and body["tenant_id"] == "system"
        assert body["subject"] == BOOTSTRAP_SUBJECT and body["display_name"] == "bootstrap-operator"
        landing = http.get("/admin")
        assert landing.status_code == 200 and "text/html" in landing.headers["content-type"]
    assert ("AuthSuccess", "ok") in _login_rows(admin_server, BOOTSTRAP_SUBJECT)


def test_cookie_attributes_over_plain_http(admin_server: Server, oidc_provider: OidcProvider) -> None:
    steps = console_login_steps(admin_server.base_url, oidc_provider, BOOTSTRAP_SUBJECT)
    state = _cookies(steps.login)["service_admin_login_state"]
    assert state["httponly"] and state["samesite"].lower() == "lax" and not state["secure"]
    assert state["path"] == "/admin/auth" and int(state["max-age"]) == 600
    session = _cookies(steps.callback)["service_admin_session"]
    assert session["httponly"] and session["samesite"].lower() == "lax" and not session["secure"]
    assert session["path"] == "/admin"
    assert len(session.value) >= 43 and "." not in session.value  # an opaque random id, not a JWT
    cleared = _cookies(steps.callback)["service_admin_login_state"]
    assert cleared["max-age"] == "0"
    steps.client.close()


def test_logout_drops_the_session_server_side(admin_server: Server, oidc_provider: OidcProvider) -> None:
    http = console_login(admin_server.base_url, oidc_provider, BOOTSTRAP_SUBJECT)
    token = http.cookies["service_admin_session"]
    assert http.get("/admin/api/me").status_code == 200
    out = http.post("/admin/auth/logout")
    assert out.status_code == 204
    assert _cookies(out)["service_admin_session"]["max-age"] == "0"
    http.close()
    with httpx.Client(base_url=admin_server.base_url, cookies={"service_admin_session": token}) as replay:
        assert_envelope(replay.get("/admin/api/me"), 401, "unauthorized")  # the old cookie, replayed
        assert replay.post("/admin/auth/logout").status_code == 204  # idempotent


def test_no_session_is_401_even_with_a_malformed_body(admin_server: Server) -> None:
    with admin_server.http() as anon:
        assert_envelope(anon.get("/admin/api/me"), 401, "unauthorized")
        bad = anon.post("/admin/api/agents", content=b"{{{", headers={"content-type": "text/plain"})
        assert_envelope(bad, 401, "unauthorized")
        forged = anon.post("/admin/api/agents", content=b"{{{", headers={"cookie": "service_admin_session=made-up"})
        assert_envelope(forged, 401, "unauthorized")
    key = admin_server.key_file.read_text().strip()
    with admin_server.http(key) as keyed:  # an API key does not open the console
        assert_envelope(keyed.get("/admin/api/me"), 401, "unauthorized")


def test_a_writer_logs_in_but_is_forbidden(admin_server: Server, oidc_provider: OidcProvider) -> None:
    subject = f"writer-{uuid.uuid4().hex[:8]}"
    admin_server.issue("acme", "Writer", "console-writer", "--oidc-subject", subject)
    with closing(console_login(admin_server.base_url, oidc_provider, subject)) as http:
        assert_envelope(http.get("/admin/api/me"), 403, "forbidden")
        assert_envelope(http.post("/admin/api/agents", content=b"{{{", headers={"content-type": "text/plain"}), 403, "forbidden")
    assert ("AuthSuccess", "ok") in _login_rows(admin_server, subject)


def test_revoking_the_agent_ends_its_console_session(admin_server: Server, oidc_provider: OidcProvider) -> None:
    subject = f"pa-{uuid.uuid4().hex[:8]}"
    agent = admin_server.issue("acme", "ProjectAdmin", "console-pa", "--oidc-subject", subject)
    with closing(console_login(admin_server.base_url, oidc_provider, subject)) as http:
        me = http.get("/admin/api/me").json()
        assert me["agent_id"] == agent["agent_id"] and me["roles"] == ["ProjectAdmin"] and me["tenant_id"] == "acme"
        admin_server.admin("agents", "revoke", agent["agent_id"])
        assert_envelope(http.get("/admin/api/me"), 401, "unauthorized")
    failed = console_login_steps(admin_server.base_url, oidc_provider, subject)  # and it cannot log in again
    assert_envelope(failed.callback, 401, "unauthorized")
    failed.client.close()
    assert _login_rows(admin_server, subject)[-1] == ("AuthFailure", "denied")


def test_an_unbound_subject_is_refused_and_audited(admin_server: Server, oidc_provider: OidcProvider) -> None:
    subject = f"stranger-{uuid.uuid4().hex[:8]}"
    steps = console_login_steps(admin_server.base_url, oidc_provider, subject)
    assert_envelope(steps.callback, 401, "unauthorized")
    assert "service_admin_session" not in _cookies(steps.callback)
    assert _cookies(steps.callback)["service_admin_login_state"]["max-age"] == "0"
    assert_envelope(steps.client.get("/admin/api/me"), 401, "unauthorized")
    steps.client.close()
    (row,) = [r for r in audit_rows(admin_server) if r["target"] == subject]
    assert (row["kind"], row["actor_agent"], row["outcome"]) == ("AuthFailure", subject, "denied")
    assert json.loads(row["detail"]) == {"method": "oidc", "reason": "no_active_identity"}


def test_a_forged_or_mismatched_state_is_400_and_creates_nothing(admin_server: Server, oidc_provider: OidcProvider) -> None:
    before = len(audit_rows(admin_server))
    with httpx.Client(base_url=admin_server.base_url, timeout=30) as http:
        assert_envelope(http.get("/admin/auth/callback", params={"code": "c", "state": "forged"}), 400, "validation")
        begun = http.get("/admin/auth/login")  # a real pending login: its state is in the cookie
        assert begun.status_code == 302
        wrong_state = "not-" + begun.cookies["service_admin_login_state"]
        mismatched = http.get("/admin/auth/callback", params={"code": "c", "state": wrong_state})
        assert_envelope(mismatched, 400, "validation")
        assert "service_admin_session" not in _cookies(mismatched)
        assert_envelope(http.get("/admin/api/me"), 401, "unauthorized")
    rows = audit_rows(admin_server)[before:]
    assert [(r["kind"], r["outcome"]) for r in rows] == [("AuthFailure", "denied")] * 2
    assert all(json.loads(r["detail"])["reason"] == "state_mismatch" for r in rows)
    assert all(r["kind"] != "AgentIssued" and r["kind"] != "SubjectBound" for r in rows)


def test_audit_rows_hold_no_secrets_and_the_chain_holds(admin_server: Server, oidc_provider: OidcProvider) -> None:
    steps = console_login_steps(admin_server.base_url, oidc_provider, BOOTSTRAP_SUBJECT)
    session = steps.client.cookies["service_admin_session"]
    code = httpx.URL(str(steps.callback.request.url)).params["code"]
    steps.client.close()
    kinds = {r["kind"] for r in audit_rows(admin_server)}
    assert {"AuthSuccess", "AuthFailure", "SubjectBound"} <= kinds
    stored = json.dumps(audit_rows(admin_server))
    for secret in (session, code, OIDC_CLIENT_SECRET):
        assert secret not in stored
        assert secret not in admin_server.output()
    assert json.loads(admin_server.admin("audit", "verify").stdout)["ok"] is True


@pytest.fixture(scope="module")
def limited_server(ray_address: str, tmp_path_factory: pytest.TempPathFactory, oidc_provider: OidcProvider) -> Iterator[Server]:
    """A console server whose Admin bucket holds 3 tokens and refills slowly."""
    env = {**oidc_provider.console_env(), "MEMESH_RATE_LIMITS__ADMIN__RATE": "0.01", "MEMESH_RATE_LIMITS__ADMIN__BURST": "3"}
    srv = Server(tmp_path_factory.mktemp("console-limited") / "data", ray_address, "hash", env).start()
    yield srv
    srv.stop()


def test_the_admin_bucket_gives_429_with_retry_after(limited_server: Server, oidc_provider: OidcProvider) -> None:
    with closing(console_login(limited_server.base_url, oidc_provider, BOOTSTRAP_SUBJECT)) as http:
        for _ in range(3):  # a path no route serves still passes the gate and is charged
            assert_envelope(http.get("/admin/api/no-such-route"), 404, "not_found")
        limited = http.get("/admin/api/no-such-route")
        assert_envelope(limited, 429, "rate_limited")
        assert int(limited.headers["retry-after"]) >= 1
        for _ in range(5):
            assert http.get("/admin/api/me").status_code == 200  # never charged


def test_a_refused_token_exchange_is_401_and_audited(
    ray_address: str, tmp_path_factory: pytest.TempPathFactory, oidc_provider: OidcProvider
) -> None:
    """A server holding the wrong client secret: the provider refuses the code exchange."""
    env = {**oidc_provider.console_env(), "MEMESH_ADMIN__OIDC_CLIENT_SECRET": "not-the-secret"}
    srv = Server(tmp_path_factory.mktemp("console-wrong-secret") / "data", ray_address, "hash", env).start()
    try:
        steps = console_login_steps(srv.base_url, oidc_provider, BOOTSTRAP_SUBJECT)
        assert_envelope(steps.callback, 401, "unauthorized")
        assert "service_admin_session" not in _cookies(steps.callback)
        steps.client.close()
        (row,) = [r for r in audit_rows(srv) if r["kind"] == "AuthFailure"]
        assert json.loads(row["detail"]) == {"method": "oidc", "reason": "token_refused", "provider_error": "invalid_client"}
        assert "not-the-secret" not in srv.output() and "not-the-secret" not in json.dumps(audit_rows(srv))
    finally:
        srv.stop()

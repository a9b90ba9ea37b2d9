"""The operator REST API over a running server, logged in through a real OpenID provider.

Agents (keyset pages, lifecycle, tenant rules with their audit rows),
descriptors (A2A current and older shapes, signed and verified, ACP), erase
with a verifiable certificate, node delete, reembed (409 for a second), and no
plaintext secret anywhere but the issue and rotate answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey

from head.erasure_signing import verify_receipt
from tests.servers import BOOTSTRAP_SUBJECT, OidcProvider, Server, assert_envelope, audit_rows, console_login
from tests.unit.test_descriptors import fixture, jwks_of, sign_card

SECRET_PREFIX = "msh_"


class Recorder:
    """Every admin answer this test received, so the secret check can read them all afterwards."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, str]] = []  # (method and path, body)

    def hook(self, response: httpx.Response) -> None:
        response.read()
        self.answers.append((f"{response.request.method} {response.request.url.path}", response.text))


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def root(admin_server: Server, oidc_provider: OidcProvider, recorder: Recorder) -> Iterator[httpx.Client]:
    client = console_login(admin_server.base_url, oidc_provider, BOOTSTRAP_SUBJECT)
    client.event_hooks["response"].append(recorder.hook)
    with closing(client):
        yield client


def issue(http: httpx.Client, tenant: str, role: str, name: str, **extra: Any) -> dict[str, Any]:
    body = {"display_name": name, "tenant_id": tenant, "credential_kind": "api_key_hash", "roles": [role], **extra}
    response = http.post("/admin/api/agents", json=body)
    assert response.status_code == 200, response.text
    issued: dict[str, Any] = response.json()
    assert set(issued) == {"agent_id", "plaintext_secret"} and issued["plaintext_secret"].startswith(SECRET_PREFIX)
    return issued


def denials(server: Server, actor: str) -> list[tuple[str, str]]:
    return [(r["kind"], r["target"]) for r in audit_rows(server) if r["actor_agent"] == actor and r["outcome"] == "denied"]


def test_agents_pages_lifecycle_and_tenant_rules(
    admin_server: Server, oidc_provider: OidcProvider, root: httpx.Client, recorder: Recorder
) -> None:
    issued = [issue(root, "page-co", "Writer", f"w{n}") for n in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(50):
        page = root.get("/admin/api/agents", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["agents"]) <= 2 and all("plaintext_secret" not in a and "key_hash" not in a for a in body["agents"])
        seen += [a["agent_id"] for a in body["agents"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) and {i["agent_id"] for i in issued} <= set(seen)
    assert_envelope(root.get("/admin/api/agents", params={"cursor": "not-a-cursor"}), 400, "validation")
    assert_envelope(
        root.post("/admin/api/agents", json={"display_name": "x" * 65, "tenant_id": "t", "roles": ["Writer"]}), 400, "validation"
    )
    wrong_kind = {"display_name": "x", "tenant_id": "t", "credential_kind": "password", "roles": ["Writer"]}
    assert_envelope(root.post("/admin/api/agents", json=wrong_kind), 400, "validation")
    assert_envelope(root.post("/admin/api/agents", json={"display_name": "x", "tenant_id": "t"}), 422, "validation")

    # Lifecycle: each change holds on the very next data-plane request.
    target = issued[0]
    with admin_server.http(target["plaintext_secret"]) as agent:
        assert agent.post("/v1/sessions", json={"project_id": "p"}).status_code == 200
        assert root.post(f"/admin/api/agents/{target['agent_id']}/suspend").status_code == 204
        assert_envelope(agent.post("/v1/sessions", json={"project_id": "p"}), 401, "unauthorized")
        assert root.post(f"/admin/api/agents/{target['agent_id']}/reinstate").status_code == 204
        assert agent.post("/v1/sessions", json={"project_id": "p"}).status_code == 200
    rotated = root.post(f"/admin/api/agents/{target['agent_id']}/rotate")
    assert rotated.status_code == 200 and rotated.json()["agent_id"] == target["agent_id"]
    with admin_server.http(target["plaintext_secret"]) as old:
        assert_envelope(old.post("/v1/sessions", json={"project_id": "p"}), 401, "unauthorized")
    assert root.post(f"/admin/api/agents/{target['agent_id']}/revoke").status_code == 204
    record = root.get(f"/admin/api/agents/{target['agent_id']}").json()
    assert record["status"] == "revoked" and record["tenant_id"] == "page-co" and record["roles"] == ["Writer"]
    assert_envelope(root.get("/admin/api/agents/00000000-0000-7000-8000-00000000ffff"), 404, "not_found")

    # A ProjectAdmin of tenant-a, logged in with its own OIDC subject.
    project_admin = issue(root, "tenant-a", "ProjectAdmin", "alice", oidc_subject="alice@tenant-a")
    own = issue(root, "tenant-a", "Writer", "a-writer")
    foreign = issue(root, "tenant-b", "Writer", "b-writer")
    alice = console_login(admin_server.base_url, oidc_provider, "alice@tenant-a")
    alice.event_hooks["response"].append(recorder.hook)
    with closing(alice):
        listed = [a["tenant_id"] for a in alice.get("/admin/api/agents", params={"limit": 500}).json()["agents"]]
        assert listed and set(listed) == {"tenant-a"}
        assert alice.get(f"/admin/api/agents/{own['agent_id']}").status_code == 200
        assert_envelope(alice.get(f"/admin/api/agents/{foreign['agent_id']}"), 404, "not_found")  # as if missing
        assert_envelope(alice.post(f"/admin/api/agents/{foreign['agent_id']}/revoke"), 403, "forbidden")
        assert_envelope(alice.post(f"/admin/api/agents/{foreign['agent_id']}/rotate"), 403, "forbidden")
        cross = {"display_name": "intruder", "tenant_id": "tenant-b", "roles": ["Writer"]}
        assert_envelope(alice.post("/admin/api/agents", json=cross), 403, "forbidden")
        assert_envelope(alice.post("/admin/api/reembed"), 403, "forbidden")
        erase_b = {
            "scope": {"kind": "agent", "id": foreign["agent_id"]},
            "confirm": f"agent:{foreign['agent_id']}",
            "dry_run": True,
        }
        assert_envelope(alice.post("/admin/api/erase", json=erase_b), 403, "forbidden")
        assert alice.post(f"/admin/api/agents/{own['agent_id']}/suspend").status_code == 204
    assert root.get(f"/admin/api/agents/{foreign['agent_id']}").json()["status"] == "active"  # nothing was dispatched
    assert denials(admin_server, project_admin["agent_id"]) == [
        ("AuthzDenied", foreign["agent_id"]),
        ("AuthzDenied", foreign["agent_id"]),
        ("AuthzDenied", "tenant-b"),
        ("AuthzDenied", "reembed"),
        ("AuthzDenied", f"agent:{foreign['agent_id']}"),
    ]
    # A Writer's subject may log in, but the role gate refuses it (and says so in the audit chain).
    writer = issue(root, "tenant-a", "Writer", "bob", oidc_subject="bob@tenant-a")
    with closing(console_login(admin_server.base_url, oidc_provider, "bob@tenant-a")) as bob:
        assert_envelope(bob.get("/admin/api/agents"), 403, "forbidden")
    assert denials(admin_server, writer["agent_id"]) == [("AuthzDenied", "/admin/api/agents")]


def test_descriptors_are_set_imported_and_verified(admin_server: Server, root: httpx.Client) -> None:
    agent = issue(root, "card-co", "Writer", "planner")["agent_id"]
    path = f"/admin/api/agents/{agent}/descriptor"
    assert_envelope(root.get(path), 404, "not_found")
    put = root.put(path, json={"name": "planner", "description": "plans sprints", "skills": [{"id": "plan", "name": "Plan"}]})
    assert put.status_code == 200, put.text
    assert put.json()["origin"]["card_shape"] == "manual" and root.get(path).json()["description"] == "plans sprints"

    key = ECKey.generate_key("P-256")
    card = sign_card(fixture("a2a_v1_card"), key, "ES256", "card-key")
    body = {"format": "a2a", "document": card, "verification_jwks": jwks_of((key, "card-key")), "provider": "registry"}
    first = root.post(f"{path}/import", json=body)
    assert first.status_code == 200, first.text
    origin = first.json()["origin"]
    assert origin["card_shape"] == "a2a-v1" and origin["signature"]["kid"] == "card-key" and origin["provider"] == "registry"
    again = root.post(f"{path}/import", json=body)
    assert again.json() == first.json()  # idempotent
    imports = [r for r in audit_rows(admin_server) if r["kind"] == "DescriptorImport" and r["target"] == agent]
    assert len(imports) == 1

    tampered = {**body, "document": {**card, "description": "now does something else"}}
    assert_envelope(root.post(f"{path}/import", json=tampered), 400, "validation")  # fail-closed
    unsigned_jwks = {**body, "verification_jwks": None}
    assert_envelope(root.post(f"{path}/import", json=unsigned_jwks), 400, "validation")
    assert root.get(path).json() == first.json()

    older = root.post(f"{path}/import", json={"format": "a2a", "document": fixture("a2a_v03_card")})
    assert older.status_code == 200 and older.json()["origin"]["card_shape"] == "a2a-v0.3"
    acp = root.post(f"{path}/import", json={"format": "acp", "document": fixture("acp_manifest")})
    assert acp.status_code == 200 and acp.json()["origin"]["card_shape"] == "acp-manifest"
    assert_envelope(root.post(f"{path}/import", json={"format": "a2a", "document": {"name": 3}}), 400, "validation")
    assert_envelope(root.post(f"{path}/import", json={"format": "pdf", "document": {}}), 400, "validation")


def test_erase_node_delete_and_reembed(admin_server: Server, root: httpx.Client) -> None:
    listener = issue(root, "erase-co", "Reader", "listener")["plaintext_secret"]
    writer = issue(root, "erase-co", "Writer", "writer")["plaintext_secret"]
    neighbour = issue(root, "other-co", "Writer", "neighbour")["plaintext_secret"]
    with admin_server.http(listener) as http:
        assert http.post("/v1/beacons", json={"interest": "ledger reconciliation failures"}).status_code == 200
    with admin_server.http(writer) as http:
        doomed = http.post(
            "/v1/cells",
            json={
                "content": "ledger reconciliation failures in alpha",
                "cell_type": "Risk",
                "salience": 0.9,
                "project_id": "alpha",
            },
        ).json()
        kept = http.post(
            "/v1/cells",
            json={
                "content": "ledger reconciliation failures in beta",
                "cell_type": "Risk",
                "salience": 0.9,
                "project_id": "beta",
            },
        ).json()
    with admin_server.http(neighbour) as http:
        assert (
            http.post(
                "/v1/cells", json={"content": "ledger reconciliation failures", "cell_type": "Risk", "project_id": "alpha"}
            ).status_code
            == 201
        )
    deadline = time.monotonic() + 60
    with admin_server.http(listener) as http:
        while len(http.post("/v1/inbox:pull", json={}).json()["items"]) < 2:
            assert time.monotonic() < deadline, "the two deliveries never reached the listener"
            time.sleep(0.1)

    scope = {"kind": "project", "id": "alpha", "tenant_id": "erase-co"}
    mismatch = root.post("/admin/api/erase", json={"scope": scope, "confirm": "project:beta", "dry_run": False})
    assert_envelope(mismatch, 400, "validation")
    assert any(r["kind"] == "Denied" and r["target"] == "project:alpha" for r in audit_rows(admin_server))
    dry = root.post("/admin/api/erase", json={"scope": scope, "confirm": "project:alpha", "dry_run": True}).json()
    assert dry["digest"] is None and dry["nodes_removed"] >= 1 and dry["deliveries_removed"] == 1
    cert = root.post("/admin/api/erase", json={"scope": scope, "confirm": "project:alpha", "dry_run": False})
    assert cert.status_code == 200, cert.text
    certificate = cert.json()
    keys = httpx.get(f"{admin_server.base_url}/.well-known/memesh-erasure-keys.json").json()
    assert verify_receipt(certificate["digest"], keys)["counts"] == {k: v for k, v in certificate.items() if k != "digest"}

    def texts(key: str, query: str = "ledger reconciliation failures") -> list[str]:
        with admin_server.http(key) as http:
            return [n["content"] for n in http.post("/v1/query", json={"text": query, "k": 10}).json()]

    assert texts(writer) == ["ledger reconciliation failures in beta"]
    assert texts(neighbour) == ["ledger reconciliation failures"]
    with admin_server.http(listener) as http:
        items = http.post("/v1/inbox:pull", json={"since": 0}).json()["items"]
    assert [i["diff"]["cell_id"] for i in items] == [kept["id"]]
    with admin_server.http(writer) as http:
        assert_envelope(http.get(f"/v1/scenes/{doomed['scene_id']}"), 404, "not_found")

    assert root.post(f"/admin/api/nodes/{kept['id']}/delete", json={"reason": "retention"}).status_code == 204
    assert root.post(f"/admin/api/nodes/{kept['id']}/delete").status_code == 204  # a no-op
    assert texts(writer) == []
    assert_envelope(root.post(f"/admin/api/nodes/{kept['id']}/delete", json={"reason": "boredom"}), 400, "validation")
    assert_envelope(root.post("/admin/api/nodes/not-a-uuid/delete"), 400, "validation")

    with admin_server.http(writer) as http:  # enough cells that the job is still running for the second request
        batch = [{"content": f"Reconcile ledger shard {n} before the nightly close.", "cell_type": "Fact"} for n in range(512)]
        for start in range(0, 512, 64):
            assert http.post("/v1/cells:batch", json={"cells": batch[start : start + 64]}).status_code == 201

    async def two_starts() -> tuple[httpx.Response, httpx.Response, list[str]]:
        cookies = {"service_admin_session": root.cookies["service_admin_session"]}
        async with httpx.AsyncClient(base_url=admin_server.base_url, cookies=cookies, timeout=30) as http:
            first, second = await asyncio.gather(http.post("/admin/api/reembed"), http.post("/admin/api/reembed"))
            return first, second, texts(writer, "Reconcile ledger shard 7 before the nightly close.")

    first, second, during = asyncio.run(two_starts())
    assert sorted([first.status_code, second.status_code]) == [200, 409]
    assert_envelope(second if second.status_code == 409 else first, 409, "conflict")
    assert during[0] == "Reconcile ledger shard 7 before the nightly close."  # recall keeps answering
    job_id = (first if first.status_code == 200 else second).json()["job_id"]
    deadline = time.monotonic() + 60
    while (state := root.get(f"/admin/api/jobs/{job_id}").json())["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state["status"] == "succeeded" and state["nodes_processed"] == state["nodes_total"] >= 256
    assert (
        texts(writer, "Reconcile ledger shard 7 before the nightly close.")[0]
        == "Reconcile ledger shard 7 before the nightly close."
    )
    assert_envelope(root.get("/admin/api/jobs/00000000-0000-7000-8000-00000000ffff"), 404, "not_found")


def test_no_plaintext_secret_outside_issue_and_rotate(admin_server: Server, root: httpx.Client, recorder: Recorder) -> None:
    """Runs last in this module: every admin answer so far, the server log and every audit row."""
    issued = issue(root, "secret-co", "Writer", "keeper")
    rotated = root.post(f"/admin/api/agents/{issued['agent_id']}/rotate").json()
    secrets = {issued["plaintext_secret"], rotated["plaintext_secret"]}
    minted = [body for where, body in recorder.answers if _mints(where) and "plaintext_secret" in body]
    secrets |= {json.loads(body)["plaintext_secret"] for body in minted}
    assert len(secrets) >= 2
    elsewhere = [(where, body) for where, body in recorder.answers if not _mints(where)]
    assert elsewhere and not any(s in body for s in secrets for _, body in elsewhere)
    assert not any(SECRET_PREFIX in body for _, body in elsewhere)
    log = admin_server.output()
    assert not any(s in log for s in secrets) and SECRET_PREFIX not in log
    rows = json.dumps(audit_rows(admin_server), default=str)
    assert not any(s in rows for s in secrets) and SECRET_PREFIX not in rows
    key_file = Path(admin_server.key_file).read_text().strip()
    assert key_file not in log and key_file not in rows


def _mints(where: str) -> bool:
    """Issue and rotate: the only answers allowed to carry a plaintext secret."""
    method, path = where.split(" ", 1)
    return method == "POST" and (path == "/admin/api/agents" or path.endswith("/rotate"))

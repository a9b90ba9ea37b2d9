"""An agent and an operator using a running server, with the real model."""

from __future__ import annotations

import json
import stat
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from memesh_proto import admin_pb2, admin_pb2_grpc
from tests.servers import Server, assert_envelope

MEMORIES = [
    "The payment service retries a declined card charge three times before giving up.",
    "Office plants are watered every Monday morning by the facilities team.",
    "Our logo uses a teal colour with a rounded sans-serif typeface.",
    "The quarterly all-hands meeting takes place in the large auditorium.",
]


def test_bootstrap_key_is_private_and_only_its_path_is_printed(server: Server) -> None:
    mode = stat.S_IMODE(server.key_file.stat().st_mode)
    assert mode == 0o600
    key = server.key_file.read_text().strip()
    assert key.startswith("msh_")
    assert str(server.key_file.name) in server.output()
    assert key not in server.output()


def test_an_agent_writes_and_recalls_by_meaning(server: Server) -> None:
    agent = server.issue("acme", "Writer", "payments-bot")
    assert set(agent) == {"agent_id", "plaintext_secret"}
    with server.http(agent["plaintext_secret"]) as http:
        written = http.post("/v1/cells:batch", json={"cells": [{"content": m, "cell_type": "Fact"} for m in MEMORIES]})
        assert written.status_code == 201, written.text
        assert all(n["source_agent"] == agent["agent_id"] for n in written.json())
        question = {"text": "How many times do we attempt a rejected credit card payment again?", "k": 4}
        for path in ("/v1/recall", "/v1/query"):
            ranked = http.post(path, json=question).json()
            assert ranked[0]["content"] == MEMORIES[0], [n["content"] for n in ranked]
        scene_id = written.json()[0]["scene_id"]
        scene = http.get(f"/v1/scenes/{scene_id}").json()
        assert scene["tenant_id"] == "acme" and len(scene["centroid"]) == 384
        session = http.post("/v1/sessions", json={"project_id": "billing"}).json()["session_id"]
        cell = http.post(
            "/v1/cells", json={"content": "Refunds settle in five days.", "cell_type": "Fact", "session_id": session}
        )
        assert cell.json()["node_type"]["Cell"]["project_id"] == "billing"
        assert http.delete(f"/v1/sessions/{session}").json() == {"ok": True}


def test_another_tenant_sees_nothing(server: Server) -> None:
    owner = server.issue("tenant-a", "Writer", "owner")["plaintext_secret"]
    stranger = server.issue("tenant-b", "Writer", "stranger")["plaintext_secret"]
    with server.http(owner) as http:
        node = http.post("/v1/cells", json={"content": "Tenant A's launch code is under the mat.", "cell_type": "Fact"}).json()
    with server.http(stranger) as http:
        probe = {"text": "launch code under the mat", "k": 50}
        assert http.post("/v1/recall", json=probe).json() == []
        assert http.post("/v1/query", json={**probe, "filter": {"tenant_id": "tenant-a"}}).json() == []
        assert_envelope(http.get(f"/v1/scenes/{node['scene_id']}"), 404, "not_found")


def test_every_error_case_over_real_sockets(server: Server) -> None:
    writer = server.issue("errs", "Writer", "w")["plaintext_secret"]
    reader = server.issue("errs", "Reader", "r")["plaintext_secret"]
    with server.http() as anon:
        assert_envelope(anon.post("/v1/query", json={"text": "x", "k": 1}), 401, "unauthorized")
        assert_envelope(anon.post("/v1/cells", content=b"{{{", headers={"content-type": "text/plain"}), 401, "unauthorized")
        assert anon.get("/healthz").json()["status"] == "ok"
        doc = anon.get("/openapi.json").json()
        assert doc["openapi"] == "3.0.3" and all(p.startswith("/v1/") for p in doc["paths"])
    with server.http(reader) as http:
        assert_envelope(http.post("/v1/cells", json={"content": "x", "cell_type": "Fact"}), 403, "forbidden")
    with server.http(writer) as http:
        assert_envelope(http.post("/v1/query", content=b"k=1", headers={"content-type": "text/plain"}), 415, "validation")
        assert_envelope(http.post("/v1/query", content=b"{", headers={"content-type": "application/json"}), 400, "validation")
        assert_envelope(http.post("/v1/query", json={"text": "x", "k": 0}), 400, "validation")
        assert_envelope(http.post("/v1/query", json={"text": "x", "k": "many"}), 422, "validation")
        assert_envelope(http.post("/v1/cells", json={"cell_type": "Fact"}), 422, "validation")
        assert_envelope(http.post("/v1/recall", json={"embedding": [1.0, 2.0], "k": 1}), 400, "dimension_mismatch")
        assert_envelope(http.get("/v1/scenes/01a2040c-0000-7000-8000-000000000000"), 404, "not_found")
        assert_envelope(http.delete("/v1/sessions/01a2040c-0000-7000-8000-000000000000"), 404, "not_found")
        # This server's Read bucket holds 60 tokens and refills at 20/s: 200 queries from 20 threads at once
        # empty it however slow each answer is (one after another at 50 ms each, it refills as they go).
        with ThreadPoolExecutor(20) as pool:
            responses = list(pool.map(lambda _: http.post("/v1/query", json={"embedding": [0.05] * 384, "k": 1}), range(200)))
        assert {r.status_code for r in responses} <= {200, 429}, [r.text for r in responses if r.status_code not in (200, 429)]
        limited = next((r for r in responses if r.status_code == 429), None)
        assert limited is not None, "the Read bucket never refused"
        assert_envelope(limited, 429, "rate_limited")
        assert int(limited.headers["retry-after"]) >= 1


def test_operator_lifecycle_with_the_cli(server: Server) -> None:
    issued = server.issue("ops", "Writer", "lifecycle")
    agent_id, key = issued["agent_id"], issued["plaintext_secret"]
    record = json.loads(server.admin("agents", "get", agent_id).stdout)
    assert json.loads(server.admin("agents", "get", agent_id.upper()).stdout) == record  # any spelling of the UUID
    assert record["status"] == "active" and record["roles"] == ["Writer"] and record["tenant_id"] == "ops"
    assert "plaintext_secret" not in record and "key_hash" not in json.dumps(record)
    listed = json.loads(server.admin("agents", "list", "--limit", "500").stdout)
    assert agent_id in {a["agent_id"] for a in listed["agents"]}

    def status(k: str) -> int:
        with server.http(k) as http:
            return http.post("/v1/query", json={"embedding": [0.1] * 384, "k": 1}).status_code

    assert status(key) == 200
    server.admin("agents", "suspend", agent_id)
    assert status(key) == 401
    server.admin("agents", "reinstate", agent_id)
    assert status(key) == 200
    rotated = json.loads(server.admin("agents", "rotate", agent_id).stdout)
    assert rotated["agent_id"] == agent_id and rotated["plaintext_secret"] != key
    assert status(key) == 401 and status(rotated["plaintext_secret"]) == 200
    server.admin("agents", "revoke", agent_id)
    assert status(rotated["plaintext_secret"]) == 401
    assert json.loads(server.admin("agents", "get", agent_id).stdout)["status"] == "revoked"
    again = server.admin("agents", "reinstate", agent_id, check=False)
    assert again.returncode == 1 and "failed_precondition" in again.stderr
    assert server.admin("agents", "revoke", agent_id).returncode == 0  # revoking again is a no-op


def test_agent_pages_follow_rest_cursor_rules_over_grpc(server: Server) -> None:
    """ListAgents took any text as a cursor (``zzz`` answered an empty page, as if the list had ended)."""
    server.issue("pages", "Writer", "one")
    server.issue("pages", "Writer", "two")
    first = json.loads(server.admin("agents", "list", "--limit", "1").stdout)
    assert len(first["agents"]) == 1 and first["next_cursor"]
    second = json.loads(server.admin("agents", "list", "--limit", "1", "--cursor", first["next_cursor"]).stdout)
    assert second["agents"][0]["agent_id"] != first["agents"][0]["agent_id"]
    refused = server.admin("agents", "list", "--cursor", "zzz", check=False)
    assert refused.returncode == 1 and "invalid_argument" in refused.stderr and "cursor" in refused.stderr


def test_non_admin_keys_are_refused_by_the_admin_service(server: Server, tmp_path_factory: pytest.TempPathFactory) -> None:
    writer = server.issue("ops2", "Writer", "not-an-admin")["plaintext_secret"]
    key_file = tmp_path_factory.mktemp("keys") / "writer.key"
    key_file.write_text(writer)
    refused = server.admin("agents", "list", key_file=key_file, check=False)
    assert refused.returncode == 1 and "permission_denied" in refused.stderr
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListAgents(admin_pb2.ListAgentsRequest(), timeout=10)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetAgent(admin_pb2.AgentRef(agent_id="nope"), metadata=(("x-service-key", server.key_file.read_text().strip()),))
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # as REST's admin routes: 400 for a malformed id
        admin = (("x-service-key", server.key_file.read_text().strip()),)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetJob(admin_pb2.JobRef(job_id="nope"), metadata=admin)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetJob(admin_pb2.JobRef(job_id=str(uuid.uuid4())), metadata=admin)
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND


def test_project_admin_is_confined_to_its_tenant(server: Server, tmp_path_factory: pytest.TempPathFactory) -> None:
    pa = server.issue("tenant-x", "ProjectAdmin", "pa")["plaintext_secret"]
    outsider = server.issue("tenant-y", "Writer", "outsider")["agent_id"]
    key_file = tmp_path_factory.mktemp("keys") / "pa.key"
    key_file.write_text(pa)
    assert "not_found" in server.admin("agents", "get", outsider, key_file=key_file, check=False).stderr
    assert "permission_denied" in server.admin("agents", "revoke", outsider, key_file=key_file, check=False).stderr
    listed = json.loads(server.admin("agents", "list", "--limit", "500", key_file=key_file).stdout)
    assert {a["tenant_id"] for a in listed["agents"]} == {"tenant-x"}
    other = server.admin(
        "agents", "issue", "--tenant", "tenant-y", "--role", "Writer", "--display-name", "x", key_file=key_file, check=False
    )
    assert "permission_denied" in other.stderr


def test_audit_verify_detects_a_tampered_row(server: Server) -> None:
    server.issue("audited", "Writer", "one")
    verdict = server.admin("audit", "verify")
    report = json.loads(verdict.stdout)
    assert report["ok"] is True and report["rows"] >= 1 and report["first_bad_seq"] is None
    import lancedb

    table = lancedb.connect(str(server.data_dir / "lance")).open_table("audit_log")
    table.update(where=f"seq = {report['rows']}", values={"outcome": "denied"})
    broken = server.admin("audit", "verify", check=False)
    assert broken.returncode == 1 and "broken at row" in broken.stderr
    assert json.loads(broken.stdout) == {"ok": False, "rows": report["rows"], "first_bad_seq": report["rows"]}

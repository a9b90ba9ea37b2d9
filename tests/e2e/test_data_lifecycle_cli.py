"""Delete, erase and reembed over a running server with the real model, driven by the operator CLI (gRPC)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import grpc
import httpx

from head.erasure_signing import verify_receipt
from memesh_proto import admin_pb2, admin_pb2_grpc
from tests.e2e.test_propagation import pull_until
from tests.servers import Server


def cli_json(server: Server, *args: str, key_file: Path | None = None) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(server.admin(*args, key_file=key_file).stdout)
    return result


def write(server: Server, key: str, content: str, project: str) -> dict[str, Any]:
    with server.http(key) as http:
        response = http.post("/v1/cells", json={"content": content, "cell_type": "Risk", "salience": 0.9, "project_id": project})
        assert response.status_code == 201, response.text
        node: dict[str, Any] = response.json()
        return node


def recall(server: Server, key: str, text: str) -> list[str]:
    with server.http(key) as http:
        response = http.post("/v1/recall", json={"text": text, "k": 10})
        assert response.status_code == 200, response.text
        return [n["content"] for n in response.json()]


def test_a_project_is_erased_from_recall_and_every_inbox_with_a_verifiable_certificate(server: Server, tmp_path: Path) -> None:
    listener = server.issue("erase-co", "Reader", "listener")["plaintext_secret"]
    writer = server.issue("erase-co", "Writer", "writer")["plaintext_secret"]
    neighbour = server.issue("keep-co", "Writer", "neighbour")["plaintext_secret"]
    with server.http(listener) as http:
        assert http.post("/v1/beacons", json={"interest": "payment gateway outages and card declines"}).status_code == 200
    doomed = write(
        server, writer, "The payment gateway declined every card for ten minutes after a certificate expired.", "alpha"
    )
    kept = write(server, writer, "Card declines spiked on the payment gateway during the beta launch.", "beta")
    write(server, neighbour, "The payment gateway of another company declined cards too.", "alpha")
    before = pull_until(server, listener, 2)
    assert {i["diff"]["cell_id"] for i in before["items"]} == {doomed["id"], kept["id"]}

    wrong = server.admin("erase", "--kind", "project", "--id", "alpha", "--confirm", "alpha", check=False)
    assert wrong.returncode == 1 and "invalid_argument" in wrong.stderr
    scope = ("--kind", "project", "--id", "alpha", "--tenant", "erase-co", "--confirm", "project:alpha")
    dry = cli_json(server, "erase", *scope, "--dry-run")
    assert dry["digest"] is None and dry["nodes_removed"] >= 2 and dry["deliveries_removed"] == 1
    assert "The payment gateway declined every card" in " ".join(recall(server, writer, "payment gateway card declines"))

    cert = cli_json(server, "erase", *scope)
    assert cert["nodes_removed"] == dry["nodes_removed"] and cert["deliveries_removed"] == 1
    keys = httpx.get(f"{server.base_url}/.well-known/memesh-erasure-keys.json").json()
    claims = verify_receipt(cert["digest"], keys)
    assert claims["label"] == "project:alpha" and claims["scope"]["tenant_id"] == "erase-co"
    assert claims["counts"] == {k: v for k, v in cert.items() if k != "digest"}

    remaining = recall(server, writer, "payment gateway card declines")
    assert remaining == ["Card declines spiked on the payment gateway during the beta launch."]
    assert recall(server, neighbour, "payment gateway card declines") == [
        "The payment gateway of another company declined cards too."
    ]
    after = pull_until(server, listener, 1, {"since": 0})
    assert [i["diff"]["cell_id"] for i in after["items"]] == [kept["id"]]


def test_node_delete_reembed_and_their_refusals(server: Server, tmp_path: Path) -> None:
    writer = server.issue("reembed-co", "Writer", "writer")
    node = write(server, writer["plaintext_secret"], "Rotate the staging database password every ninety days.", "ops")
    assert cli_json(server, "nodes", "delete", node["id"], "--reason", "retention")["ok"] is True
    assert cli_json(server, "nodes", "delete", node["id"])["ok"] is True  # a second delete is a no-op
    assert "Rotate the staging database password" not in " ".join(recall(server, writer["plaintext_secret"], "staging password"))

    key_file = tmp_path / "writer.key"
    key_file.write_text(writer["plaintext_secret"])
    for args in (
        ("nodes", "delete", node["id"]),
        ("reembed", "start"),
        ("erase", "--kind", "project", "--id", "ops", "--confirm", "project:ops"),
    ):
        refused = server.admin(*args, key_file=key_file, check=False)
        assert refused.returncode == 1 and "permission_denied" in refused.stderr

    write(server, writer["plaintext_secret"], "Backups of the ledger run hourly and are verified nightly.", "ops")
    with server.http(writer["plaintext_secret"]) as http:  # enough cells that the job is still running below
        batch = [
            {"content": f"Runbook step {n}: check the queue depth of worker pool {n}.", "cell_type": "Fact"} for n in range(64)
        ]
        for _ in range(4):
            assert http.post("/v1/cells:batch", json={"cells": batch}).status_code == 201
    admin_key = server.key_file.read_text().strip()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        metadata = (("x-service-key", admin_key),)
        job = {"job_id": stub.StartReembed(admin_pb2.Empty(), metadata=metadata, timeout=10).job_id}
        try:
            stub.StartReembed(admin_pb2.Empty(), metadata=metadata, timeout=10)
            raise AssertionError("a second reembed was accepted while one runs")
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.FAILED_PRECONDITION  # 409 conflict over REST
        running = stub.GetJob(admin_pb2.JobRef(job_id=job["job_id"]), metadata=metadata, timeout=10)
    assert running.status in ("running", "succeeded")
    assert recall(server, writer["plaintext_secret"], "how often are ledger backups taken")[0].startswith("Backups of the ledger")
    deadline = time.monotonic() + 120
    state = cli_json(server, "reembed", "job", job["job_id"])
    while state["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        state = cli_json(server, "reembed", "job", job["job_id"])
    assert state["status"] == "succeeded" and state["nodes_processed"] == state["nodes_total"] > 0
    assert recall(server, writer["plaintext_secret"], "how often are ledger backups taken")[0].startswith("Backups of the ledger")
    missing = server.admin("reembed", "job", "00000000-0000-7000-8000-00000000ffff", check=False)
    assert missing.returncode == 1 and "not_found" in missing.stderr

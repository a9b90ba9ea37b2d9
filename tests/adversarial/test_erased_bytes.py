"""The erasure certificate's promise, checked on the bytes of a running server's data dir (review H1, H2).

A marker sentence is written by one agent, reaches another agent's inbox, is quoted
by a scene summary and abstracted into a consolidation Pattern, in tables large
enough to be compacted into big fragments. After ``memesh admin erase`` every file
under the data dir is searched for it; the certificate must verify against the
published keys, and the audit chain must hold one ``Erased`` row for it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
from joserfc import jws
from joserfc.jwk import KeySet

from tests.servers import Server, audit_rows


def holding(root: Path, needle: str) -> list[str]:
    found = subprocess.run(["grep", "-rl", "--binary-files=text", needle, str(root)], capture_output=True, text=True)
    return found.stdout.split()


def test_an_erased_cell_leaves_no_byte_under_the_data_dir(ray_address: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {
        "MEMESH_STORAGE__OPTIMIZE_EVERY": "8",
        "MEMESH_STORAGE__KEEP_VERSIONS_S": "0",
        "MEMESH_RATE_LIMITS__WRITE__RATE": "10000",  # a batch is charged per cell: 1,200 cells in a few seconds
        "MEMESH_RATE_LIMITS__WRITE__BURST": "10000",
    }
    server = Server(data, ray_address, "hash", env).start()
    try:
        writer = server.issue("bytes", "Writer", "w")["plaintext_secret"]
        listener = server.issue("bytes", "Reader", "l")["plaintext_secret"]
        marker = "BYTES-MARKER-3141 the payroll reconciliation overran"
        with server.http(listener) as http:
            assert http.post("/v1/beacons", json={"interest": "payroll reconciliation overran"}).status_code == 200
        with server.http(writer) as http:
            for batch in range(12):
                cells = [{"content": f"ordinary note {batch}.{n}", "cell_type": "Fact", "project_id": "hr"} for n in range(100)]
                assert http.post("/v1/cells:batch", json={"cells": cells}).status_code == 201
            target = http.post(
                "/v1/cells", json={"content": marker, "cell_type": "Fact", "project_id": "hr", "salience": 1.0}
            ).json()
            twin = http.post("/v1/cells", json={"content": marker, "cell_type": "Fact", "project_id": "hr"}).json()
            for n in range(3):
                other = {
                    "content": f"payroll reconciliation note {n}",
                    "cell_type": "Fact",
                    "project_id": "hr",
                    "scene_id": target["scene_id"],
                }
                assert http.post("/v1/cells", json=other).status_code == 201
            report = http.post(f"/v1/scenes/{target['scene_id']}/consolidate").json()
            assert report["patterns_created"] and "BYTES-MARKER-3141" in report["patterns_created"][0]["content"]
        deadline = time.monotonic() + 30
        with server.http(listener) as http:
            while not any(
                "BYTES-MARKER-3141" in i["diff"]["content"] for i in http.post("/v1/inbox:pull", json={}).json()["items"]
            ):
                assert time.monotonic() < deadline, "the marker never reached the listener"
                time.sleep(0.2)
        time.sleep(1.5)  # access times and agent nodes committed
        assert holding(data, "BYTES-MARKER-3141")
        for cell in (target, twin):
            label = f"node:{cell['id']}"
            out = server.admin("erase", "--kind", "node", "--id", cell["id"], "--confirm", label)
            certificate = json.loads(out.stdout)
            keys = KeySet.import_key_set(httpx.get(f"{server.base_url}/.well-known/memesh-erasure-keys.json").json())
            claims = json.loads(jws.deserialize_compact(certificate["digest"], keys, algorithms=["Ed25519"]).payload)
            assert claims["label"] == label and claims["counts"]["nodes_removed"] == certificate["nodes_removed"]
        assert holding(data, "BYTES-MARKER-3141") == []
        with server.http(listener) as http:
            items = http.post("/v1/inbox:pull", json={"since": 0}).json()["items"]
            assert all("BYTES-MARKER-3141" not in i["diff"]["content"] for i in items)
        with server.http(writer) as http:
            scene = http.get(f"/v1/scenes/{target['scene_id']}").json()
            assert "BYTES-MARKER-3141" not in scene["summary"] and scene["member_count"] == 3
        erased = [r for r in audit_rows(server) if r["kind"] == "Erased"]
        assert sorted(r["target"] for r in erased) == sorted(f"node:{c['id']}" for c in (target, twin))
        assert json.loads(server.admin("audit", "verify").stdout)["ok"]
    finally:
        server.stop()
    assert holding(data, "BYTES-MARKER-3141") == []  # nor after a clean stop

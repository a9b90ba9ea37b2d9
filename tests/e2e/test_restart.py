"""Restarting (cleanly or after a crash) on the same data keeps everything."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.e2e.test_propagation import pull_until
from tests.servers import Server


def test_restart_keeps_cells_scenes_agents_sessions_and_writes_no_new_key(ray_address: str, tmp_path: Path) -> None:
    server = Server(tmp_path / "data", ray_address, "hash").start()
    bootstrap = server.key_file.read_text()
    issued = server.issue("durable", "Writer", "keeper")
    listener = server.issue("durable", "Reader", "listener")["plaintext_secret"]
    with server.http(listener) as http:
        http.post("/v1/beacons", json={"interest": "fact number to keep"})
    with server.http(issued["plaintext_secret"]) as http:
        session = http.post("/v1/sessions", json={"project_id": "keep"}).json()["session_id"]
        cells = http.post(
            "/v1/cells:batch",
            json={
                "cells": [{"content": f"fact number {i} to keep", "cell_type": "Fact", "session_id": session} for i in range(20)]
            },
        ).json()
    inbox = pull_until(server, listener, 20)
    assert len(inbox["items"]) == 20
    with server.http(listener) as http:
        assert http.post("/v1/inbox:pull", json={"ack": 7, "limit": 1}).json()["cursor"] == 7
    assert server.stop(signal.SIGTERM) == 0, server.output()[-3000:]
    assert "bootstrap ServiceAdmin key written" in server.output()

    again = Server(tmp_path / "data", ray_address, "hash")
    again.log_path = tmp_path / "second.log"
    again.start()
    try:
        assert again.key_file.read_text() == bootstrap
        assert "bootstrap ServiceAdmin key written" not in again.output()
        with again.http(issued["plaintext_secret"]) as http:
            found = http.post("/v1/query", json={"text": "fact number to keep", "k": 100}).json()
            assert {n["id"] for n in found} == {c["id"] for c in cells}
            for scene_id in {c["scene_id"] for c in cells}:
                assert http.get(f"/v1/scenes/{scene_id}").status_code == 200
            assert http.delete(f"/v1/sessions/{session}").json() == {"ok": True}
        assert again.admin("agents", "get", issued["agent_id"]).returncode == 0
        with again.http(listener) as http:
            after = http.post("/v1/inbox:pull", json={}).json()
        assert after["cursor"] == 7 and sorted(i["delivery_seq"] for i in after["items"]) == list(range(8, 21))
        before = {i["delivery_seq"]: i["diff"]["id"] for i in inbox["items"]}
        assert all(before[i["delivery_seq"]] == i["diff"]["id"] for i in after["items"])
    finally:
        again.stop()


def test_a_crash_loses_no_acknowledged_write(ray_address: str, tmp_path: Path) -> None:
    server = Server(tmp_path / "data", ray_address, "hash").start()
    key = server.issue("crash", "Writer", "w")["plaintext_secret"]
    acknowledged = []
    with server.http(key) as http:
        for i in range(30):
            response = http.post("/v1/cells", json={"content": f"acknowledged write {i}", "cell_type": "Fact"})
            assert response.status_code == 201
            acknowledged.append(response.json()["id"])
    server.kill9()  # SIGKILL, then wait until Ray reaped its actors: the next start is the data's only writer
    again = Server(tmp_path / "data", ray_address, "hash").start()
    try:
        with again.http(key) as http:
            found = {n["id"] for n in http.post("/v1/query", json={"text": "acknowledged write", "k": 100}).json()}
        assert set(acknowledged) <= found
    finally:
        again.stop()

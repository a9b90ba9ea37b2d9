"""Accepted input, then restart: nothing a caller may send can break the next start (review C1).

Extreme but valid values go through every write path of a running server (cells,
batches, sessions, beacons, the inbox cursor, consolidation, agents, node delete,
erase); the server is then stopped cleanly and restarted, then killed and restarted,
on the same data, and must come back healthy, with nothing skipped at load, and
still write, walk and deliver.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Server

UNICODE = "emoji 😀 cjk 漢字 rtl שלום combining é zero\u200bwidth nul\u0000 tab\t newline\n quote' \" back\\slash "
PROJECT = ('p\' OR 1=1 -- "x" \\ 漢字 😀 ' * 6)[:128]


def extremes(server: Server, writer: str, reader: str) -> dict[str, Any]:
    """Every write path with values at their bounds; returns what must be found after the restarts."""
    kept: dict[str, Any] = {}
    with server.http(writer) as http:
        longest = (UNICODE * 400)[:32_768]
        cell = http.post("/v1/cells", json={"content": longest, "cell_type": "Fact", "salience": 1.0, "project_id": PROJECT})
        assert cell.status_code == 201, cell.text
        kept["long"] = cell.json()["id"]
        tiny = http.post("/v1/cells", json={"content": "x", "cell_type": "Decision", "salience": 0.0, "layer": "L0"})
        assert tiny.status_code == 201, tiny.text
        vector = [1e300 if i % 2 else -1e-300 for i in range(384)]
        scaled = http.post("/v1/cells", json={"content": "scaled vector", "cell_type": "Risk", "embedding": vector})
        assert scaled.status_code == 201, scaled.text
        batch = [{"content": f"near duplicate of the deployment runbook {i % 2}", "cell_type": "Lesson"} for i in range(256)]
        written = http.post("/v1/cells:batch", json={"cells": batch})
        assert written.status_code == 201, written.text
        kept["scene"] = written.json()[0]["scene_id"]
        report = http.post(f"/v1/scenes/{kept['scene']}/consolidate")
        assert report.status_code == 200, report.text
        session = http.post("/v1/sessions", json={"project_id": PROJECT}).json()["session_id"]
        in_session = http.post("/v1/cells", json={"content": UNICODE, "cell_type": "Task", "session_id": session})
        assert in_session.status_code == 201, in_session.text
        assert http.delete(f"/v1/sessions/{session}").json() == {"ok": True}
        assert http.delete(f"/v1/sessions/{session}").json() == {"ok": True}
        kept["delete_me"] = http.post("/v1/cells", json={"content": "to delete", "cell_type": "Fact"}).json()["id"]
        kept["erase_me"] = http.post("/v1/cells", json={"content": "to erase", "cell_type": "Fact"}).json()["id"]
    with server.http(reader) as http:
        now = datetime.now(UTC)
        far = (now + timedelta(days=364)).astimezone(timezone(timedelta(hours=-23, minutes=-59)))
        for body in (
            {"interest": (UNICODE * 200)[:8192], "expires_at": far.isoformat()},
            {"interest": "runbook deployment", "ttl_s": 1.0},
            {"interest": "runbook deployment near duplicate"},
        ):
            placed = http.post("/v1/beacons", json=body)
            assert placed.status_code == 200, placed.text
        removed = http.post("/v1/beacons", json={"interest": "gone soon"}).json()["node_id"]
        assert http.delete(f"/v1/beacons/{removed}").json() == {"ok": True}
        assert http.delete(f"/v1/beacons/{removed}").json() == {"ok": True}
        pulled = http.post("/v1/inbox:pull", json={"since": 2**63 - 1, "ack": 2**63 - 1, "limit": 2**31 - 1})
        assert pulled.status_code == 200, pulled.text
        for path in ("/v1/query", "/v1/recall"):
            body = {"text": UNICODE, "k": 1000, "filter": {"source_agent": PROJECT, "tenant_id": "x" * 500}, "layer": "L1"}
            assert http.post(path, json=body).status_code == 200
    scope = [arg for n in range(40) for arg in ("--read-scope", f"{PROJECT[:120]}{n}")]
    server.issue(("t' " + "漢" * 200)[:128], "Reader", "😀" * 64, *scope)
    server.admin("nodes", "delete", kept["delete_me"], "--reason", "retention")
    server.admin("nodes", "delete", kept["delete_me"])
    erase = server.admin("erase", "--kind", "node", "--id", kept["erase_me"], "--confirm", f"node:{kept['erase_me']}")
    assert json.loads(erase.stdout)["digest"]
    return kept


def healthy_and_working(server: Server, writer: str, kept: dict[str, Any], word: str) -> None:
    """Healthy, the kept nodes found, and a new write walks into a listener's inbox.

    The listener is a fresh key with a fresh beacon: the beacons placed by ``extremes`` may have spent
    their delivery budget (``propagation`` budget per node and hour) on the batch's walks when those were
    still running as the beacons were placed, which depends on timing, not on the restart."""
    with server.http() as http:
        health = http.get("/healthz")
        assert health.status_code == 200, health.text
    with server.http(writer) as http:
        assert http.get(f"/v1/scenes/{kept['scene']}").status_code == 200
        found = {n["id"] for n in http.post("/v1/query", json={"text": UNICODE, "k": 1000}).json()}
        assert kept["long"] in found and kept["erase_me"] not in found
    listener = server.issue("extreme", "Reader", f"listener {word}")["plaintext_secret"]
    interest = f"restart lantern probe {word}"
    with server.http(listener) as http:
        assert http.post("/v1/beacons", json={"interest": interest}).status_code == 200
    probe = f"{interest} {time.monotonic_ns()}"
    with server.http(writer) as http:
        assert http.post("/v1/cells", json={"content": probe, "cell_type": "Fact", "salience": 1.0}).status_code == 201
    deadline = time.monotonic() + 30
    with server.http(listener) as http:
        while time.monotonic() < deadline:  # the new write walks and lands in the listener's inbox
            page = http.post("/v1/inbox:pull", json={"since": 0, "limit": 0}).json()
            if any(i["diff"]["content"] == probe for i in page["items"]):
                return
            time.sleep(0.2)
    shown = {key: page[key] for key in ("window_high", "has_more", "cursor")}
    raise AssertionError(
        f"a write after the restart reached no beacon: last page {len(page['items'])} items, {shown}\n" + server.output()[-3000:]
    )


@pytest.mark.timeout(600)  # 2.5 to 3.5 minutes of real servers here: the suite's 300 s hang guard is too close
def test_extreme_inputs_then_a_clean_restart_and_a_crash_restart(ray_address: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(data, ray_address, "hash").start()
    writer = server.issue("extreme", "Writer", "w")["plaintext_secret"]
    reader = server.issue("extreme", "Reader", "r")["plaintext_secret"]
    try:
        kept = extremes(server, writer, reader)
    finally:
        assert server.stop(signal.SIGTERM) == 0, server.output()[-3000:]
    again = Server(data, ray_address, "hash").start()
    try:
        healthy_and_working(again, writer, kept, "clean")
        with again.http(writer) as http:
            http.post("/v1/cells", json={"content": UNICODE * 10, "cell_type": "Fact"})
        again.kill9()
        third = Server(data, ray_address, "hash").start()
        try:
            healthy_and_working(third, writer, kept, "crash")
            assert "skipped an undecodable" not in third.output()
        finally:
            third.stop()
    finally:
        if again.proc is not None and again.proc.poll() is None:
            again.stop()

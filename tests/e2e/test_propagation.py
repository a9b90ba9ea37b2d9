"""New memory finds the agents that need it: beacons, walks, pull and stream, over a running server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.servers import Server, assert_envelope


def pull_until(
    server: Server, key: str, want: int, body: dict[str, Any] | None = None, timeout_s: float = 60.0
) -> dict[str, Any]:
    """Pull (without acknowledging) until ``want`` items are visible; walks run after the write is acknowledged."""
    deadline = time.monotonic() + timeout_s
    with server.http(key) as http:
        while True:
            page: dict[str, Any] = http.post("/v1/inbox:pull", json=body or {}).json()
            if len(page["items"]) >= want or time.monotonic() > deadline:
                return page
            time.sleep(0.1)


def ws_url(server: Server) -> str:
    return server.base_url.replace("http://", "ws://") + "/v1/inbox"


def test_a_beacon_attracts_related_memory_and_nothing_else(server: Server) -> None:
    listener = server.issue("mesh-co", "Reader", "listener")["plaintext_secret"]
    writer = server.issue("mesh-co", "Writer", "writer")["plaintext_secret"]
    outsider = server.issue("other-co", "Writer", "outsider")["plaintext_secret"]
    with server.http(listener) as http:
        beacon = http.post("/v1/beacons", json={"interest": "database failover and replication incidents"})
        assert beacon.status_code == 200
    with server.http(outsider) as http:
        assert http.post("/v1/beacons", json={"interest": "database failover and replication incidents"}).status_code == 200
    with server.http(writer) as http:
        related = http.post(
            "/v1/cells",
            json={
                "content": "The primary Postgres failed over to the replica at 03:12; replication lag peaked at 40s.",
                "cell_type": "Risk",
                "salience": 0.9,
            },
        ).json()
        http.post("/v1/cells", json={"content": "The cafeteria now serves vegan lasagne on Thursdays.", "cell_type": "Fact"})
    page = pull_until(server, listener, 1)
    assert [i["diff"]["cell_id"] for i in page["items"]] == [related["id"]]
    item = page["items"][0]
    assert item["delivery"]["node_kind"] == "beacon" and item["delivery"]["hops"] >= 1
    assert 0 < item["delivery"]["energy"] < item["diff"]["energy"] and item["delivery"]["score"] > 0.3
    assert item["diff"]["provenance"]["tenant_id"] == "mesh-co"
    time.sleep(1.0)  # give any stray walk time to land: nothing may reach another tenant
    assert pull_until(server, outsider, 1, timeout_s=1)["items"] == []
    with (
        connect(ws_url(server), additional_headers={"x-service-key": outsider}, open_timeout=10) as ws,
        pytest.raises(TimeoutError),
    ):
        ws.recv(timeout=1.5)


def test_the_stream_sends_acknowledges_and_resumes(server: Server) -> None:
    reader = server.issue("stream-co", "Reader", "streamer")["plaintext_secret"]
    writer = server.issue("stream-co", "Writer", "w")["plaintext_secret"]
    with server.http(reader) as http:
        http.post("/v1/beacons", json={"interest": "kubernetes cluster upgrades"})
    with server.http(writer) as http:
        for version in ("1.29", "1.30", "1.31"):
            http.post(
                "/v1/cells", json={"content": f"We upgraded the production Kubernetes cluster to {version}.", "cell_type": "Fact"}
            )
    with connect(ws_url(server), additional_headers={"x-service-key": reader}, open_timeout=10) as ws:
        frames = [json.loads(ws.recv(timeout=20)) for _ in range(3)]
        assert [f["delivery_seq"] for f in frames] == [1, 2, 3]
        assert all("Kubernetes" in f["diff"]["content"] for f in frames)
        ws.send(json.dumps({"ack": 2}))
        assert json.loads(ws.recv(timeout=10)) == {"cursor": 2}
        ws.send(json.dumps({"ack": 1}))
        assert json.loads(ws.recv(timeout=10)) == {"cursor": 2}  # never rewinds
        with server.http(writer) as http:
            http.post("/v1/cells", json={"content": "Kubernetes cluster upgrade to 1.32 is scheduled.", "cell_type": "Task"})
        live = json.loads(ws.recv(timeout=20))
        assert live["delivery_seq"] == 4
    with connect(ws_url(server), additional_headers={"x-service-key": reader}, open_timeout=10) as ws:
        again = [json.loads(ws.recv(timeout=20)) for _ in range(2)]
        assert [f["delivery_seq"] for f in again] == [3, 4]  # resumes after the acknowledged cursor
        ws.send("not json")
        error = json.loads(ws.recv(timeout=10))
        assert error["error"]["code"] == "validation"
    # nested past the parser (60 KB: a message past 64 KiB is closed unread, 1009, before any parser sees it); past int64
    for bad in ("[" * 30_000 + "]" * 30_000, json.dumps({"ack": 2**64})):
        with connect(ws_url(server), additional_headers={"x-service-key": reader}, open_timeout=10) as ws:
            [json.loads(ws.recv(timeout=20)) for _ in range(2)]
            ws.send(bad)
            assert json.loads(ws.recv(timeout=10))["error"]["code"] == "validation", bad[:20]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code != 1011  # the client's fault, not ours
    with connect(ws_url(server), additional_headers={"x-service-key": reader}, open_timeout=10) as ws:
        [json.loads(ws.recv(timeout=20)) for _ in range(2)]
        ws.send(b"\x00binary")
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "validation"
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    with server.http(reader) as http:
        assert http.post("/v1/inbox:pull", json={}).json()["cursor"] == 2


def test_the_stream_refuses_before_the_upgrade(server: Server) -> None:
    logged = server.output().count("without completing handshake")
    for headers in ({}, {"x-service-key": "msh_" + "n" * 43}):
        with pytest.raises(InvalidStatus) as caught:
            connect(ws_url(server), additional_headers=headers, open_timeout=10)
        assert caught.value.response.status_code == 401
        assert json.loads(caught.value.response.body)["error"]["code"] == "unauthorized"
    assert server.output().count("without completing handshake") == logged, "a refused handshake logged as an error"


def test_a_handshake_with_two_keys_is_refused_whichever_comes_first(server: Server) -> None:
    """The handshake read the first of two ``x-service-key`` headers and REST the last: [tenant a's key,
    tenant b's key] streamed as one tenant here and answered as the other there."""
    key = server.issue("two-keys", "Reader", "r")["plaintext_secret"]
    other = server.issue("two-keys-other", "Reader", "o")["plaintext_secret"]
    for pair in ([key, other], [other, key], [key, key]):
        with pytest.raises(InvalidStatus) as caught:
            connect(ws_url(server), additional_headers=[("x-service-key", k) for k in pair], open_timeout=10)
        assert caught.value.response.status_code == 401
        assert json.loads(caught.value.response.body)["error"]["code"] == "unauthorized"
    with connect(ws_url(server), additional_headers={"x-service-key": key}, open_timeout=10):
        pass  # one key still opens the stream


def test_a_message_past_64_kib_closes_the_stream_before_it_is_read(server: Server) -> None:
    """uvicorn took WebSocket messages of up to 16 MiB, parsed whole before the frame was judged; an ack is under
    40 bytes. A larger message now closes the stream (1009), and the next connection streams as before."""
    key = server.issue("ws-size", "Reader", "r")["plaintext_secret"]
    assert_closed_by(server, key, json.dumps({"ack": 0, "pad": "x" * (1 << 20)}), 1009)
    assert_streams(server, key)


def assert_closed_by(server: Server, key: str, message: str | bytes, code: int) -> None:
    """``message`` sent as one text frame (bytes as they are) closes the stream with ``code``."""
    with connect(ws_url(server), additional_headers={"x-service-key": key}, open_timeout=10, max_size=None) as ws:
        ws.send(message, text=True)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == code


def assert_streams(server: Server, key: str) -> None:
    """A new connection with ``key`` answers an ack as before."""
    with connect(ws_url(server), additional_headers={"x-service-key": key}, open_timeout=10) as ws:
        ws.send(json.dumps({"ack": 0}))
        assert json.loads(ws.recv(timeout=10)) == {"cursor": 0}


def test_a_text_message_that_is_not_utf8_closes_1007_and_logs_no_error(server: Server) -> None:
    """uvicorn logged an ERROR line and a traceback for each such message: a key could fill the log with them."""
    key = server.issue("ws-utf8", "Reader", "r")["plaintext_secret"]
    for _ in range(3):
        assert_closed_by(server, key, b'{"ack": "\xff"}', 1007)  # a text frame whose bytes are not UTF-8
    assert_streams(server, key)
    assert "Invalid UTF-8" not in server.output() and "UnicodeDecodeError" not in server.output()


def test_pull_errors_over_real_sockets(server: Server) -> None:
    key = server.issue("pull-errs", "Reader", "r")["plaintext_secret"]
    with server.http(key) as http:
        assert_envelope(http.post("/v1/inbox:pull", json={"limit": -1}), 400, "validation")
        assert_envelope(http.post("/v1/inbox:pull", json={"since": "0"}), 422, "validation")
        assert_envelope(http.post("/v1/inbox:pull", json={"ack": 2**63}), 400, "validation")
        assert_envelope(http.post("/v1/inbox:pull", content=b"{}", headers={"content-type": "text/plain"}), 415, "validation")
        empty = http.post("/v1/inbox:pull")
        assert empty.status_code == 200 and empty.json() == {"items": [], "cursor": 0, "window_high": 0, "has_more": False}

"""Every kind of open stream stops before its next item once its credential is gone (review H3, M2).

Over real sockets against ``memesh serve``: the agent's ``/v1/inbox`` WebSocket
under revoke, rotate and suspend, the per-agent stream cap, and ack frames that
are charged; the console's observatory stream under suspend and logout (its
revoke case is in tests/e2e/test_observatory.py).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.servers import OidcProvider, Server, console_login, enter_when_admitted

CLOSE_WITHIN_S = 5.0


def inbox(server: Server, key: str) -> ClientConnection:
    url = server.base_url.replace("http://", "ws://") + "/v1/inbox"
    return connect(url, additional_headers={"x-service-key": key}, open_timeout=10)


def closed_as_unauthorized(ws: ClientConnection) -> None:
    """The next frame is the unauthorized envelope, then a 1008 close; no delivery comes first."""
    started = time.monotonic()
    frame = json.loads(ws.recv(timeout=CLOSE_WITHIN_S))
    assert frame == {"error": {"code": "unauthorized", "message": frame["error"]["message"]}}, frame
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=CLOSE_WITHIN_S)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert time.monotonic() - started < CLOSE_WITHIN_S


@pytest.mark.parametrize("action", ["revoke", "rotate", "suspend"])
def test_an_open_inbox_stream_closes_when_its_key_stops_working(server: Server, action: str) -> None:
    tenant = f"rev-{action}"
    listener = server.issue(tenant, "Reader", "listener")
    writer = server.issue(tenant, "Writer", "writer")["plaintext_secret"]
    key = listener["plaintext_secret"]
    with server.http(key) as http:
        assert http.post("/v1/beacons", json={"interest": "certificate expiry alerts"}).status_code == 200
    with server.http(writer) as http:
        http.post("/v1/cells", json={"content": "The TLS certificate of the api gateway expires soon.", "cell_type": "Risk"})
    with inbox(server, key) as ws:
        first = json.loads(ws.recv(timeout=30))
        assert first["delivery_seq"] == 1
        server.admin("agents", action, listener["agent_id"])  # while the stream is open and idle
        with server.http(writer) as http:  # new memory its beacon would attract
            http.post("/v1/cells", json={"content": "Certificate expiry alerts fired for the api gateway.", "cell_type": "Risk"})
        closed_as_unauthorized(ws)
    with pytest.raises(InvalidStatus) as refused:
        inbox(server, key)
    assert refused.value.response.status_code == 401


def test_an_agent_holds_a_bounded_number_of_streams_and_acks_are_charged(server: Server) -> None:
    key = server.issue("stream-cap", "Reader", "greedy")["plaintext_secret"]
    with contextlib.ExitStack() as opened:
        streams = [opened.enter_context(inbox(server, key)) for _ in range(4)]
        with pytest.raises(InvalidStatus) as refused:
            inbox(server, key)
        assert refused.value.response.status_code == 429
        assert json.loads(refused.value.response.body)["error"]["code"] == "quota_exceeded"
        ws = streams[0]
        started = time.monotonic()
        for _ in range(400):  # past the Inbox bucket's burst (200), sent at once: acks cost what pulls cost
            ws.send(json.dumps({"ack": 0}))
        answers = [json.loads(ws.recv(timeout=10)) for _ in range(400)]
        elapsed = time.monotonic() - started
        assert answers[0] == {"cursor": 0}
        refused_acks = [a for a in answers if "error" in a]
        assert refused_acks and all(a["error"]["code"] == "rate_limited" for a in refused_acks)
        # The bucket (burst 200, 100/s) lets through at most 200 + 100 per second the 400 took to be answered
        # (1 s on a fast machine, so at least 100 refused; a slow machine refills it for longer).
        assert len(refused_acks) >= 400 - 200 - 100 * elapsed - 2, f"{len(refused_acks)} refused in {elapsed:.2f}s"
        ws.send(json.dumps({"ack": 0}))  # a refused ack does not close the stream: it still answers
        assert set(json.loads(ws.recv(timeout=10))) in ({"cursor"}, {"error"})
    with contextlib.ExitStack() as again:  # the slots came back
        enter_when_admitted(again, lambda: inbox(server, key), 30)


def observatory(admin_server: Server, session: httpx.Client) -> ClientConnection:
    url = admin_server.base_url.replace("http://", "ws://") + "/admin/api/observatory/stream"
    cookie = session.cookies.get("service_admin_session")
    return connect(url, additional_headers={"cookie": f"service_admin_session={cookie}"}, open_timeout=10)


@pytest.mark.parametrize("how", ["suspend", "logout"])
def test_an_open_observatory_stream_closes_on_suspend_and_logout(
    admin_server: Server, oidc_provider: OidcProvider, how: str
) -> None:
    subject = f"watcher-{how}-{uuid.uuid4().hex[:6]}"
    issued = admin_server.issue("obs-rev", "ProjectAdmin", subject, "--oidc-subject", subject)
    session = console_login(admin_server.base_url, oidc_provider, subject)
    with observatory(admin_server, session) as ws:
        with pytest.raises(TimeoutError):
            ws.recv(timeout=1.0)  # open and idle
        if how == "suspend":
            admin_server.admin("agents", "suspend", issued["agent_id"])
        else:
            cookie = session.cookies.get("service_admin_session")
            with httpx.Client(base_url=admin_server.base_url, timeout=30) as other:  # the same session, another tab
                assert other.post("/admin/auth/logout", headers={"cookie": f"service_admin_session={cookie}"}).status_code == 204
        started = time.monotonic()
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=CLOSE_WITHIN_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert time.monotonic() - started < CLOSE_WITHIN_S

"""The observatory over real sockets: a console session, /events, the WebSocket stream.

Uses the ``admin_server`` fixture (``memesh serve`` with the console enabled
and a real OIDC provider) and ``console_login`` from ``tests/servers.py``.
Cells are written through /v1 with agent keys from ``admin_server.issue``;
operators log in through the provider as subjects bound at issue time
(``--oidc-subject``). The WebSocket client is the ``websockets`` library,
carrying the session cookie.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from actors.propagation import diff_id_of
from tests.servers import OidcProvider, Server, assert_envelope, console_login, enter_when_admitted
from tests.unit.helpers import EVENT_FIELDS

SESSION_COOKIE = "service_admin_session"
STREAM = "/admin/api/observatory/stream"
EVENTS = "/admin/api/observatory/events"


def operator(admin_server: Server, provider: OidcProvider, tenant: str, role: str) -> httpx.Client:
    """A console session of a fresh operator agent (its own Admin rate bucket)."""
    subject = f"obs-{role.lower()}-{uuid.uuid4().hex[:8]}"
    admin_server.issue(tenant, role, subject[:64], "--oidc-subject", subject)
    return console_login(admin_server.base_url, provider, subject)


def writer_key(admin_server: Server, tenant: str) -> str:
    key: str = admin_server.issue(tenant, "Writer", f"writer-{tenant}")["plaintext_secret"]
    return key


def write_cell(admin_server: Server, key: str, content: str) -> str:
    """Write one cell through /v1; returns its diff id (the id its hop events carry)."""
    with httpx.Client(base_url=admin_server.base_url, headers={"x-service-key": key}, timeout=60) as http:
        r = http.post("/v1/cells", json={"content": content, "cell_type": "Fact", "salience": 0.8})
        assert r.status_code == 201, r.text
        return diff_id_of(r.json()["id"])


def events_of(session: httpx.Client, *, want: set[str], timeout_s: float = 60.0, **params: Any) -> list[dict[str, Any]]:
    """GET /events until every diff in ``want`` shows up (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = session.get(EVENTS, params={"limit": 10_000, **params})
        assert r.status_code == 200, r.text
        events: list[dict[str, Any]] = r.json()
        if want <= {e["diff_id"] for e in events} or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def ws_url(admin_server: Server, query: str = "") -> str:
    return admin_server.base_url.replace("http://", "ws://", 1) + STREAM + (f"?{query}" if query else "")


@contextlib.contextmanager
def stream(admin_server: Server, session: httpx.Client, query: str = "") -> Iterator[ClientConnection]:
    cookie = session.cookies.get(SESSION_COOKIE)
    assert cookie, "the console login set no session cookie"
    with connect(
        ws_url(admin_server, query), additional_headers={"Cookie": f"{SESSION_COOKIE}={cookie}"}, open_timeout=30, proxy=None
    ) as ws:
        yield ws


def read_until(ws: ClientConnection, done: Any, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Frames until ``done(frames)`` holds (bounded: fails after ``timeout_s``)."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while not done(frames):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"stream stalled after {len(frames)} frames"
        frames.append(json.loads(ws.recv(timeout=remaining)))
    return frames


def refused(admin_server: Server, session: httpx.Client, query: str = "") -> InvalidStatus:
    with pytest.raises(InvalidStatus) as denied, stream(admin_server, session, query):
        pass
    return denied.value


def test_replay_then_live_events(admin_server: Server, oidc_provider: OidcProvider) -> None:
    root = operator(admin_server, oidc_provider, "system", "ServiceAdmin")
    key = writer_key(admin_server, "obs-live")
    first = write_cell(admin_server, key, "the release train leaves on thursdays")
    events = events_of(root, want={first})
    assert first in {e["diff_id"] for e in events}
    assert all(set(e) == EVENT_FIELDS for e in events)
    assert all("release train" not in json.dumps(e) for e in events)  # never content
    with stream(admin_server, root) as ws:
        replayed = read_until(ws, lambda fs: first in {f.get("diff_id") for f in fs})
        assert all(set(f) == EVENT_FIELDS for f in replayed)
        second = write_cell(admin_server, key, "the release train is cancelled this week")
        live = read_until(ws, lambda fs: second in {f.get("diff_id") for f in fs})
    seed = [f for f in live if f.get("diff_id") == second and f["hop_index"] == 0]
    assert seed and seed[0]["from_node"] is None and seed[0]["tenant_id"] == "obs-live"
    seen = [(f["diff_id"], f["hop_index"], f["from_node"], f["to_node"]) for f in replayed + live if "diff_id" in f]
    assert len(seen) == len(set(seen))  # no duplicate across the replay/live boundary
    root.close()


def test_a_project_admin_sees_only_its_tenant(admin_server: Server, oidc_provider: OidcProvider) -> None:
    mine = write_cell(admin_server, writer_key(admin_server, "obs-a"), "our dashboards moved to grafana")
    theirs = write_cell(admin_server, writer_key(admin_server, "obs-b"), "their dashboards moved to grafana")
    root = operator(admin_server, oidc_provider, "system", "ServiceAdmin")
    assert {mine, theirs} <= {e["diff_id"] for e in events_of(root, want={mine, theirs})}
    project_admin = operator(admin_server, oidc_provider, "obs-a", "ProjectAdmin")
    events = events_of(project_admin, want={mine})
    assert mine in {e["diff_id"] for e in events}
    assert {e["tenant_id"] for e in events} == {"obs-a"}
    assert theirs not in {e["diff_id"] for e in events}
    with stream(admin_server, project_admin) as ws:
        replayed = read_until(ws, lambda fs: mine in {f.get("diff_id") for f in fs})
        later_theirs = write_cell(admin_server, writer_key(admin_server, "obs-b"), "their alerts moved to pagerduty")
        later_mine = write_cell(admin_server, writer_key(admin_server, "obs-a"), "our alerts moved to pagerduty")
        live = read_until(ws, lambda fs: later_mine in {f.get("diff_id") for f in fs})
    frames = [f for f in replayed + live if "diff_id" in f]
    assert {f["tenant_id"] for f in frames} == {"obs-a"}
    assert not {theirs, later_theirs} & {f["diff_id"] for f in frames}
    root.close()
    project_admin.close()


def test_the_seventeenth_stream_is_refused_with_429_before_the_upgrade(admin_server: Server, oidc_provider: OidcProvider) -> None:
    root = operator(admin_server, oidc_provider, "system", "ServiceAdmin")
    # No replay: the retained events of earlier tests are not what this test is about, and a client closing
    # a stream it never read drains what the kernel buffered first (16 closes took 50 s after the reembed test).
    fresh = "since=" + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with contextlib.ExitStack() as open_streams:
        for _ in range(16):  # a stream of an earlier test may still be giving its slot back
            enter_when_admitted(open_streams, lambda: stream(admin_server, root, fresh), 10)
        denied = refused(admin_server, root)
        assert denied.response.status_code == 429
        body = json.loads(denied.response.body or b"{}")
        assert body["error"]["code"] == "quota_exceeded"
    with contextlib.ExitStack() as again:  # every slot comes back once the clients have gone
        enter_when_admitted(again, lambda: stream(admin_server, root, fresh), 10)
    root.close()


def test_a_malformed_since_is_400(admin_server: Server, oidc_provider: OidcProvider) -> None:
    root = operator(admin_server, oidc_provider, "system", "ServiceAdmin")
    denied = refused(admin_server, root, "since=last-tuesday")
    assert denied.response.status_code == 400
    assert json.loads(denied.response.body or b"{}")["error"]["code"] == "validation"
    assert_envelope(root.get(EVENTS, params={"since": "last-tuesday"}), 400, "validation")
    assert_envelope(root.get(EVENTS, params={"limit": 0}), 400, "validation")
    assert root.get(EVENTS, params={"since": "2020-01-01T00:00:00Z"}).status_code == 200
    root.close()


def test_the_stream_needs_a_session(admin_server: Server) -> None:
    with pytest.raises(InvalidStatus) as denied, connect(ws_url(admin_server), open_timeout=30, proxy=None):
        pass
    assert denied.value.response.status_code == 401
    assert_envelope(httpx.get(admin_server.base_url + EVENTS, timeout=30), 401, "unauthorized")


def test_revoking_the_operator_ends_its_open_stream(admin_server: Server, oidc_provider: OidcProvider) -> None:
    subject = f"obs-revoked-{uuid.uuid4().hex[:8]}"
    issued = admin_server.issue("obs-revoke", "ProjectAdmin", subject, "--oidc-subject", subject)
    session = console_login(admin_server.base_url, oidc_provider, subject)
    key = writer_key(admin_server, "obs-revoke")
    first = write_cell(admin_server, key, "the canary deploy is at ten percent")
    with stream(admin_server, session) as ws:
        read_until(ws, lambda fs: first in {f.get("diff_id") for f in fs})
        admin_server.admin("agents", "revoke", issued["agent_id"])
        second = write_cell(admin_server, key, "the canary deploy is rolled back")
        frames: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        with pytest.raises(ConnectionClosed) as closed:
            while time.monotonic() < deadline:  # until the server closes the socket (bounded)
                frames.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert frames and frames[-1] == {"error": {"code": "unauthorized", "message": frames[-1]["error"]["message"]}}
    assert second not in {f.get("diff_id") for f in frames}  # nothing after the revoke reached it
    session.close()

"""The observatory routes (``/admin/api/observatory/events`` and ``/stream``) over HTTP and WebSocket.

The real admin session gate (``api.console.gate``) is tested by its own
engineer. Here a tiny test-only middleware, :class:`AsOperator`, stands in
for it: it puts a chosen :class:`Principal` in ``scope["state"]["principal"]``
exactly where the gate does, so these tests judge the routes alone (tenant
filter, ``since``, limits, replay and live, resync, the stream cap). The
Observatory is the real actor class, in-process; Starlette's TestClient runs
the app (and so the hub) on its own event loop, reached through its portal.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from actors.directory import InProcessDirectory
from actors.observatory import Observatory, ObservatoryConfig
from api.console.observatory import router
from api.errors import install_error_handlers
from head.observatory_hub import ObservatoryHub, ObservatoryHubConfig
from mesh.identity import Principal, Role
from tests.unit.test_observatory import EVENT_FIELDS, SPEC, hop

SERVICE_ADMIN = Principal("00000000-0000-7000-8000-0000000000a1", "system", frozenset({Role.SERVICE_ADMIN}))
T1_ADMIN = Principal("00000000-0000-7000-8000-0000000000a2", "t1", frozenset({Role.PROJECT_ADMIN}))
WRITER = Principal("00000000-0000-7000-8000-0000000000a3", "t1", frozenset({Role.WRITER}))
EVENTS = "/admin/api/observatory/events"
STREAM = "/admin/api/observatory/stream"


class AsOperator:
    """TEST ONLY: places ``principal`` where the admin session gate would (None: no session)."""

    def __init__(self, app: ASGIApp, principal: Principal | None) -> None:
        self.app = app
        self.principal = principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.principal is not None:
            scope.setdefault("state", {})["principal"] = self.principal
        await self.app(scope, receive, send)


class Harness:
    def __init__(self, principal: Principal | None, clock: list[float] | None = None, **hub: Any) -> None:
        self.clock = clock
        self.observatory = Observatory(ObservatoryConfig(), **({"clock": lambda: clock[0]} if clock else {}))
        directory = InProcessDirectory(SPEC, {"observatory": self.observatory})
        self.hub = ObservatoryHub(directory, ObservatoryHubConfig(**{"poll_wait_s": 0.2, **hub}))
        app = FastAPI()
        app.state.memesh = SimpleNamespace(observatory=self.hub)
        install_error_handlers(app)
        app.include_router(router)
        app.add_middleware(AsOperator, principal=principal)
        self.client = TestClient(app)

    def record(self, *events: dict[str, Any]) -> None:
        assert self.client.portal is not None
        self.client.portal.call(self.observatory.record, list(events), 0)

    def close(self) -> None:
        """Shut the hub down on the app's loop (ends its streams, stops its poll loop)."""
        assert self.client.portal is not None
        self.client.portal.call(self.hub.close)

    def wait_for_streams(self, n: int, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.hub.streams_active != n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.hub.streams_active == n


def as_operator(principal: Principal | None, **options: Any) -> Harness:
    return Harness(principal, **options)


@pytest.fixture
def harness() -> Iterator[Harness]:
    """A ServiceAdmin's session on a fresh app."""
    h = as_operator(SERVICE_ADMIN)
    with h.client:
        yield h
        h.close()


def hops(frames: list[str]) -> list[Any]:
    out: list[Any] = []
    for frame in frames:
        body = json.loads(frame)
        out.append("resync" if body == {"resync": True} else body["hop_index"])
    return out


def receive(ws: Any, n: int) -> list[str]:
    return [ws.receive_text() for _ in range(n)]


# -- GET /events ----------------------------------------------------------------


def test_events_are_newest_last_capped_and_content_free(harness: Harness) -> None:
    harness.record(*(hop(n, "t1" if n % 2 else "t2") for n in range(6)))
    r = harness.client.get(EVENTS)
    assert r.status_code == 200
    assert [e["hop_index"] for e in r.json()] == [0, 1, 2, 3, 4, 5]
    assert all(set(e) == EVENT_FIELDS for e in r.json())
    assert [e["hop_index"] for e in harness.client.get(EVENTS, params={"limit": 2}).json()] == [4, 5]
    assert len(harness.client.get(EVENTS, params={"limit": 10**9}).json()) == 6  # clamped, not refused


def test_a_project_admin_sees_only_its_tenant() -> None:
    h = as_operator(T1_ADMIN)
    with h.client:
        h.record(hop(1, "t1"), hop(2, "t2"), hop(3, "t1"))
        assert [e["hop_index"] for e in h.client.get(EVENTS).json()] == [1, 3]
        with h.client.websocket_connect(STREAM) as ws:
            assert hops(receive(ws, 2)) == [1, 3]
            h.record(hop(4, "t2"), hop(5, "t1"))
            assert hops(receive(ws, 1)) == [5]
        h.close()


def test_since_filters_by_receive_time() -> None:
    clock = [1_767_323_045.0]  # 2026-01-02T03:04:05Z
    h = as_operator(SERVICE_ADMIN, clock=clock)
    with h.client:
        h.record(hop(1, ts="2026-01-02T03:04:05Z"))
        clock[0] += 10
        h.record(hop(2, ts="2026-01-02T03:04:15Z"))
        r = h.client.get(EVENTS, params={"since": "2026-01-02T03:04:10Z"})
        assert [e["hop_index"] for e in r.json()] == [2]
        r = h.client.get(EVENTS, params={"since": "2026-01-02T03:04:05Z"})  # since = a seen ts: >=, never skips
        assert [e["hop_index"] for e in r.json()] == [1, 2]
        with h.client.websocket_connect(f"{STREAM}?since=2026-01-02T03:04:10Z") as ws:
            assert hops(receive(ws, 1)) == [2]
        h.close()


@pytest.mark.parametrize("params", [{"since": "yesterday"}, {"since": "2026-01-02T03:04:05"}, {"limit": "0"}, {"limit": "x"}])
def test_bad_query_values_are_400_validation(harness: Harness, params: dict[str, str]) -> None:
    r = harness.client.get(EVENTS, params=params)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "validation" and set(r.json()) == {"error"}


def test_no_session_is_401_and_a_non_admin_is_403() -> None:
    for principal, status, code in ((None, 401, "unauthorized"), (WRITER, 403, "forbidden")):
        h = as_operator(principal)
        with h.client:
            r = h.client.get(EVENTS)
            assert (r.status_code, r.json()["error"]["code"]) == (status, code)
            with pytest.raises(WebSocketDenialResponse) as denied, h.client.websocket_connect(STREAM):
                pass
            assert denied.value.status_code == status
            assert h.hub.streams_active == 0


# -- the stream -------------------------------------------------------------------


def test_replay_then_live_without_gap_or_duplicate(harness: Harness) -> None:
    harness.record(hop(1), hop(2), hop(3))
    with harness.client.websocket_connect(STREAM) as ws:
        assert hops(receive(ws, 3)) == [1, 2, 3]
        harness.record(hop(4))
        harness.record(hop(5), hop(6))
        assert hops(receive(ws, 3)) == [4, 5, 6]
        assert harness.hub.figures().replayed == 3
    harness.wait_for_streams(0)


def test_a_consumer_that_falls_behind_gets_the_resync_marker_then_newer_events() -> None:
    h = as_operator(SERVICE_ADMIN, channel_capacity=2)
    with h.client:
        with h.client.websocket_connect(STREAM) as ws:
            h.wait_for_streams(1)
            h.record(*(hop(n) for n in range(1, 11)))  # one fan-out of 10 into a queue of 2
            frames = receive(ws, 3)
            assert frames[0] == '{"resync":true}'
            assert hops(frames) == ["resync", 9, 10]
            h.record(hop(11))
            assert hops(receive(ws, 1)) == [11]
        assert h.hub.lagged == 8
        h.close()


def test_a_malformed_since_is_400_before_the_upgrade(harness: Harness) -> None:
    with pytest.raises(WebSocketDenialResponse) as denied, harness.client.websocket_connect(f"{STREAM}?since=not-a-time"):
        pass
    assert denied.value.status_code == 400 and denied.value.json()["error"]["code"] == "validation"
    assert harness.hub.streams_active == 0


def test_the_stream_over_the_cap_is_429_before_the_upgrade_and_slots_come_back() -> None:
    h = as_operator(SERVICE_ADMIN, max_streams=2)
    with h.client:
        with h.client.websocket_connect(STREAM), h.client.websocket_connect(STREAM):
            h.wait_for_streams(2)
            with pytest.raises(WebSocketDenialResponse) as denied, h.client.websocket_connect(STREAM):
                pass
            assert denied.value.status_code == 429
            assert denied.value.json()["error"]["code"] == "quota_exceeded"
            assert "retry-after" not in denied.value.headers
        h.wait_for_streams(0)  # both released when their clients went away
        with h.client.websocket_connect(STREAM):
            h.wait_for_streams(1)
        h.wait_for_streams(0)
        h.close()


def test_closing_the_hub_closes_the_stream_with_1001(harness: Harness) -> None:
    from starlette.websockets import WebSocketDisconnect

    with harness.client.websocket_connect(STREAM) as ws:
        harness.wait_for_streams(1)
        harness.close()
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1001
    harness.wait_for_streams(0)

"""The Observatory actor's sequence and long-poll, the head's ObservatoryHub, and /metrics.

In-process, no Ray: the hub reads a real :class:`Observatory` through an
:class:`InProcessDirectory` holding just that actor, or the whole in-process
core where a test needs real walks.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
import time
from typing import Any

import pytest

from actors.directory import InProcessDirectory
from actors.observatory import MAX_WAIT_S, Observatory, ObservatoryConfig
from api.console.observatory import parse_since
from head.facade import Memesh
from head.observatory_hub import RESYNC, ObservatoryHub, ObservatoryHubConfig, Subscription
from mesh.deployment import DirectorySpec
from mesh.errors import QuotaExceeded, ValidationFailed
from mesh.observation import PackedHops, WalkTrace
from mesh.walk import Criterion, HopEvent, Outcome
from tests.unit.conftest import Api
from tests.unit.helpers import EVENT_FIELDS
from tests.unit.test_propagation import agent, settle, write

SPEC = DirectorySpec("test", 1, 1, 1)


def hop(n: int, tenant: str = "t1", ts: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    """A content-free event; ``hop_index`` doubles as the test's event id."""
    return {
        "diff_id": "d",
        "from_node": None,
        "to_node": f"n{n}",
        "hop_index": n,
        "energy_before": 1.0,
        "energy_after": 0.9,
        "walk_layer": 0,
        "outcome": "delivered",
        "relevance": 0.7,
        "standing": 2.1,
        "criterion": "standout",
        "salience": 0.5,
        "ts": ts,
        "tenant_id": tenant,
        "origin_agent": "a",
    }


def make_hub(**config: Any) -> tuple[Observatory, ObservatoryHub]:
    observatory = Observatory(ObservatoryConfig(max_events=config.pop("max_events", 1000)))
    directory = InProcessDirectory(SPEC, {"observatory": observatory})
    return observatory, ObservatoryHub(directory, ObservatoryHubConfig(**{"poll_wait_s": 0.2, **config}))


async def take_events(sub: Subscription, want: int, timeout_s: float = 5.0) -> list[Any]:
    """Items (events as hop numbers, markers as RESYNC) until ``want`` events arrived or the time is up."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while sum(1 for x in got if x is not RESYNC) < want and time.monotonic() < deadline:
        got += [x if x is RESYNC else x[1]["hop_index"] for x in await sub.take(0.2)]
    return got


# -- the actor ----------------------------------------------------------------


def test_packed_hops_read_back_as_the_events_they_were_made_of() -> None:
    """Every outcome and criterion, with and without standing, read back equal by index, slice, iteration and
    after pickling; the pickle holds plain columns (no event objects, no enums)."""
    events = [HopEvent(None, "s0", 0, 0.9, 0.9, Outcome.DELIVERED)]
    for n, (outcome, criterion) in enumerate(itertools.product(Outcome, Criterion)):
        events.append(
            HopEvent(f"s{n}", f"n{n + 1}", n % 4, 0.9, 0.5 + n / 100, outcome, n / 50, None if n % 2 else n * 0.1, criterion)
        )
    packed = PackedHops.of(events)
    assert len(packed) == len(events) and list(packed) == events and packed[3] == events[3] and packed[2:5] == events[2:5]
    wire = pickle.dumps(packed)
    assert b"HopEvent" not in wire and b"Outcome" not in wire and b"Criterion" not in wire
    again = pickle.loads(wire)
    assert list(again) == events and [e.outcome for e in again] == [e.outcome for e in events]
    assert all(type(e.outcome) is Outcome for e in again)
    assert len(PackedHops.of([])) == 0 and list(pickle.loads(pickle.dumps(PackedHops.of([])))) == []


async def test_a_walks_trace_reads_back_as_the_events_it_holds_with_the_documented_fields() -> None:
    """``record_walks`` keeps a walk's events packed; each reads back with the fields and rounding of
    docs/observatory.md, filtered by tenant and forgotten by diff as events given whole are."""
    observatory = Observatory(ObservatoryConfig())
    _, base, _ = await observatory.events_after(0, 0, 0)
    seed = HopEvent(None, "s0", 0, 0.8, 0.8, Outcome.DELIVERED)
    edge = HopEvent("s0", "b1", 1, 0.8, 0.61234567, Outcome.DELIVERED, 0.712345678, 2.123456, Criterion.STANDOUT)
    ts = "2026-01-01T00:00:00Z"
    first = pickle.loads(pickle.dumps(WalkTrace("d1", "t1", "a1", 0, 0.5, ts, PackedHops.of([seed, edge]))))  # as walks send it
    other = WalkTrace("d2", "t2", "a2", 2, 1.0, ts, [HopEvent(None, "s9", 0, 1.0, 1.0, Outcome.DELIVERED)])
    await observatory.record_walks([first, other], dropped_before=3)
    events, top, _ = await observatory.events_after(base, 10, 0)
    assert [seq for seq, _ in events] == [base + 1, base + 2, base + 3] and top == base + 3
    assert events[1][1] == {
        "diff_id": "d1",
        "from_node": "s0",
        "to_node": "b1",
        "hop_index": 1,
        "energy_before": 0.8,
        "energy_after": 0.612346,
        "walk_layer": 0,
        "outcome": "delivered",
        "relevance": 0.712346,
        "standing": 2.1235,
        "criterion": "standout",
        "salience": 0.5,
        "ts": ts,
        "tenant_id": "t1",
        "origin_agent": "a1",
    }
    assert events[0][1]["criterion"] is None and events[0][1]["standing"] is None
    assert set(events[2][1]) == EVENT_FIELDS
    assert [e["to_node"] for e in await observatory.snapshot(None, 10, "t2")] == ["s9"]
    assert await observatory.forget(["d1"]) == 2
    assert [e["diff_id"] for e in await observatory.snapshot(None, 10, None)] == ["d2"]
    assert (await observatory.stats())["dropped"] == 3


async def test_events_get_contiguous_sequence_numbers_and_keep_their_fields() -> None:
    observatory = Observatory(ObservatoryConfig())
    _, base, _ = await observatory.events_after(0, 0, 0)
    await observatory.record([hop(1), hop(2)])
    await observatory.record([hop(3)])
    events, top, evicted_before = await observatory.events_after(base, 10, 0)
    assert [seq for seq, _ in events] == [base + 1, base + 2, base + 3] and top == base + 3
    assert evicted_before == base  # nothing evicted yet
    assert all(set(e) == EVENT_FIELDS for _, e in events)
    assert [e["hop_index"] for _, e in (await observatory.events_after(base + 1, 1, 0))[0]] == [2]


async def test_events_after_answers_at_once_when_newer_events_exist() -> None:
    observatory = Observatory(ObservatoryConfig())
    await observatory.record([hop(1)])
    started = time.monotonic()
    events, _, _ = await observatory.events_after(0, 10, 5.0)
    assert len(events) == 1 and time.monotonic() - started < 0.5


async def test_events_after_waits_until_timeout_or_until_an_event_is_recorded() -> None:
    observatory = Observatory(ObservatoryConfig())
    _, top, _ = await observatory.events_after(0, 0, 0)
    started = time.monotonic()
    assert (await observatory.events_after(top, 10, 0.3))[0] == []
    assert 0.25 <= time.monotonic() - started < 2.0
    waiter = asyncio.create_task(observatory.events_after(top, 10, 10.0))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await observatory.record([hop(7)])
    events, _, _ = await asyncio.wait_for(waiter, 2.0)
    assert [e["hop_index"] for _, e in events] == [7] and time.monotonic() - started < 1.0
    assert MAX_WAIT_S <= 60  # the wait is always bounded


async def test_eviction_is_reported_by_evicted_before() -> None:
    observatory = Observatory(ObservatoryConfig(max_events=3))
    _, base, _ = await observatory.events_after(0, 0, 0)
    await observatory.record([hop(n) for n in range(5)])
    events, top, evicted_before = await observatory.events_after(base, 10, 0)
    assert [e["hop_index"] for _, e in events] == [2, 3, 4]
    assert evicted_before == base + 2 and top == base + 5


async def test_forget_drops_a_diffs_events_without_looking_like_eviction() -> None:
    observatory = Observatory(ObservatoryConfig())
    _, base, _ = await observatory.events_after(0, 0, 0)
    await observatory.record([{**hop(1), "diff_id": "gone"}, hop(2), {**hop(3), "diff_id": "gone"}, hop(4)])
    assert await observatory.forget(["gone"]) == 2
    assert await observatory.forget(["gone"]) == 0
    events, top, evicted_before = await observatory.events_after(base, 10, 0)
    assert [(seq - base, e["hop_index"]) for seq, e in events] == [(2, 2), (4, 4)]
    assert evicted_before == base and top == base + 4
    assert [e["hop_index"] for _, e in (await observatory.events_after(base + 2, 10, 0))[0]] == [4]


async def test_old_events_age_out_and_since_compares_the_receive_stamp() -> None:
    now = [1_000_000.0]
    observatory = Observatory(ObservatoryConfig(max_age_s=60), clock=lambda: now[0])
    await observatory.record([hop(1, ts="1970-01-12T13:46:40Z")])  # ts == clock: stamp 1_000_000
    now[0] += 30
    await observatory.record([hop(2, ts="1970-01-01T00:00:00Z")])  # an old ts never lowers the stamp
    assert [e["hop_index"] for e in await observatory.snapshot(1_000_000.0, 10, None)] == [1, 2]
    assert [e["hop_index"] for e in await observatory.snapshot(1_000_000.5, 10, None)] == [2]
    now[0] += 45
    assert [e["hop_index"] for e in await observatory.snapshot(None, 10, None)] == [2]
    assert (await observatory.stats())["depth"] == 1


async def test_the_stamp_is_never_earlier_than_the_events_ts() -> None:
    observatory = Observatory(ObservatoryConfig(), clock=lambda: 100.0)
    await observatory.record([hop(1, ts="2026-01-01T00:00:00Z")])
    since = parse_since("2026-01-01T00:00:00Z")
    assert [e["hop_index"] for e in await observatory.snapshot(since, 10, None)] == [1]


async def test_snapshot_is_newest_last_capped_and_tenant_filtered() -> None:
    observatory = Observatory(ObservatoryConfig())
    await observatory.record([hop(n, "t1" if n % 2 else "t2") for n in range(10)])
    assert [e["hop_index"] for e in await observatory.snapshot(None, 3, None)] == [7, 8, 9]
    assert [e["hop_index"] for e in await observatory.snapshot(None, 3, "t1")] == [5, 7, 9]
    assert await observatory.snapshot(None, 3, "t3") == []


async def test_replay_pages_cover_exactly_up_to_the_bound() -> None:
    observatory = Observatory(ObservatoryConfig())
    _, base, _ = await observatory.events_after(0, 0, 0)
    await observatory.record([hop(n, "t1" if n % 3 else "t2") for n in range(10)])
    upto = base + 8  # events 0..7
    seen: list[int] = []
    cursor = 0
    for _ in range(10):
        page, through = await observatory.replay_page(cursor, upto, 2, None, "t1")
        seen += [e["hop_index"] for _, e in page]
        if through >= upto:
            break
        cursor = through
    assert seen == [1, 2, 4, 5, 7]


# -- the hub ------------------------------------------------------------------


async def test_every_stream_gets_every_live_event_and_tenants_are_filtered() -> None:
    observatory, hub = make_hub()
    everyone, t1 = await hub.subscribe(None), await hub.subscribe("t1")
    try:
        await observatory.record([hop(1, "t1"), hop(2, "t2"), hop(3, "t1")])
        assert await take_events(everyone, 3) == [1, 2, 3]
        assert await take_events(t1, 2) == [1, 3]
        assert await t1.take(0.3) == []  # t2's event never arrives
    finally:
        everyone.close()
        t1.close()
        await hub.close()


async def test_a_slow_stream_lags_alone() -> None:
    observatory, hub = make_hub(channel_capacity=4)
    slow, fast = await hub.subscribe(None), await hub.subscribe(None)
    try:
        fast_seen: list[Any] = []
        for n in range(1, 11, 2):
            await observatory.record([hop(n), hop(n + 1)])
            fast_seen += await take_events(fast, 2)
        assert fast_seen == list(range(1, 11))  # no marker: it kept up
        assert await take_events(slow, 4) == [RESYNC, 7, 8, 9, 10]
        assert hub.lagged == 6
    finally:
        slow.close()
        fast.close()
        await hub.close()


async def test_a_lagging_stream_sees_the_marker_where_the_gap_is() -> None:
    observatory, hub = make_hub(channel_capacity=4)
    slow = await hub.subscribe(None)
    try:
        await observatory.record([hop(1), hop(2)])
        assert await take_events(slow, 2) == [1, 2]
        await observatory.record([hop(n) for n in range(3, 13)])
        assert await take_events(slow, 4) == [RESYNC, 9, 10, 11, 12]
        assert hub.lagged == 6 and hub.figures().lagged == 6
        await observatory.record([hop(13)])
        assert await take_events(slow, 1) == [13]  # then the stream goes on
    finally:
        slow.close()
        await hub.close()


async def test_the_stream_cap_refuses_the_next_and_a_closed_stream_frees_its_slot() -> None:
    _, hub = make_hub(max_streams=2)
    first, second = await hub.subscribe(None), await hub.subscribe("t1")
    assert hub.streams_active == 2
    with pytest.raises(QuotaExceeded):
        await hub.subscribe(None)
    assert hub.streams_active == 2
    first.close()
    first.close()  # idempotent: one slot back, not two
    third = await hub.subscribe(None)
    assert hub.streams_active == 2
    second.close()
    third.close()
    assert hub.streams_active == 0
    await hub.close()


async def test_the_poll_loop_runs_only_while_a_stream_is_open() -> None:
    _, hub = make_hub()
    assert hub._task is None
    sub = await hub.subscribe(None)
    task = hub._task
    assert task is not None and not task.done()
    sub.close()
    assert hub._task is None
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 2.0)
    assert task.done()
    again = await hub.subscribe(None)
    assert hub._task is not None and hub._task is not task
    again.close()
    await hub.close()


async def test_replay_then_live_has_no_gap_and_no_duplicate_under_concurrent_recording() -> None:
    observatory, hub = make_hub(max_events=100_000, replay_page=7)
    counter = iter(range(1_000_000))
    stop = asyncio.Event()

    async def recorder() -> None:
        while not stop.is_set():
            await observatory.record([hop(next(counter)) for _ in range(3)])
            await asyncio.sleep(0.001)

    writing = asyncio.create_task(recorder())
    try:
        await asyncio.sleep(0.05)
        sub = await hub.subscribe(None)
        seen = [e["hop_index"] async for page in hub.replay(sub, None) for e in page]
        await asyncio.sleep(0.1)
        stop.set()
        await writing
        total = (await observatory.stats())["recorded"]
        seen += [x for x in await take_events(sub, total - len(seen)) if x is not RESYNC]
        assert seen == list(range(total))
        assert hub.replayed > 0
        sub.close()
    finally:
        stop.set()
        await hub.close()


async def test_replay_honours_since_and_the_tenant() -> None:
    now = [1_000.0]
    observatory = Observatory(ObservatoryConfig(), clock=lambda: now[0])
    hub = ObservatoryHub(InProcessDirectory(SPEC, {"observatory": observatory}), ObservatoryHubConfig(poll_wait_s=0.2))
    await observatory.record([hop(1, "t1", ts="1970-01-01T00:00:00Z"), hop(2, "t2", ts="1970-01-01T00:00:00Z")])
    now[0] = 1_300.0
    await observatory.record([hop(3, "t1", ts="1970-01-01T00:00:00Z"), hop(4, "t2", ts="1970-01-01T00:00:00Z")])
    sub = await hub.subscribe("t1")
    try:
        assert [e["hop_index"] async for page in hub.replay(sub, None) for e in page] == [1, 3]
        assert [e["hop_index"] async for page in hub.replay(sub, 1_150.0) for e in page] == [3]
    finally:
        sub.close()
        await hub.close()


async def test_closing_the_hub_ends_its_streams() -> None:
    _, hub = make_hub()
    sub = await hub.subscribe(None)
    await hub.close()
    assert sub.ended and sub.failure is None and await sub.take(5.0) == []
    sub.close()
    assert hub.streams_active == 0


# -- since --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", 1767323045.0),
        ("2026-01-02t03:04:05z", 1767323045.0),
        ("2026-01-02T03:04:05.250Z", 1767323045.25),
        ("2026-01-02T03:04:05.123456789Z", 1767323045.123456),
        ("2026-01-02T05:04:05+02:00", 1767323045.0),
        ("2026-01-02T05:04:05 02:00", 1767323045.0),  # an unencoded "+" decoded as a space
        ("2026-01-02T01:04:05-02:00", 1767323045.0),
        ("2026-01-02 03:04:05Z", 1767323045.0),
    ],
)
def test_since_accepts_rfc3339(text: str, expected: float) -> None:
    assert parse_since(text) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "yesterday",
        "2026-01-02",
        "2026-01-02T03:04:05",
        "2026-13-02T03:04:05Z",
        "2026-01-02T03:04Z",
        "1767323045",
        "2026-01-02T25:00:00Z",
        "\uff12\uff10\uff12\uff16-01-02T03:04:05Z",  # full-width digits
    ],
)
def test_since_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValidationFailed):
        parse_since(text)


def test_no_since_means_the_whole_window() -> None:
    assert parse_since(None) is None


# -- real walks and /metrics ---------------------------------------------------


async def test_walks_record_content_free_events_with_exactly_the_spec_fields(core: Memesh) -> None:
    writer, _ = await agent(core, "t1")
    reader, _ = await agent(core, "t1")
    await core.inbox.place_beacon(reader, "kubernetes helm deployment")
    await write(core, writer, "kubernetes helm deployment runbook updated", salience=0.8)
    await settle(core)
    events: list[dict[str, Any]] = []
    for _ in range(50):
        events = await core.observatory.snapshot(None, 1000, None)
        if events:
            break
        await asyncio.sleep(0.05)
    assert events and all(set(e) == EVENT_FIELDS for e in events)
    seed = events[0]
    assert seed["from_node"] is None and seed["hop_index"] == 0 and seed["tenant_id"] == "t1"
    assert seed["origin_agent"] == writer.agent_id and seed["walk_layer"] in (0, 1, 2) and seed["ts"].endswith("Z")
    assert {e["outcome"] for e in events} <= {"delivered", "deduped", "pruned", "exhausted"}
    assert all("runbook" not in str(v) for e in events for v in e.values())  # no content
    assert await core.observatory.snapshot(None, 1000, "t2") == []


async def test_metrics_expose_the_five_names_once(api: Api) -> None:
    key = await api.key()
    await api.send("POST", "/v1/cells", key, {"content": "the build runs on ci", "cell_type": "Fact"})
    await settle(api.memesh)
    r = await api.http.get("/metrics")  # redirects are not followed: a mount would answer 307
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "service_observatory_events_recorded_total",
        'service_observatory_events_dropped_total{reason="lagged"}',
        'service_observatory_events_dropped_total{reason="saturated"}',
        "service_observatory_buffer_depth",
        "service_observatory_streams_active",
        "service_observatory_replay_events_total",
    ):
        assert f"\n{name} " in text, name
    assert "_total_total" not in text
    assert "tenant" not in text and "t1" not in text


async def test_each_app_has_its_own_registry(api: Api) -> None:
    from api.app import create_app

    other = create_app(api.memesh)  # a second app in the same process: no duplicate-name error
    assert other is not api.app

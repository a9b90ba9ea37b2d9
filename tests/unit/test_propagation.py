"""Beacons, agent nodes, the energy walk and the inbox, in-process (hash engine)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from head.facade import Memesh
from mesh.identity import Principal
from mesh.model import CellType, NewCell
from tests.unit.conftest import ADMIN, Api, assert_error


async def agent(core: Memesh, tenant: str = "t1", role: str = "Writer", scope: list[str] | None = None) -> tuple[Principal, str]:
    issued = await core.identity.issue(ADMIN, tenant, "agent", [role], scope)
    return await core.identity.authenticate(issued.plaintext_secret), issued.plaintext_secret


async def write(core: Memesh, who: Principal, content: str, **kw: Any) -> str:
    (cell,) = await core.memory.write_cells(who, [NewCell(content=content, cell_type=CellType.FACT, **kw)])
    await settle(core)
    return cell.id


async def settle(core: Memesh) -> None:
    """Wait until every walk started so far has finished (the walks run in the background)."""
    for i in range(core.directory.spec.scene_shards):
        await core.directory.scene_shard(i).settle(30.0)


async def drain(core: Memesh, who: Principal, **kw: Any) -> dict[str, Any]:
    page = await core.inbox.pull(who, kw.get("since"), kw.get("ack"), kw.get("limit"))
    return {
        "items": json.loads(page.items_json),
        "cursor": page.cursor,
        "window_high": page.window_high,
        "has_more": page.has_more,
    }


async def test_a_related_cell_reaches_a_beacon_and_an_unrelated_one_does_not(core: Memesh) -> None:
    a, _ = await agent(core)
    b, _ = await agent(core)
    await core.inbox.place_beacon(a, "kubernetes helm deployment")
    cell_id = await write(core, b, "kubernetes helm deployment runbook updated", salience=0.8)
    await write(core, b, "bananas are a yellow fruit")
    page = await drain(core, a)
    assert [i["diff"]["cell_id"] for i in page["items"]] == [cell_id]
    item = page["items"][0]
    assert item["delivery_seq"] == 1
    assert item["delivery"]["node_kind"] == "beacon" and item["delivery"]["hops"] >= 1
    assert 0 < item["delivery"]["energy"] < item["diff"]["energy"]
    assert item["delivery"]["score"] >= 0.3
    assert item["diff"]["provenance"]["origin_agent"] == b.agent_id and len(item["diff"]["embedding"]) == 384
    assert (await drain(core, b))["items"] == []  # never the writer's own


async def test_walks_never_leave_the_tenant(core: Memesh) -> None:
    writer, _ = await agent(core, "t1")
    stranger, _ = await agent(core, "t2")
    await core.inbox.place_beacon(stranger, "kubernetes helm deployment")
    await write(core, stranger, "kubernetes helm deployment notes of t2")
    await write(core, writer, "kubernetes helm deployment runbook updated")
    page = await drain(core, stranger)
    assert page["items"] == [] and page["window_high"] == 0


async def test_agent_nodes_follow_what_agents_write_and_a_diff_can_arrive_twice(core: Memesh) -> None:
    expert, _ = await agent(core)
    writer, _ = await agent(core)
    await write(core, expert, "postgres replication lag alerts")
    await core.inbox.place_beacon(expert, "postgres replication lag")
    cell_id = await write(core, writer, "postgres replication lag alerts fired again")
    items = (await drain(core, expert))["items"]
    assert {i["delivery"]["node_kind"] for i in items} == {"agent", "beacon"}
    assert {i["diff"]["cell_id"] for i in items} == {cell_id}
    assert len({i["diff"]["id"] for i in items}) == 1  # one diff, two deliveries (rule 10)


async def test_removed_and_expired_beacons_attract_nothing(core: Memesh) -> None:
    owner, _ = await agent(core)
    other, _ = await agent(core)
    writer, _ = await agent(core)
    beacon = await core.inbox.place_beacon(owner, "redis cache eviction")
    expiring = await core.inbox.place_beacon(other, "redis cache eviction", ttl_s=1.0)  # the shortest ttl allowed
    assert expiring.expires_at is not None
    await asyncio.sleep(1.05)
    from mesh.errors import NotFound

    try:
        await core.inbox.remove_beacon(other, beacon.id)
        raise AssertionError("another agent removed the beacon")
    except NotFound:
        pass
    await core.inbox.remove_beacon(owner, beacon.id)
    await core.inbox.remove_beacon(owner, beacon.id)  # idempotent
    await write(core, writer, "redis cache eviction policy changed")
    assert (await drain(core, owner))["items"] == [] and (await drain(core, other))["items"] == []


async def test_pull_over_http(api: Api, make_core: Callable[..., Memesh]) -> None:
    core = api.memesh
    reader_key = await api.key(roles=("Reader",))
    writer_key = await api.key()
    placed = await api.send("POST", "/v1/beacons", reader_key, {"interest": "grpc deadline exceeded retries"})
    assert placed.status_code == 200 and set(placed.json()) == {"node_id"}
    for i in range(3):
        r = await api.send(
            "POST", "/v1/cells", writer_key, {"content": f"grpc deadline exceeded retries case {i}", "cell_type": "Lesson"}
        )
        assert r.status_code == 201
    await settle(core)
    page = (await api.send("POST", "/v1/inbox:pull", reader_key, {})).json()
    assert set(page) == {"items", "cursor", "window_high", "has_more"}
    assert len(page["items"]) == 3 and page["cursor"] == 0 and page["window_high"] == 3 and page["has_more"] is False
    scores = [i["delivery"]["score"] for i in page["items"]]
    assert scores == sorted(scores, reverse=True)
    no_body = await api.http.post("/v1/inbox:pull", headers={"x-service-key": reader_key})
    assert no_body.status_code == 200 and len(no_body.json()["items"]) == 3
    acked = (await api.send("POST", "/v1/inbox:pull", reader_key, {"ack": 2, "limit": 1})).json()
    assert acked["cursor"] == 2 and [i["delivery_seq"] for i in acked["items"]] == [3]
    assert (await api.send("POST", "/v1/inbox:pull", reader_key, {"ack": 1})).json()["cursor"] == 2
    assert_error(await api.send("POST", "/v1/inbox:pull", reader_key, {"ack": -1}), 400, "validation")
    assert_error(await api.send("POST", "/v1/inbox:pull", reader_key, {"ack": "1"}), 422, "validation")
    assert_error(await api.send("POST", "/v1/inbox:pull", reader_key, {"agent_id": "x"}), 422, "validation")
    assert_error(await api.send("POST", "/v1/inbox:pull", None, {}), 401, "unauthorized")
    bad_type = await api.http.post(
        "/v1/inbox:pull", content=b"ack=1", headers={"x-service-key": reader_key, "content-type": "text/plain"}
    )
    assert_error(bad_type, 415, "validation")
    beacon_id = placed.json()["node_id"]
    assert_error(await api.send("DELETE", f"/v1/beacons/{beacon_id}", writer_key), 404, "not_found")
    assert (await api.send("DELETE", f"/v1/beacons/{beacon_id}", reader_key)).json() == {"ok": True}
    assert_error(
        await api.send("POST", "/v1/beacons", reader_key, {"interest": "x", "ttl_s": 5, "expires_at": "2030-01-01T00:00:00Z"}),
        400,
        "validation",
    )
    assert_error(
        await api.send("POST", "/v1/beacons", reader_key, {"interest": "x", "expires_at": "2001-01-01T00:00:00Z"}),
        400,
        "validation",
    )


async def test_the_inbox_bucket_limits_pulls(make_core: Callable[..., Memesh]) -> None:
    core = make_core(rate_limits={"inbox": {"rate": 0.1, "burst": 2}})
    api = Api(core)
    key = await api.key()
    statuses = [(await api.send("POST", "/v1/inbox:pull", key, {})).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    limited = await api.send("POST", "/v1/inbox:pull", key, {})
    assert_error(limited, 429, "rate_limited") and int(limited.headers["retry-after"]) >= 1
    assert (await api.send("POST", "/v1/query", key, {"text": "x", "k": 1})).status_code == 200  # other buckets unaffected
    await core.close()


async def test_beacon_quota(make_core: Callable[..., Memesh]) -> None:
    core = make_core()
    core.inbox.limits = type(core.inbox.limits)(max_beacons_per_agent=2)
    who, _ = await agent(core)
    await core.inbox.place_beacon(who, "one")
    await core.inbox.place_beacon(who, "two")
    from mesh.errors import QuotaExceeded

    try:
        await core.inbox.place_beacon(who, "three")
        raise AssertionError("quota not enforced")
    except QuotaExceeded:
        pass
    await core.close()


async def test_patterns_start_no_walk_and_replays_count_no_write_twice(make_core: Callable[..., Memesh]) -> None:
    first = make_core()
    listener, _ = await agent(first)
    writer, _ = await agent(first)
    await first.inbox.place_beacon(listener, "flaky integration tests")
    for _ in range(2):
        await write(first, writer, "flaky integration tests retried")
    assert len((await drain(first, listener))["items"]) == 2
    scene_id = (
        await first.memory.write_cells(writer, [NewCell(content="flaky integration tests retried", cell_type=CellType.FACT)])
    )[0].scene_id
    await settle(first)
    report = await first.memory.consolidate(writer, scene_id or "")
    assert report.patterns
    await settle(first)
    assert len((await drain(first, listener))["items"]) == 3  # the pattern reached nobody
    from mesh.seam import beacon_set_index

    index = beacon_set_index(first.directory, writer.agent_id)
    count = first.directory.beacon_set(index).target.agents[writer.agent_id].count  # type: ignore[attr-defined]
    await first.close()
    second = make_core()
    await second.health()
    await settle(second)
    assert len((await drain(second, listener))["items"]) == 3
    await second.directory.beacon_set(index).health()
    assert second.directory.beacon_set(index).target.agents[writer.agent_id].count == count  # type: ignore[attr-defined]
    await second.close()


async def test_a_retried_ack_answers_only_once_the_cursor_is_committed(core: Memesh) -> None:
    from mesh.errors import StorageUnavailable

    listener, _ = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "certificate expiry warnings")
    await write(core, writer, "certificate expiry warnings for the api gateway")
    shard = next(
        core.directory.inbox_shard(i).target
        for i in range(2)
        if listener.agent_id in core.directory.inbox_shard(i).target._inboxes
    )  # type: ignore[attr-defined]
    assert (await core.inbox.pull(listener, None, None, None)).window_high == 1  # shown: it may be acked
    table = shard._cursors.rows  # the RowTable under the KeyedTable: a first cursor is appended, a later one upserted
    real_append, real_upsert, calls = table.append, table.upsert, []

    async def fail_first_commit(commit: Any, rows: Any, *key: str) -> None:
        if rows.num_rows:
            calls.append(rows.num_rows)
            if len(calls) == 1:
                raise StorageUnavailable("disk full")
        await commit(rows, *key)

    table.append = lambda rows: fail_first_commit(real_append, rows)
    table.upsert = lambda rows, key="id": fail_first_commit(real_upsert, rows, key)
    try:
        await core.inbox.pull(listener, None, 1, None)
        raise AssertionError("the failed cursor commit was acknowledged")
    except StorageUnavailable:
        pass
    page = await core.inbox.pull(listener, None, 1, None)  # the same ack again: now it must really commit
    assert page.cursor == 1 and len(calls) == 2
    stored = (await shard._cursors.rows.read_all()).to_pylist()
    assert {"id": listener.agent_id, "cursor": 1} in stored


def hold_walks(core: Memesh) -> asyncio.Event:
    """Scene shard 0's walks wait until the returned event is set (its queue fills meanwhile)."""
    walker = core.directory.walker(0).target  # type: ignore[attr-defined]  # scene shard 0 walks on walker 0
    walking, release = walker.walk, asyncio.Event()

    async def held(*args: Any, **kw: Any) -> Any:
        await release.wait()
        return await walking(*args, **kw)

    walker.walk = held
    return release


async def test_writes_wait_while_a_shards_walk_backlog_is_at_its_bound(make_core: Callable[..., Memesh]) -> None:
    """A batch leaves 60 walks queued (walked one at a time); past the bound of 10 the next write is a 429 with
    Retry-After that stores nothing; once the walks drain, writes go through again and every walk ran."""
    core = make_core(propagation={"walk_batch": 1, "max_walk_backlog": 10}, ray={"scene_shards": 1})
    try:
        api = Api(core)
        key = (await agent(core))[1]
        release = hold_walks(core)  # how many walks drain between two requests is timing
        many = {"cells": [{"content": f"runbook step {i} for the deploy", "cell_type": "Fact"} for i in range(60)]}
        assert (await api.send("POST", "/v1/cells:batch", key, many)).status_code == 201
        refused = await api.send("POST", "/v1/cells", key, {"content": "one more", "cell_type": "Fact"})
        assert_error(refused, 429, "rate_limited")
        assert refused.headers["retry-after"] == "1"
        release.set()
        await settle(core)
        health = await core.health()
        assert health["walk_backlog"] == 0 and health["cells"] == 60  # the refused write stored nothing
        found = await api.send("POST", "/v1/query", key, {"text": "one more", "k": 100, "ranking": "dense"})
        assert "one more" not in [n["content"] for n in found.json()] and len(found.json()) == 60
        assert (await api.send("POST", "/v1/cells", key, {"content": "one more", "cell_type": "Fact"})).status_code == 201
        assert (await core.health())["cells"] == 61
    finally:
        await core.close()


async def test_a_batch_across_shards_is_refused_whole_when_one_shard_is_at_its_bound(
    make_core: Callable[..., Memesh],
) -> None:
    from mesh.sharding import partition_key, shard_for

    core = make_core(propagation={"walk_batch": 1, "max_walk_backlog": 10}, ray={"scene_shards": 2})
    try:
        api = Api(core)
        _, key = await agent(core)
        projects = [f"p{i}" for i in range(20)]
        busy = projects[0]
        calm = next(p for p in projects if shard_for(partition_key("t1", p), 2) != shard_for(partition_key("t1", busy), 2))
        many = {"cells": [{"content": f"note {i}", "cell_type": "Fact", "project_id": busy} for i in range(60)]}
        assert (await api.send("POST", "/v1/cells:batch", key, many)).status_code == 201
        both = {
            "cells": [
                {"content": "calm side", "cell_type": "Fact", "project_id": calm},
                {"content": "busy side", "cell_type": "Fact", "project_id": busy},
            ]
        }
        assert_error(await api.send("POST", "/v1/cells:batch", key, both), 429, "rate_limited")
        await settle(core)
        assert (await core.health())["cells"] == 60  # neither side of the refused batch was stored
        assert (await api.send("POST", "/v1/cells:batch", key, both)).status_code == 201
    finally:
        await core.close()


async def test_a_tenant_flooding_the_walk_backlog_waits_and_another_tenant_does_not(
    make_core: Callable[..., Memesh],
) -> None:
    """The bound weighs shares: past it, the tenant holding the backlog is refused, one with nothing queued
    still writes (until twice the bound, which refuses everyone)."""
    core = make_core(propagation={"walk_batch": 1, "max_walk_backlog": 100}, ray={"scene_shards": 1})
    try:
        api = Api(core)
        _, flooder = await agent(core, tenant="t-flood")
        _, quiet = await agent(core, tenant="t-quiet")
        # Walks are held while the backlog is probed: how many drain between two requests is timing (a CI
        # run drained more than 50 between the batch and the next write once walks got cheaper).
        release = hold_walks(core)
        many = {"cells": [{"content": f"runbook step {i}", "cell_type": "Fact"} for i in range(150)]}
        assert (await api.send("POST", "/v1/cells:batch", flooder, many)).status_code == 201
        one_more = {"content": "one more", "cell_type": "Fact"}
        assert_error(await api.send("POST", "/v1/cells", flooder, one_more), 429, "rate_limited")
        mine = {"content": "my one note", "cell_type": "Fact"}
        assert (await api.send("POST", "/v1/cells", quiet, mine)).status_code == 201
        release.set()
        await settle(core)
        assert (await core.health())["cells"] == 151
    finally:
        await core.close()


async def test_a_stream_step_passes_what_the_read_scope_hides_and_then_waits(core: Memesh) -> None:
    """A delivery the key may not read (another project) ends the page's window like any other: the
    stream moves past it and the next step waits in the shard instead of returning at once (the WebSocket
    loop asked for it again and again while nothing readable came: a spin of two actor calls)."""
    scoped, _ = await agent(core, "t1", "Reader", ["alpha"])
    writer, _ = await agent(core)
    await core.inbox.place_beacon(scoped, "kubernetes helm deployment")
    await write(core, writer, "kubernetes helm deployment runbook for beta", project_id="beta", salience=0.9)
    hidden = await core.inbox.next_page(scoped, 0, 0.0)
    assert hidden.count == 0 and not hidden.has_more and hidden.window_high >= 1  # delivered, not readable
    started = asyncio.get_running_loop().time()
    idle = await core.inbox.next_page(scoped, hidden.window_high, 0.5)
    assert asyncio.get_running_loop().time() - started >= 0.45 and idle.count == 0
    waiting = asyncio.create_task(core.inbox.next_page(scoped, hidden.window_high, 30.0))
    seen = await write(core, writer, "kubernetes helm deployment runbook for alpha", project_id="alpha", salience=0.9)
    page = await asyncio.wait_for(waiting, 10)
    assert [json.loads(i)["diff"]["cell_id"] for i in page.items] == [seen]


async def test_the_websocket_loop_does_not_spin_on_a_hidden_delivery(core: Memesh) -> None:
    """The WebSocket send loop over the real core; only the socket is a stand-in (it records frames)."""
    from starlette.websockets import WebSocketState

    from api.admission import Credential
    from api.data.inbox import _send_loop

    scoped, key = await agent(core, "t1", "Reader", ["alpha"])
    writer, _ = await agent(core)
    await core.inbox.place_beacon(scoped, "kubernetes helm deployment")
    await write(core, writer, "kubernetes helm deployment runbook for beta", project_id="beta", salience=0.9)

    class Socket:
        def __init__(self) -> None:
            self.application_state = WebSocketState.CONNECTED
            self.frames: list[str] = []

        async def send_text(self, text: str) -> None:
            self.frames.append(text)

    steps = 0

    def counted(call: Callable[..., Any]) -> Callable[..., Any]:
        async def counting(*args: Any, **kw: Any) -> Any:
            nonlocal steps
            steps += 1
            return await call(*args, **kw)

        return counting

    for name in ("next_page", "pull", "wait"):  # every inbox call a stream loop could make
        setattr(core.inbox, name, counted(getattr(core.inbox, name)))
    socket = Socket()
    loop = asyncio.create_task(_send_loop(socket, core, Credential(core, key, scoped, asyncio.Event())))  # type: ignore[arg-type]
    try:
        await asyncio.sleep(1.0)
        assert steps <= 2 and socket.frames == []
        seen = await write(core, writer, "kubernetes helm deployment runbook for alpha", project_id="alpha", salience=0.9)
        for _ in range(100):
            if socket.frames:
                break
            await asyncio.sleep(0.05)
        assert [json.loads(f)["diff"]["cell_id"] for f in socket.frames] == [seen]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)

"""Push on the real actors (in process, hash engine): the node budget keeps the best and marks the rest,
deliveries explain themselves, and leaf statistics stay in their tenant and survive a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from actors.beacon_set import BeaconSet, BeaconSetConfig
from actors.storage import StorageConfig
from head.facade import Memesh
from mesh.model import Beacon, CellType, NewCell
from mesh.seam import inbox_index
from mesh.walk import NeighbourRequest
from tests.unit.test_growth import fail_once
from tests.unit.test_propagation import agent, drain, settle

DIMS = 8


async def test_a_flooded_beacon_gets_its_budget_of_the_best_and_a_marker(make_core: Callable[..., Memesh]) -> None:
    core = make_core(propagation={"node_budget": 3, "close_match": 1.01})  # every match a standout: one count
    listener, _ = await agent(core, role="Reader")
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "kafka consumer lag on the payments cluster")
    texts = [
        "kafka consumer lag on the payments cluster again",
        "kafka consumer lag",
        "payments cluster kafka consumer lag alert fired",
        "consumer lag on the payments cluster",
        "kafka consumer lag on the payments cluster",
        "kafka lag payments",
        "lag on the payments cluster kafka consumer group",
        "the payments cluster",
    ]
    for text in texts:  # one walk batch each: the budget binds across batches, not only inside one
        await core.memory.write_cells(writer, [NewCell(content=text, cell_type=CellType.FACT, salience=0.9)])
        await settle(core)
    items = (await drain(core, listener))["items"]
    scores = sorted((i["delivery"]["score"] for i in items), reverse=True)
    assert len(items) == 3, "the budget is 3 a window"
    shard = core.directory.inbox_shard(inbox_index(core.directory, listener.agent_id))  # the listener's shard
    health = await shard.health()
    lost = health["budget_displaced"] + health["budget_withheld"]
    assert lost >= 1, "more than three passed the match rule: the test would not exercise the budget"
    assert all(i["delivery"]["withheld"] == lost for i in items)  # nothing dropped silently
    # the three kept are the best three of everything that reached the beacon
    exact = core.memory._embedder
    vectors = await exact.embed(["kafka consumer lag on the payments cluster", *texts])
    reached = sorted((float(v @ vectors[0]) for v in vectors[1:]), reverse=True)
    assert scores == [round(s, 6) for s in reached[:3]]
    for item in items:
        assert item["delivery"]["criterion"] == "standout"
        assert isinstance(item["delivery"]["standing"], float)
    await core.close()


async def test_a_served_delivery_is_never_taken_back(make_core: Callable[..., Memesh]) -> None:
    core = make_core(propagation={"node_budget": 1, "close_match_budget": 1})
    listener, _ = await agent(core, role="Reader")
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "terraform state lock")
    await core.memory.write_cells(writer, [NewCell(content="terraform state lock held", cell_type=CellType.FACT)])
    await settle(core)
    first = (await drain(core, listener))["items"]
    await core.memory.write_cells(writer, [NewCell(content="terraform state lock", cell_type=CellType.FACT)])
    await settle(core)
    again = (await drain(core, listener, since=0))["items"]
    assert [i["diff"]["cell_id"] for i in again] == [i["diff"]["cell_id"] for i in first]
    assert again[0]["delivery"]["withheld"] == 1
    await core.close()


async def test_a_delivery_displaced_while_the_commit_fails_does_not_come_back(make_core: Callable[..., Memesh]) -> None:
    """A better delivery pushed a stored one out of the budget, but when the new delivery's commit failed the
    displaced one's row was never deleted: after a restart it came back beside the new one, over the budget."""
    budget = {"node_budget": 1, "close_match": 1.01}  # every match a standout: one budget
    core = make_core(propagation=budget)
    listener, _ = await agent(core, role="Reader")
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "terraform state lock")
    await core.memory.write_cells(writer, [NewCell(content="terraform state lock held by a run", cell_type=CellType.FACT)])
    await settle(core)
    shard = core.directory.inbox_shard(inbox_index(core.directory, listener.agent_id)).target  # type: ignore[attr-defined]
    fail_once(shard._delivery_commit, "submit")  # the better one's first commit fails; its walk is retried
    better = (await core.memory.write_cells(writer, [NewCell(content="terraform state lock", cell_type=CellType.FACT)]))[0]
    await settle(core)
    assert (await shard.health())["budget_displaced"] == 1, "the better delivery must displace the first"
    await core.close()
    again = make_core(propagation=budget)
    items = (await drain(again, listener, since=0))["items"]
    assert [i["diff"]["cell_id"] for i in items] == [better.id]
    await again.close()


async def test_the_budget_window_moves_with_the_clock(make_core: Callable[..., Memesh]) -> None:
    """Deliveries carry the time they were made: a full window does not hold the next one."""
    core = make_core(propagation={"node_budget": 1, "close_match_budget": 1, "budget_window_s": 1.0})
    listener, _ = await agent(core, role="Reader")
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "grafana alert routing")
    for text in ("grafana alert routing changed", "grafana alert routing"):
        await asyncio.sleep(1.0 - time.time() % 1.0 + 0.05)  # the start of a fresh one-second window
        await core.memory.write_cells(writer, [NewCell(content=text, cell_type=CellType.FACT)])
        await settle(core)
    items = (await drain(core, listener))["items"]
    assert sorted(i["diff"]["content"] for i in items) == ["grafana alert routing", "grafana alert routing changed"]
    assert all("withheld" not in i["delivery"] for i in items)
    await core.close()


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


def beacon(beacon_id: str, tenant: str, vector: np.ndarray) -> Beacon:
    return Beacon(beacon_id, tenant, "agent-" + tenant, "interest", vector, "hash", datetime(2030, 1, 1, tzinfo=UTC))


async def test_leaf_statistics_stay_in_their_tenant_survive_a_restart_and_leave_with_an_erase(tmp_path: Path) -> None:
    storage = StorageConfig(str(tmp_path / "lance"))
    config = BeaconSetConfig(storage, 0, DIMS, sweep_interval_s=0, standing_commit_s=0)
    now = datetime(2030, 1, 2, tzinfo=UTC)
    beacons = BeaconSet(config)
    await beacons.place(beacon("00000000-0000-7000-8000-0000000000b1", "t1", unit(1)), 10)
    await beacons.place(beacon("00000000-0000-7000-8000-0000000000b2", "t2", unit(2)), 10)
    diffs = [unit(10 + i) for i in range(5)]
    requests = [NeighbourRequest("t1", [("s", d)], d, 9, None, 8, True) for d in diffs]
    before = (await beacons.neighbours_many(requests, now)).unpacked()
    t1, t2 = beacons._tenants["t1"], beacons._tenants["t2"]
    assert t1.standings.get(0)[0] == 5.0
    assert t2.standings.get(0) == (0.0, 0.0, 0.0), "another tenant's writes moved t2's statistics"
    expected = [math.fsum(float(d @ unit(1)) for d in diffs)]
    assert abs(t1.standings.get(0)[1] - expected[0]) < 1e-4
    await beacons.close()

    restarted = BeaconSet(config)
    replay = [NeighbourRequest("t1", [("s", d)], d, 9, None, 8, False) for d in diffs]
    after = (await restarted.neighbours_many(replay, now)).unpacked()
    assert [[c.standing for c in a["s"]] for a in after] == [[c.standing for c in b["s"]] for b in before]
    table = restarted._standing_table
    assert table is not None
    assert [r["id"] for r in (await table.load()).to_pylist()] == ["00000000-0000-7000-8000-0000000000b1"]  # t2 never folded
    await restarted.erase("agent-t1", [])
    assert (await table.load()).num_rows == 0
    await restarted.close()


async def test_a_wave_answered_together_gives_each_frontier_node_what_it_gets_alone(tmp_path: Path) -> None:
    """A beacon set answers a wave's frontier nodes of every walk together (one product for all the hits'
    relevance, one pass for their standings); each frontier node gets what a wave of its own gets, with
    relevance the cosine of the leaf and its walk's diff, and the standing of that relevance for the leaf."""
    config = BeaconSetConfig(StorageConfig(str(tmp_path / "lance")), 0, DIMS, sweep_interval_s=0, standing_commit_s=0)
    now = datetime(2030, 1, 2, tzinfo=UTC)
    beacons = BeaconSet(config)
    vectors = {}
    for n in range(12):
        beacon_id = f"00000000-0000-7000-8000-0000000001{n:02d}"
        vectors[beacon_id] = unit(100 + n)
        b = beacon(beacon_id, f"t{n % 2}", vectors[beacon_id])
        await beacons.place(dataclasses.replace(b, agent_id=f"agent-{n % 3}"), 10)
    await beacons.neighbours_many([NeighbourRequest(f"t{t}", [], unit(300 + t), 9, None, 8, True) for t in range(2)], now)
    requests = [
        NeighbourRequest(
            f"t{n % 2}",
            [(f"f{n}-{q}", unit(200 + 5 * n + q)) for q in range(n % 3 + 1)],
            unit(400 + n),
            9,
            None if n % 4 else "agent-1",
            3 + n % 4,
        )
        for n in range(8)
    ]
    together = (await beacons.neighbours_many(requests, now)).unpacked()
    for request, answer in zip(requests, together, strict=True):
        (alone,) = (await beacons.neighbours_many([request], now)).unpacked()
        for frontier_id, _ in request.queries:
            got = answer[frontier_id]
            assert [c.node_id for c in got] == [c.node_id for c in alone[frontier_id]]
            assert len(got) <= request.leaf_k and all(c.agent_id != request.exclude_agent for c in got)
            for c, a in zip(got, alone[frontier_id], strict=True):
                assert math.isclose(c.relevance, float(vectors[c.node_id] @ request.diff_vector), abs_tol=1e-5)
                assert math.isclose(c.relevance, a.relevance, abs_tol=1e-6)
                assert c.standing is not None and a.standing is not None and math.isclose(c.standing, a.standing, abs_tol=1e-5)
    assert any(answer[f] for answer, r in zip(together, requests, strict=True) for f, _ in r.queries)
    await beacons.close()

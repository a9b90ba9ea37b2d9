"""Owner-addressed walks: a wave messages only the owners that may hold the walk's tenant, and decides
exactly what messaging every owner decides (``mesh.presence``, ``actors.propagation``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import pytest

from actors.beacon_set import BeaconSet
from actors.propagation import Propagator
from actors.scene_shard import SceneShard
from actors.walker import Walker
from head.facade import Memesh
from mesh.identity import Principal
from mesh.model import CellType, NewCell
from mesh.presence import OwnerPresence
from mesh.seam import beacon_set_index
from tests.unit.conftest import ADMIN
from tests.unit.test_propagation import drain, settle

SHARDS = {"ray": {"scene_shards": 4, "beacon_sets": 4, "inbox_shards": 2}}
TOPICS = ["kafka consumer lag", "terraform state locking", "postgres vacuum stalls", "dns cache poisoning"]


# ------------------------------------------------------------------ the view


def test_an_owner_not_heard_from_is_always_messaged() -> None:
    view = OwnerPresence()
    assert view.may_hold(("beacon_set", 0), "t1")
    view.note(("beacon_set", 0), ["t1"])  # told before any pull: not enough to leave the owner out for others
    assert view.may_hold(("beacon_set", 0), "t2") and not view.known(("beacon_set", 0))


def test_what_an_owner_tells_while_its_pull_travels_is_kept() -> None:
    view = OwnerPresence()
    owner = ("scene_shard", 1)
    view.begin_pull(owner)
    view.note(owner, ["late"])  # a first node of "late" arrived after the owner took its answer
    view.end_pull(owner, ["early"])
    assert view.may_hold(owner, "early") and view.may_hold(owner, "late")
    assert not view.may_hold(owner, "other")
    view.note(owner, ["other"])
    assert view.may_hold(owner, "other")


def test_a_failed_pull_leaves_the_owner_messaged_for_every_tenant() -> None:
    view = OwnerPresence()
    view.begin_pull(("beacon_set", 2))
    view.end_pull(("beacon_set", 2), None)
    assert view.may_hold(("beacon_set", 2), "anyone") and not view.known(("beacon_set", 2))


# ------------------------------------------------------------ the deployment


async def _principal(core: Memesh, tenant: str) -> Principal:
    issued = await core.identity.issue(ADMIN, tenant, "a", ["Writer"])
    principal = await core.identity.authenticate(issued.plaintext_secret)
    assert principal is not None
    return principal


async def _known_everywhere(core: Memesh) -> None:
    """Wait for every walker to have heard from every owner (its start's pull)."""
    for i in range(core.directory.spec.walkers):
        await _walks(core, i).pull_presence()


def _shard(core: Memesh, i: int) -> SceneShard:
    target: SceneShard = core.directory.scene_shard(i).target  # type: ignore[attr-defined]
    return target


def _walks(core: Memesh, i: int) -> Propagator:
    """Walker ``i``'s propagator (what scene shard ``i`` walks with: one walker per shard by default)."""
    walker: Walker = core.directory.walker(i).target  # type: ignore[attr-defined]
    return walker.propagator_for(core.directory.spec)


async def _workload(core: Memesh) -> dict[str, list[tuple[str, str, int, float]]]:
    """Four tenants, each a listener with two beacons and a writer writing on and off its topics, each walk
    settled before the next write; returns every listener's deliveries as (content, criterion, hops)."""
    listeners = {}
    writers = {}
    for n, topic in enumerate(TOPICS):
        tenant = f"tenant-{n}"
        listeners[tenant] = await _principal(core, tenant)
        writers[tenant] = await _principal(core, tenant)
        await core.inbox.place_beacon(listeners[tenant], topic)
        await core.inbox.place_beacon(listeners[tenant], f"{topic} postmortem")
    await _known_everywhere(core)
    for n, topic in enumerate(TOPICS):
        tenant = f"tenant-{n}"
        texts = [topic, f"{topic} postmortem", f"notes on {TOPICS[(n + 1) % 4]}", "lunch menu", topic]
        for text in texts:
            await core.memory.write_cells(writers[tenant], [NewCell(content=text, cell_type=CellType.FACT, salience=0.8)])
            await settle(core)  # one walk a batch: both runs count the same waves (batching follows timing)
    out = {}
    for tenant, who in listeners.items():
        items = (await drain(core, who, limit=100))["items"]
        out[tenant] = sorted(
            (i["diff"]["content"], i["delivery"]["criterion"], i["delivery"]["hops"], i["delivery"]["score"]) for i in items
        )
    return out


def _figures(core: Memesh) -> tuple[int, int]:
    walks = messages = 0
    for i in range(core.directory.spec.walkers):
        propagator = _walks(core, i)
        walks, messages = walks + propagator.walks, messages + propagator.messages
    return walks, messages


async def test_owner_addressed_walks_deliver_the_same_with_fewer_messages(
    make_core: Callable[..., Memesh], tmp_path: Any
) -> None:
    outcomes, figures = [], []
    for addressed in (False, True):
        core = make_core(**SHARDS, propagation={"owner_addressed": addressed}, storage={"data_dir": tmp_path / str(addressed)})
        try:
            outcomes.append(await _workload(core))
            figures.append(_figures(core))
        finally:
            await core.close()
    everyone, addressed = outcomes
    assert everyone == addressed
    assert all(len(items) >= 2 for items in addressed.values()), addressed  # the beacons were reached
    (walks_all, messages_all), (walks_owned, messages_owned) = figures
    assert walks_all == walks_owned == 20
    # Every tenant's cells sit on one shard (one project) and its agents on at most two sets out of eight
    # owners: messaging everyone is at least twice the messages.
    assert messages_owned * 2 <= messages_all, figures


async def test_a_restarted_owner_tells_the_walkers_it_had_not_told(make_core: Callable[..., Memesh], monkeypatch: Any) -> None:
    """An owner that committed a tenant's first node and crashed before telling tells at its next load."""
    core = make_core(**SHARDS)
    try:
        writer = await _principal(core, "t9")
        listener = await _principal(core, "t9")
        while beacon_set_index(core.directory, listener.agent_id) == beacon_set_index(core.directory, writer.agent_id):
            listener = await _principal(core, "t9")  # the listener's set holds nothing of t9 before its beacon
        await core.memory.write_cells(writer, [NewCell(content="warm up", cell_type=CellType.FACT)])
        await settle(core)
        await _known_everywhere(core)
        index = beacon_set_index(core.directory, listener.agent_id)

        async def crashed_before_telling(*args: Any, **kwargs: Any) -> None:
            return None

        monkeypatch.setattr("actors.presence.tell_walkers", crashed_before_telling)
        await core.inbox.place_beacon(listener, "kafka consumer lag")
        monkeypatch.undo()
        for i in range(core.directory.spec.walkers):  # the crash left every walker leaving this set out for t9
            assert not _walks(core, i).presence.may_hold(("beacon_set", index), "t9")
        old: BeaconSet = core.directory.beacon_set(index).target  # type: ignore[attr-defined]
        await old.close()
        restarted = BeaconSet(old.config)
        restarted.attach(core.directory)
        core.directory.instances[f"beacon_set:{index}"] = restarted  # type: ignore[attr-defined]
        await restarted.health()  # loads, and tells every walker what it holds
        for i in range(core.directory.spec.walkers):
            assert _walks(core, i).presence.may_hold(("beacon_set", index), "t9")
        await core.memory.write_cells(writer, [NewCell(content="kafka consumer lag", cell_type=CellType.FACT)])
        await settle(core)
        items = (await drain(core, listener, limit=10))["items"]
        assert [i["diff"]["content"] for i in items] == ["kafka consumer lag"]
    finally:
        await core.close()


@pytest.mark.parametrize("kind", ["scene_shard", "beacon_set"])
async def test_every_walker_knows_a_superset_of_what_each_owner_holds(make_core: Callable[..., Memesh], kind: str) -> None:
    core = make_core(**SHARDS)
    try:
        await _workload(core)
        spec = core.directory.spec
        count = spec.scene_shards if kind == "scene_shard" else spec.beacon_sets
        for index in range(count):
            owner = core.directory.scene_shard(index) if kind == "scene_shard" else core.directory.beacon_set(index)
            held = await owner.tenants()
            for i in range(spec.walkers):
                view = _walks(core, i).presence
                assert view.known((kind, index))
                assert all(view.may_hold((kind, index), t) for t in held)
                assert not view.may_hold((kind, index), "tenant-nobody")
    finally:
        await core.close()


async def test_a_walk_carries_its_writers_agent_moves_in_its_first_wave(make_core: Callable[..., Memesh]) -> None:
    """The writer's agent node moves inside the first wave's message to its beacon set (no separate
    ``observe_many`` call ahead of the walk); the set is asked even when no walker knew it holds the tenant;
    a batch whose walks all end before a wave still moves its writers' nodes."""
    core = make_core(**SHARDS)
    try:
        writer = await _principal(core, "t-moves")
        index = beacon_set_index(core.directory, writer.agent_id)
        beacons: BeaconSet = core.directory.beacon_set(index).target  # type: ignore[attr-defined]
        calls: dict[str, list[Any]] = {"observe_many": [], "neighbours_many": []}
        for name in calls:
            original = getattr(beacons, name)

            def spy(*args: Any, _name: str = name, _call: Any = original, **kw: Any) -> Any:
                calls[_name].append(args)
                return _call(*args, **kw)

            setattr(beacons, name, spy)
        await _known_everywhere(core)  # every walker knows this set holds nothing of the tenant yet
        await core.memory.write_cells(writer, [NewCell(content="kafka consumer lag", cell_type=CellType.FACT, salience=0.8)])
        await settle(core)
        assert calls["observe_many"] == []
        carried = [args for args in calls["neighbours_many"] if len(args) > 2 and args[2]]
        assert len(carried) == 1 and [m[0] for m in carried[0][2]] == [writer.agent_id]
        assert beacons.agents[writer.agent_id].count == 1

        (shard,) = [s for s in map(partial(_shard, core), range(4)) if s.partition.cells]  # the writer's cells
        propagator = _walks(core, shard.config.index)
        propagator.config = replace(propagator.config, policy=replace(propagator.config.policy, max_hops=0))
        await core.memory.write_cells(writer, [NewCell(content="kafka consumer lag again", cell_type=CellType.FACT)])
        await settle(core)
        assert len(calls["observe_many"]) == 1, "a batch with no wave left its writer's agent node where it was"
        assert beacons.agents[writer.agent_id].count == 2
    finally:
        await core.close()

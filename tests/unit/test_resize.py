"""Changing the shard counts of a deployment with data: the virtual partitions whose owner changes move, with
every cell, beacon, delivery and cursor in them, to their new owner (``actors.resize``), on the real LanceDB;
afterwards every actor holds exactly the rows of the partitions it owns, and a resize cut short at any commit
is finished or undone by the next start."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors.manifest import DeploymentManifest
from actors.resize import _copy_moving, _indices, _owners, _read, settle_layout
from actors.schemas import MANIFEST_SCHEMA
from actors.storage import LanceStore, StorageConfig
from api.metrics import partition_metrics
from cluster.compose import start_core, storage_config, wanted_counts
from head.facade import Memesh
from mesh.errors import ConfigInvalid
from mesh.identity import Principal
from mesh.layout import KINDS, Layout, parse_table
from mesh.query import NodeFilter
from mesh.seam import beacon_set_index
from mesh.sharding import VIRTUAL_PARTITIONS, Assignment
from tests.unit.conftest import in_process_settings
from tests.unit.test_propagation import agent, drain, settle, write

TENANTS = 6
GROWN = {"beacon_set": 3, "inbox_shard": 4}  # the counts the first test grows the agents' kinds to, from 2


@dataclass
class World:
    cells: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (writer key, content)
    listeners: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # key -> (tenant, acked, newest seq)
    pending: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # key -> what a pull shows: (seq, content)
    writers: dict[str, str] = field(default_factory=dict)  # tenant -> writer key
    beacons: dict[str, str] = field(default_factory=dict)  # listener key -> its beacon's id


def moves_when_grown(agent_id: str) -> bool | None:
    """True when the agent's partition changes owner in both of ``GROWN``'s resizes, False when in neither."""
    old = Assignment.balanced(2)
    moved = {old.owner(agent_id) != old.rebalanced(count).owner(agent_id) for count in GROWN.values()}
    return moved.pop() if len(moved) == 1 else None


async def listener_for(core: Memesh, tenant: str, moves: bool | None) -> tuple[Principal, str]:
    """A Reader whose beacon and inbox rows move in the grow (``moves`` True) or stay (False). Agent ids are
    random, and six listeners all on one side is a fair chance (a CI run had no inbox row move): the first
    two tenants take one of each, so the grow always moves some of these rows and keeps some."""
    for _ in range(200):
        listener, key = await agent(core, tenant, "Reader")
        if moves is None or moves_when_grown(listener.agent_id) is moves:
            return listener, key
    raise AssertionError(f"no agent id of 200 that {'moves' if moves else 'stays'}")


async def populate(core: Memesh) -> World:
    world = World()
    for t in range(TENANTS):
        tenant = f"tenant-{t}"
        listener, listener_key = await listener_for(core, tenant, {0: True, 1: False}.get(t))
        writer, writer_key = await agent(core, tenant, "Writer")
        world.writers[tenant] = writer_key
        world.beacons[listener_key] = (await core.inbox.place_beacon(listener, "database failover drill")).id
        for i in range(3):
            content = f"database failover drill {t} step {i}"
            world.cells[await write(core, writer, content)] = (writer_key, content)
        page = await drain(core, listener)
        assert page["items"], f"{tenant}: nothing delivered before the resize"
        acked = page["items"][0]["delivery_seq"]
        assert (await drain(core, listener, ack=acked))["cursor"] == acked
        world.listeners[listener_key] = (tenant, acked, page["items"][-1]["delivery_seq"])
    for key, (tenant, acked, _) in world.listeners.items():  # what each inbox holds when the deployment stops
        page = await drain(core, await core.identity.authenticate(key))
        world.pending[key] = shown(page)
        world.listeners[key] = (tenant, acked, max(seq for seq, _ in world.pending[key]))
    return world


def shown(page: dict[str, Any]) -> list[tuple[int, str]]:
    return sorted((i["delivery_seq"], i["diff"]["content"]) for i in page["items"])


async def check(core: Memesh, world: World) -> None:
    for cell_id, (key, content) in world.cells.items():
        writer = await core.identity.authenticate(key)
        found = await core.memory.recall(writer, content, None, 3, NodeFilter())
        assert cell_id in [c.id for c in found], f"{content!r} lost in the resize"
    for key, (tenant, acked, _) in world.listeners.items():
        listener = await core.identity.authenticate(key)
        page = await drain(core, listener)
        assert page["cursor"] == acked, f"{tenant}: the acknowledged cursor moved"
        assert shown(page) == world.pending[key], f"{tenant}: the inbox changed in the resize"
    for key, (tenant, _, _) in world.listeners.items():  # every beacon moved with its agent
        listener = await core.identity.authenticate(key)
        home = core.directory.beacon_set(beacon_set_index(core.directory, listener.agent_id))
        held = await home.list_for(listener.tenant_id, listener.agent_id, datetime.now(UTC))
        assert [b.id for b in held] == [world.beacons[key]], f"{tenant}: its beacon is not where its agent routes"


async def table_generations(settings_dir: Path) -> set[tuple[str, int]]:
    store = await LanceStore.open(StorageConfig(str(settings_dir / "lance")))
    return {(p[0], p[1]) for p in map(parse_table, await store.table_names()) if p is not None}


async def stored_layout(settings_dir: Path) -> tuple[Layout, list[str]]:
    store = await LanceStore.open(StorageConfig(str(settings_dir / "lance")))
    manifest = DeploymentManifest(await store.keyed("deployment_manifest", MANIFEST_SCHEMA, "key"))
    stored = await manifest.stored()
    return manifest.layout(stored, {k: 0 for k in KINDS}), manifest.unswept(stored)


async def assert_every_row_at_its_owner(settings_dir: Path, dims: int = 384) -> dict[str, int]:
    """Every row of every partitioned table sits at the index that owns its partition under the stored
    assignment, only indices below the count have tables, and nothing is left to sweep; rows per kind."""
    layout, unswept = await stored_layout(settings_dir)
    assert unswept == []
    store = await LanceStore.open(StorageConfig(str(settings_dir / "lance")))
    rows: dict[str, int] = {}
    for kind in KINDS:
        indices = await _indices(store, kind, layout.generation(kind))
        # an actor creates its tables at its first load or the first row moved to it: never beyond the count
        assert set(indices) <= set(range(layout.counts[kind])), f"{kind}: tables at {indices}, count {layout.counts[kind]}"
        held = await _read(store, kind, layout.generation(kind), indices, dims)
        for index, tables in _owners(kind, held, layout.assignment(kind)).items():
            for suffix, owners in tables.items():
                assert set(owners) <= {index}, f"{kind}:{index} {suffix} holds rows of partitions it does not own"
        rows[kind] = sum(t.num_rows for tables in held.values() for t in tables.values())
    return rows


async def started(make_core: Callable[..., Memesh], tmp_path: Path, **ray: int) -> Memesh:
    core = make_core(ray=ray)
    await start_core(core, in_process_settings(tmp_path / "data", ray=ray))
    return core


async def test_growing_then_shrinking_the_shard_counts_keeps_every_cell_beacon_delivery_and_cursor(
    tmp_path: Path, make_core: Callable[..., Memesh]
) -> None:
    core = await started(make_core, tmp_path)
    world = await populate(core)
    await core.close()
    before = await assert_every_row_at_its_owner(tmp_path / "data")

    grown = await started(make_core, tmp_path, scene_shards=5, beacon_sets=GROWN["beacon_set"], inbox_shards=GROWN["inbox_shard"])
    assert grown.directory.spec.scene_shards == 5
    moved = {m.kind: (m.count_from, m.count_to, m.rows, m.partitions) for m in grown.partitions.moves}
    assert moved["scene_shard"][:2] == (2, 5) and moved["beacon_set"][:2] == (2, 3) and moved["inbox_shard"][:2] == (2, 4)
    # only the partitions whose owner changes move: 2 -> 5 keeps 820 + 819 of 4,096 where they were
    assert moved["scene_shard"][3] == VIRTUAL_PARTITIONS - 820 - 819
    assert moved["beacon_set"][3] == VIRTUAL_PARTITIONS - 1366 - 1365 and moved["inbox_shard"][3] == VIRTUAL_PARTITIONS // 2
    assert all(0 < rows < before[kind] for kind, (_, _, rows, _) in moved.items()), (moved, before)
    exposed = {(m.name, s.labels["kind"]): s.value for m in partition_metrics(grown.partitions) for s in m.samples}
    assert exposed[("memesh_partitions", "scene_shard")] == 5
    assert exposed[("memesh_partition_moved_rows", "beacon_set")] == moved["beacon_set"][2]
    assert exposed[("memesh_partitions_moved", "scene_shard")] == moved["scene_shard"][3]
    await check(grown, world)
    await grown.close()
    assert await assert_every_row_at_its_owner(tmp_path / "data") == before  # moved, not copied: no row twice
    assert await table_generations(tmp_path / "data") == {("scene_shard", 0), ("beacon_set", 0), ("inbox_shard", 0)}

    shrunk = await started(make_core, tmp_path, scene_shards=1, beacon_sets=2, inbox_shards=3)
    await check(shrunk, world)
    await settle(shrunk)
    await shrunk.close()
    await assert_every_row_at_its_owner(tmp_path / "data")  # the retired actors' tables are gone

    again = await started(make_core, tmp_path, scene_shards=1, beacon_sets=2, inbox_shards=3)  # no resize: no move
    assert again.partitions.moves == ()
    await check(again, world)
    await again.close()
    await assert_every_row_at_its_owner(tmp_path / "data")


async def cut_short(tmp_path: Path, counts: dict[str, int], switched: bool) -> None:
    """What a start resizing to ``counts`` leaves when it dies after its copies, before (or just after) the
    manifest's switch: commit 1, the copies, and commit 2 only when ``switched``."""
    settings = in_process_settings(tmp_path / "data")
    store = await LanceStore.open(storage_config(settings))
    manifest = DeploymentManifest(await store.keyed("deployment_manifest", MANIFEST_SCHEMA, "key"))
    old = manifest.layout(await manifest.stored(), wanted_counts(settings))
    kinds = old.resized({**old.counts, **counts})
    assignments = {k: old.assignment(k).rebalanced(counts[k]) for k in kinds}
    await manifest.switch_layout(old, unswept=kinds)
    copied = [(await _copy_moving(store, kind, old, assignments[kind], settings.embedding.dims)).rows for kind in kinds]
    # Something was copied (the scene shards' hundreds of cells always move some); a kind with a few keys may
    # move none: agent ids are random, and each keeps its owner with a fair chance (a CI run met it).
    assert sum(copied) > 0, copied
    if switched:
        await manifest.switch_layout(Layout({**old.counts, **counts}, {}, assignments), unswept=kinds)


async def populated_then_stopped(make_core: Callable[..., Memesh], tmp_path: Path) -> tuple[World, dict[str, int]]:
    """A deployment with data, stopped: what it holds, and its rows per kind (each at its owner)."""
    core = await started(make_core, tmp_path)
    world = await populate(core)
    await core.close()
    return world, await assert_every_row_at_its_owner(tmp_path / "data")


async def test_a_resize_cut_short_before_its_switch_leaves_the_old_layout_and_is_done_again(
    tmp_path: Path, make_core: Callable[..., Memesh]
) -> None:
    world, before = await populated_then_stopped(make_core, tmp_path)
    await cut_short(tmp_path, {"scene_shard": 5, "beacon_set": 3, "inbox_shard": 4}, switched=False)
    assert (await stored_layout(tmp_path / "data"))[1] == ["beacon_set", "inbox_shard", "scene_shard"]

    same = await started(make_core, tmp_path)  # the old counts: the old owners are in force, the copies swept
    await check(same, world)
    await same.close()
    assert await assert_every_row_at_its_owner(tmp_path / "data") == before
    assert (await stored_layout(tmp_path / "data"))[0].counts["scene_shard"] == 2

    resized = await started(make_core, tmp_path, scene_shards=5)
    await check(resized, world)
    await resized.close()
    assert await assert_every_row_at_its_owner(tmp_path / "data") == before


async def test_a_resize_cut_short_after_its_switch_is_finished_by_the_next_start(
    tmp_path: Path, make_core: Callable[..., Memesh]
) -> None:
    world, before = await populated_then_stopped(make_core, tmp_path)
    await cut_short(tmp_path, {"scene_shard": 3, "beacon_set": 1, "inbox_shard": 2}, switched=True)

    finished = await started(make_core, tmp_path, scene_shards=3, beacon_sets=1)  # the new owners; sources swept
    assert finished.partitions.moves == ()
    await check(finished, world)
    await finished.close()
    assert await assert_every_row_at_its_owner(tmp_path / "data") == before
    layout, _ = await stored_layout(tmp_path / "data")
    assert layout.counts == {"scene_shard": 3, "beacon_set": 1, "inbox_shard": 2}


async def test_a_resize_is_refused_while_the_deployment_runs(tmp_path: Path, make_core: Callable[..., Memesh]) -> None:
    core = await started(make_core, tmp_path)
    settings = in_process_settings(tmp_path / "data")
    with pytest.raises(ConfigInvalid, match="stop every head"):
        await settle_layout(storage_config(settings), {**wanted_counts(settings), "scene_shard": 3}, 384, running=True)
    settled = await settle_layout(storage_config(settings), wanted_counts(settings), 384, running=True)
    assert settled.layout.counts["scene_shard"] == 2 and not settled.moves
    await core.close()


async def test_a_head_joining_while_a_move_is_cut_short_is_refused_before_any_actor_loads_its_copies(
    tmp_path: Path, make_core: Callable[..., Memesh]
) -> None:
    await populated_then_stopped(make_core, tmp_path)
    await cut_short(tmp_path, {"scene_shard": 5, "beacon_set": 3, "inbox_shard": 4}, switched=False)
    settings = in_process_settings(tmp_path / "data")
    with pytest.raises(ConfigInvalid, match="partitions are moving"):  # a head that joins running actors sweeps nothing
        await settle_layout(storage_config(settings), wanted_counts(settings), 384, running=True)
    await (await started(make_core, tmp_path)).close()  # a start of the stopped deployment sweeps the copies
    await assert_every_row_at_its_owner(tmp_path / "data")

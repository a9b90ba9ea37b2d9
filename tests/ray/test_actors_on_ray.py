"""Actors on a real local Ray: restart after a kill loses nothing acknowledged."""

from __future__ import annotations

import asyncio
import json

import pytest
import ray

from actors.ray_directory import RayDirectory
from cluster.settings import Settings
from head.facade import Memesh
from mesh.errors import MemeshError, NotFound, Unauthorized
from mesh.identity import Principal
from mesh.model import CellType, NewCell
from mesh.query import NodeFilter
from mesh.seam import every_actor
from mesh.sharding import partition_key
from tests.ray.agents import ADMIN, writer


async def kill(memesh: Memesh, ref_name: str) -> None:
    """Kill the actor's process and wait until Ray has restarted it (a new pid answers)."""
    directory = memesh.directory
    assert isinstance(directory, RayDirectory)
    ref = {r.name: r for r in every_actor(directory)}[ref_name]  # type: ignore[attr-defined]
    before = (await ref.health())["pid"]
    ray.kill(ref.handle, no_restart=False)
    for _ in range(200):
        try:
            if (await ref.health())["pid"] != before:
                return
        except MemeshError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{ref_name} did not restart")


async def all_ids(memesh: Memesh, principal: Principal, text: str) -> set[str]:
    return {c.id for c in await memesh.memory.query(principal, text, None, 1000, NodeFilter())}


async def test_errors_cross_the_ray_hop_as_memesh_errors(core: Memesh) -> None:
    principal = await writer(core)
    with pytest.raises(NotFound):
        await core.memory.get_scene(principal, "01a2040c-0000-7000-8000-000000000000")
    with pytest.raises(Unauthorized):
        await core.identity.authenticate("msh_" + "z" * 43)


async def test_killed_scene_shards_restart_with_every_acknowledged_write(core: Memesh) -> None:
    principal = await writer(core)
    specs = [
        NewCell(content=f"memory number {i} about shards", cell_type=CellType.FACT, project_id=f"p{i % 4}") for i in range(40)
    ]
    written = await core.memory.write_cells(principal, specs)
    before = await all_ids(core, principal, "memory about shards")
    assert before == {c.id for c in written}
    await core.health(timeout_s=30.0)  # the actors' processes as the head knows them
    await kill(core, "scene_shard:0")
    await kill(core, "scene_shard:1")
    after = await all_ids(core, principal, "memory about shards")
    assert after == before
    await core.health(timeout_s=30.0)  # /metrics' memesh_actor_restarts_total: the head saw both come back
    assert core.restarts["scene_shard"] == 2 and core.restarts["inbox_shard"] == 0
    scene = await core.memory.get_scene(principal, written[0].scene_id or "")
    assert scene.live_count >= 1


async def test_writes_in_flight_during_a_kill_are_durable_once_acknowledged(core: Memesh) -> None:
    principal = await writer(core)

    async def write(i: int) -> str | None:
        try:
            (cell,) = await core.memory.write_cells(
                principal, [NewCell(content=f"concurrent write {i}", cell_type=CellType.FACT, project_id=f"p{i % 3}")]
            )
        except MemeshError:
            return None  # not acknowledged: the caller saw an error and may retry
        return cell.id

    tasks = [asyncio.create_task(write(i)) for i in range(60)]
    await asyncio.sleep(0.05)
    ray.kill(core.directory.scene_shard(0).handle, no_restart=False)  # type: ignore[attr-defined]
    ray.kill(core.directory.scene_shard(1).handle, no_restart=False)  # type: ignore[attr-defined]
    acknowledged = {cid for cid in await asyncio.gather(*tasks) if cid}
    assert acknowledged, "no write was acknowledged at all"
    stored = await all_ids(core, principal, "concurrent write")
    assert acknowledged <= stored


async def test_a_restarted_scene_shard_makes_every_head_forget_what_it_knew_of_it(core: Memesh) -> None:
    """A load may replay journaled writes never acknowledged: a head must not go on skipping the shard."""
    principal = await writer(core)
    await core.join_heads()
    spec = core.directory.spec
    project = next(p for n in range(1000) if spec.owner("scene_shard", partition_key("t1", p := f"p{n}")) == 0)
    await core.memory.write_cells(principal, [NewCell(content="kept on shard zero", cell_type=CellType.FACT, project_id=project)])
    await all_ids(core, principal, "shard zero")
    assert core.memory.absence.skip(1, "t1"), "the head did not learn that shard 1 holds nothing of t1"
    await kill(core, "scene_shard:1")  # answers once the new process loaded, and it announces its load first
    assert not core.memory.absence.skip(1, "t1")


async def test_a_restarted_head_roster_confirms_no_change_for_one_lease(core: Memesh) -> None:
    await core.join_heads()
    await kill(core, "head_roster")
    started = asyncio.get_running_loop().time()
    await core.directory.head_roster().publish("agent-x", 10.0)
    assert asyncio.get_running_loop().time() - started >= 2.0, "a restarted roster confirmed a change at once"
    started = asyncio.get_running_loop().time()
    await core.directory.head_roster().publish("agent-y", 10.0)
    assert asyncio.get_running_loop().time() - started < 2.0, "the roster kept waiting after its first lease"


async def test_killed_registry_restarts_with_agents_and_sessions(core: Memesh) -> None:
    issued = await core.identity.issue(ADMIN, "t1", "keeper", ["Writer"])
    principal = await core.identity.authenticate(issued.plaintext_secret)
    session = await core.memory.open_session(principal, "apollo")
    revoked = await core.identity.issue(ADMIN, "t1", "gone", ["Writer"])
    await core.identity.apply(ADMIN, revoked.agent.id, "revoke")
    await kill(core, "registry")
    fresh = build_memesh_like(core)
    again = await fresh.identity.authenticate(issued.plaintext_secret)  # no cache: asks the restarted registry
    assert again.agent_id == issued.agent.id
    with pytest.raises(Unauthorized):
        await fresh.identity.authenticate(revoked.plaintext_secret)
    (cell,) = await core.memory.write_cells(
        principal, [NewCell(content="after restart", cell_type=CellType.FACT, session_id=session.id)]
    )
    assert cell.project_id == "apollo"


def build_memesh_like(core: Memesh) -> Memesh:
    """A second facade over the same actors, with an empty principal cache."""
    return Memesh(core.directory, core.embedder, {})


async def test_killed_inbox_shards_lose_no_committed_delivery_and_never_rewind(core: Memesh) -> None:
    listener = await writer(core)
    author = await writer(core)
    await core.inbox.place_beacon(listener, "payment gateway timeout incidents")
    seen: dict[int, str] = {}
    cursors: list[int] = []

    async def write_stream() -> None:
        for i in range(24):
            await core.memory.write_cells(
                author, [NewCell(content=f"payment gateway timeout incidents report {i}", cell_type=CellType.RISK)]
            )
            await asyncio.sleep(0.02)

    async def drain_stream() -> None:
        for _ in range(400):
            try:
                page = await core.inbox.pull(listener, None, max(seen, default=0), 5)
            except MemeshError:
                await asyncio.sleep(0.05)  # the shard is restarting
                continue
            cursors.append(page.cursor)
            for item in json.loads(page.items_json):
                previous = seen.setdefault(item["delivery_seq"], item["diff"]["id"])
                assert previous == item["diff"]["id"]  # a sequence never changes meaning
            if len(seen) >= 24 and not page.has_more:
                return
            await asyncio.sleep(0.02)

    writing = asyncio.create_task(write_stream())
    draining = asyncio.create_task(drain_stream())
    await asyncio.sleep(0.3)
    for i in range(core.directory.spec.inbox_shards):
        await kill(core, f"inbox_shard:{i}")
    await writing
    for i in range(core.directory.spec.scene_shards):
        await core.directory.scene_shard(i).settle(30.0)
    await draining
    assert cursors == sorted(cursors), "a cursor rewound"
    everything = await core.inbox.pull(listener, 0, None, 256)
    final = {i["delivery_seq"]: i["diff"]["id"] for i in json.loads(everything.items_json)}
    assert set(seen) <= set(final) and all(final[s] == d for s, d in seen.items())
    assert sorted(final) == list(range(1, len(final) + 1)) and len(final) == 24


def _collector_state(actor: object) -> tuple[str, int, bool]:
    import gc

    from actors.heap import _after_collection

    return type(actor).__name__, gc.get_freeze_count(), _after_collection in gc.callbacks


async def test_every_actor_process_keeps_its_collection_pauses_short_and_again_after_a_restart(core: Memesh) -> None:
    """Each actor's process freezes what it holds once started (actors.heap), its class keeps its own name
    (what ``ray::SceneShard`` and the benchmarks' CPU roles show), and a restarted process does it again."""
    directory = core.directory
    assert isinstance(directory, RayDirectory)
    refs = {r.name: r for r in every_actor(directory)}  # type: ignore[attr-defined]
    states = ray.get([ref.handle.__ray_call__.remote(_collector_state) for ref in refs.values()], timeout=60)
    assert all(frozen > 0 and installed for _, frozen, installed in states), states
    assert {name for name, _, _ in states} >= {"SceneShard", "BeaconSet", "InboxShard", "Registry", "Observatory"}
    await kill(core, "scene_shard:0")
    name, frozen, installed = ray.get(refs["scene_shard:0"].handle.__ray_call__.remote(_collector_state), timeout=60)
    assert (name, frozen > 0, installed) == ("SceneShard", True, True)


def _priorities(actor: object) -> tuple[str, list[int]]:
    import os

    threads = [int(t) for t in os.listdir("/proc/self/task")]
    return type(actor).__name__, sorted({os.getpriority(os.PRIO_PROCESS, t) for t in threads})


async def test_walks_run_on_niced_walkers_and_a_killed_walker_loses_no_walk(core: Memesh) -> None:
    """Each scene shard's walks run on a walker actor of their own process, every thread of it at
    ``propagation.walker_nice`` steps below every thread of a scene shard, which runs at the priority Ray's
    own threads have (the session's Ray, as ``memesh serve``'s, is started with ``RAY_worker_niceness`` 0:
    Ray's default starts a worker's Python threads at 15). Walks sent while both walkers are
    dead and restarting run once they are back: every one delivers (the walk queue's calls wait for the
    restarted actor, and inboxes drop what a retry delivers twice)."""
    directory = core.directory
    assert isinstance(directory, RayDirectory) and directory.spec.walkers == 2
    refs = {r.name: r for r in every_actor(directory)}  # type: ignore[attr-defined]
    nice = Settings().propagation.walker_nice
    assert nice > 0
    for name in ("walker:0", "walker:1", "scene_shard:0"):
        kind, levels = ray.get(refs[name].handle.__ray_call__.remote(_priorities), timeout=60)
        assert (kind, levels) == (("Walker", [nice]) if name.startswith("walker") else ("SceneShard", [0]))
    listener = await writer(core, "t-walk")
    await core.inbox.place_beacon(listener, "replication lag on the primary database")
    author = await writer(core, "t-walk")
    pids = [(await directory.walker(i).health())["pid"] for i in range(2)]
    for i in range(2):
        ray.kill(refs[f"walker:{i}"].handle, no_restart=False)
    specs = [
        NewCell(content=f"replication lag on the primary database, incident {i}", cell_type=CellType.FACT, salience=0.9)
        for i in range(24)  # under the listener's budget of close matches (32 an hour)
    ]
    written = await core.memory.write_cells(author, specs)
    for i in range(directory.spec.scene_shards):
        await directory.scene_shard(i).settle(60.0)
    page = await core.inbox.pull(listener, None, None, 100)
    reached = {item["diff"]["cell_id"] for item in json.loads(page.items_json)}
    assert reached == {c.id for c in written}, f"{len(reached)} of {len(written)} walks delivered"
    after = [await directory.walker(i).health() for i in range(2)]
    assert all(a["pid"] != p for a, p in zip(after, pids, strict=True)), "a walker was not restarted"
    assert sum(a["walks"] for a in after) == len(written)  # every walk ran on a restarted walker

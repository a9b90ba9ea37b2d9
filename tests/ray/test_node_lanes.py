"""Node lanes on a real local Ray (actors.node_lane): the hot calls of a head to actors on its node go through
their lanes, answer what Ray answers, and a lane lost with its actor costs no call and no acknowledged write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import fields

from actors.ray_directory import RayActor, RayDirectory
from head.facade import Memesh
from mesh.errors import MemeshError
from mesh.identity import Principal
from mesh.model import Cell, CellType, NewCell
from mesh.query import NodeFilter, SearchAnswer, SearchRequest
from tests.ray.agents import writer


def lanes_of(memesh: Memesh) -> RayDirectory:
    directory = memesh.directory
    assert isinstance(directory, RayDirectory) and directory.lanes is not None
    return directory


async def until_lanes_open(memesh: Memesh, principal: Principal, text: str) -> None:
    """Search until both scene shards answer through their lanes (the first calls go through Ray)."""
    directory = lanes_of(memesh)
    assert directory.lanes is not None
    for _ in range(200):
        before = directory.lanes.answered
        await memesh.memory.query(principal, text, None, 5, NodeFilter())
        if directory.lanes.answered - before >= 2:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the scene shards' lanes never opened")


async def test_a_lane_answers_what_ray_answers(core: Memesh) -> None:
    principal = await writer(core)
    specs = [NewCell(content=f"lane fact {i} about the payment service", cell_type=CellType.FACT) for i in range(30)]
    await core.memory.write_cells(principal, specs)
    await until_lanes_open(core, principal, "payment service")
    directory = lanes_of(core)
    shard = directory.scene_shard(directory.spec.owner("scene_shard", "t1\x00default"))
    assert isinstance(shard, RayActor)
    vector = (await core.embedder.embed(["what does the payment service do"], "t1"))[0]
    request = SearchRequest("t1", vector, 10, NodeFilter(), ("payment", "service"))
    assert directory.lanes is not None
    before = directory.lanes.answered
    through_lane, absent = await shard.search_batch([request])
    assert directory.lanes.answered == before + 1
    through_ray, absent_by_ray = await shard.handle.search_batch.remote([request])
    assert seen(through_lane) == seen(through_ray) and absent == absent_by_ray == []
    (dense, lexical) = through_lane[0]  # type: ignore[misc]
    assert len(dense) == 10 and len(lexical) == request.tuning.lexical_pool(10)  # BM25's best few join the fusion


def fields_of(cell: Cell) -> dict[str, object]:
    return {f.name: getattr(cell, f.name) for f in fields(cell) if f.name != "embedding"} | {"vector": cell.embedding.tobytes()}


def seen(answers: list[SearchAnswer | MemeshError]) -> list[object]:
    """What a caller reads of search answers: every field of every cell (its vector as bytes) and the scores."""
    out: list[object] = []
    for answer in answers:
        assert not isinstance(answer, MemeshError)
        dense, lexical = answer
        out.append([(fields_of(c), s) for c, s in dense])
        out.append([(fields_of(c), b, s) for c, b, s in lexical])
    return out


async def test_a_killed_shard_costs_its_lane_no_call_and_no_acknowledged_write(core: Memesh) -> None:
    """Searches and writes in flight on a lane when its scene shard is killed (SIGKILL: its socket closes
    with it) are repeated through Ray, which waits for the restart: every search answers, every write is
    acknowledged and found; the restarted shard opens a new lane and the head takes it."""
    principal = await writer(core)
    await core.memory.write_cells(principal, [NewCell(content="a first fact", cell_type=CellType.FACT)])
    await until_lanes_open(core, principal, "first fact")
    directory = lanes_of(core)
    assert directory.lanes is not None
    pids = [(await directory.scene_shard(i).health())["pid"] for i in range(2)]

    async def write(i: int) -> str:
        (cell,) = await core.memory.write_cells(principal, [NewCell(content=f"fact {i} in flight", cell_type=CellType.FACT)])
        return cell.id

    async def search(i: int) -> int:
        return len(await core.memory.query(principal, f"fact {i}", None, 5, NodeFilter()))

    writes = [asyncio.create_task(write(i)) for i in range(40)]
    searches = [asyncio.create_task(search(i)) for i in range(40)]
    await asyncio.sleep(0.01)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    written = await asyncio.gather(*writes)  # none raises: each was repeated through Ray
    assert all(n >= 1 for n in await asyncio.gather(*searches))
    found = {c.id for c in await core.memory.query(principal, "fact in flight", None, 1000, NodeFilter())}
    assert set(written) <= found
    assert [(await directory.scene_shard(i).health())["pid"] != pids[i] for i in range(2)] == [True, True]
    await asyncio.sleep(1.2)  # a broken lane is looked for again after a second
    await until_lanes_open(core, principal, "fact in flight")


async def test_a_walk_whose_walker_lane_breaks_is_retried_by_its_queue(core: Memesh) -> None:
    """A walker killed while a scene shard's call to it is on its lane: the call is not repeated behind the
    queue's back (it may have moved agent nodes); the walk queue retries the batch and it delivers."""
    listener = await writer(core, "t-walk", "listener")
    await core.inbox.place_beacon(listener, "replication lag on the primary database")
    author = await writer(core, "t-walk", "author")
    directory = lanes_of(core)
    first = await core.memory.write_cells(author, [NewCell(content="replication lag on the primary", cell_type=CellType.FACT)])
    for i in range(directory.spec.scene_shards):
        await directory.scene_shard(i).settle(60.0)
    pids = [(await directory.walker(i).health())["pid"] for i in range(directory.spec.walkers)]
    specs = [NewCell(content=f"replication lag on the primary database, case {i}", cell_type=CellType.FACT) for i in range(12)]
    written = first + await core.memory.write_cells(author, specs)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for i in range(directory.spec.scene_shards):
        await directory.scene_shard(i).settle(60.0)
    seen: set[str] = set()
    for _ in range(100):
        try:
            page = await core.inbox.pull(listener, None, None, 100)
        except MemeshError:
            await asyncio.sleep(0.1)
            continue
        seen = {item["diff"]["cell_id"] for item in json.loads(page.items_json)}
        if seen >= {c.id for c in written}:
            break
        await asyncio.sleep(0.1)
    assert seen >= {c.id for c in written}, f"{len(seen)} of {len(written)} walks delivered"

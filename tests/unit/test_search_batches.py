"""Concurrent searches share actor calls per shard, and every request still gets its own answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cluster.compose import build_memesh
from head.search_batches import SearchBatches
from mesh.errors import MemeshError, NotFound
from mesh.query import NodeFilter, SearchAnswer, SearchRequest
from tests.unit.conftest import Api, in_process_settings
from tests.unit.helpers import direction


def request(k: int) -> SearchRequest:
    return SearchRequest("t1", direction(k), k, NodeFilter())


async def test_a_lone_search_goes_at_once_and_concurrent_ones_share_calls() -> None:
    sent: list[list[int]] = []
    gate = asyncio.Event()

    async def call(shard: int, requests: list[SearchRequest]) -> list[SearchAnswer | MemeshError]:
        sent.append([r.k for r in requests])
        await gate.wait()
        return [NotFound("odd") if r.k % 2 else ([], []) for r in requests]

    batches = SearchBatches(call)
    first = asyncio.create_task(batches.search(0, request(2)))
    for _ in range(10):  # a few turns of the loop, no timer: nothing waits for company
        await asyncio.sleep(0)
    assert sent == [[2]]
    rest = [asyncio.create_task(batches.search(0, request(k))) for k in range(3, 10)]
    cancelled = asyncio.create_task(batches.search(0, request(10)))
    await asyncio.sleep(0)
    cancelled.cancel()
    gate.set()
    assert await first == ([], [])
    answers = await asyncio.gather(*rest, return_exceptions=True)
    assert sent == [[2], [3, 4, 5, 6, 7, 8, 9]]  # one call for everything that waited; the cancelled one never sent
    for k, answer in zip(range(3, 10), answers, strict=True):
        assert isinstance(answer, NotFound) if k % 2 else answer == ([], [])
    assert batches.calls == 2


async def test_a_failed_call_fails_every_request_it_carried_and_the_next_call_goes_on() -> None:
    calls = 0

    async def call(shard: int, requests: list[SearchRequest]) -> list[SearchAnswer | MemeshError]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        if calls == 1:
            raise ConnectionError("actor died")
        return [([], []) for _ in requests]

    batches = SearchBatches(call)
    with pytest.raises(ConnectionError):
        await batches.search(1, request(1))
    assert await batches.search(1, request(2)) == ([], [])


@pytest.mark.parametrize("ranking", ["hybrid", "dense"])
async def test_batching_on_and_off_gives_the_same_answers(tmp_path: Path, ranking: str) -> None:
    texts = [
        f"note {i}: the {w} service {v} at the {p}"
        for i, (w, v, p) in enumerate(
            (w, v, p)
            for w in ("billing", "search", "auth", "mail")
            for v in ("failed", "restarted", "scaled")
            for p in ("edge", "core")
        )
    ]
    questions = ["which service failed", "what restarted at the edge", "auth scaled", "mail core", "billing", "zebra"]
    answers: dict[bool, list[list[str]]] = {}
    for batched in (True, False):
        memesh = build_memesh(in_process_settings(tmp_path / f"data-{batched}", retrieval={"batch_searches": batched}))
        try:
            api = Api(memesh)
            key = await api.key()
            cells = [{"content": t, "cell_type": "Fact", "project_id": f"p{i % 3}"} for i, t in enumerate(texts)]
            assert (await api.send("POST", "/v1/cells:batch", key, {"cells": cells})).status_code == 201
            before = memesh.memory.searches.calls
            replies = await asyncio.gather(
                *(
                    api.send("POST", path, key, {"text": q, "k": 5, "ranking": ranking})
                    for q in questions
                    for path in ("/v1/query",) * 4
                )
            )
            answers[batched] = [[n["content"] for n in r.json()] for r in replies]  # ids differ between the two stores
            shards = memesh.directory.spec.scene_shards
            if batched:
                assert memesh.memory.searches.calls - before < len(replies) * shards  # calls were shared
            else:
                assert memesh.memory.searches.calls - before == len(replies) * shards
        finally:
            await memesh.close()
    assert answers[True] == answers[False]
    assert any(answers[True])


async def test_a_search_scoped_to_projects_asks_only_the_shards_that_own_them(tmp_path: Path) -> None:
    """A read scope names the projects a search can match: only their owners are asked (a recall of an agent
    scoped to one project costs one shard's call, not one per shard), and the answer is the whole tenant's
    answer restricted to those projects."""
    memesh = build_memesh(in_process_settings(tmp_path / "data", ray={"scene_shards": 4}, retrieval={"batch_searches": False}))
    try:
        api = Api(memesh)
        writer = await api.key()
        projects = [f"p{i}" for i in range(8)]
        owners = {p: memesh.memory._shard_of("t1", p) for p in projects}
        assert len(set(owners.values())) > 2, owners  # the projects spread over the shards
        cells = [
            {"content": f"the {p} deploy {w}", "cell_type": "Fact", "project_id": p}
            for p in projects
            for w in ("failed", "stalled")
        ]
        assert (await api.send("POST", "/v1/cells:batch", writer, {"cells": cells})).status_code == 201
        scope = ["p1", "p2"]
        scoped = await api.key(roles=("Reader",), read_scope=scope)
        for path in ("/v1/query", "/v1/recall"):
            for ranking in ("hybrid", "dense"):
                before = memesh.memory.searches.calls
                reply = await api.send("POST", path, scoped, {"text": "deploy failed", "k": 10, "ranking": ranking})
                assert reply.status_code == 200, reply.text
                assert memesh.memory.searches.calls - before == len({owners[p] for p in scope})
                assert {n["node_type"]["Cell"]["project_id"] for n in reply.json()} == set(scope)
        everything = await api.send("POST", "/v1/query", writer, {"text": "deploy failed", "k": 50, "ranking": "dense"})
        before = memesh.memory.searches.calls
        narrowed = await api.send("POST", "/v1/query", scoped, {"text": "deploy failed", "k": 50, "ranking": "dense"})
        assert memesh.memory.searches.calls - before < memesh.directory.spec.scene_shards
        expected = [n["id"] for n in everything.json() if n["node_type"]["Cell"]["project_id"] in scope]
        assert [n["id"] for n in narrowed.json()] == expected and len(expected) == 4
    finally:
        await memesh.close()

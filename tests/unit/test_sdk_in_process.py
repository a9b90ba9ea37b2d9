"""The client SDK's requests against the real app in-process (httpx's ASGI transport; the hash engine): every
search option reaches the service, answers parse, refusals are typed. Over sockets: tests/e2e/test_sdk.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime

import httpx
import pytest

from api.app import create_app
from head.facade import Memesh
from memesh_client import (
    AsyncMemesh,
    ConnectionFailed,
    Forbidden,
    MemeshError,
    NotFound,
    ServiceFailed,
    StorageUnavailable,
    TimedOut,
    TransactionFailed,
    UnreadableAnswer,
    ValidationFailed,
    cell,
)
from tests.unit.conftest import ADMIN


@pytest.fixture
async def client(core: Memesh) -> AsyncIterator[tuple[AsyncMemesh, AsyncMemesh]]:
    """(a Writer's client, a Reader's client) of one tenant."""
    roles = (("w", "Writer"), ("r", "Reader"))
    keys = [(await core.identity.issue(ADMIN, "t1", name, [role])).plaintext_secret for name, role in roles]
    transport = httpx.ASGITransport(app=create_app(core))
    base = "http://memesh.test"
    clients = [AsyncMemesh(base, key, http=httpx.AsyncClient(transport=transport, base_url=base)) for key in keys]
    yield clients[0], clients[1]
    for c in clients:
        await c.aclose()


async def test_search_options_filters_and_typed_refusals(client: tuple[AsyncMemesh, AsyncMemesh]) -> None:
    writer, reader = client
    risk, lunch = await writer.write_many(
        [cell("postgres failover runbook", "Risk", project_id="ops"), cell("lunch menu", "Fact")]
    )
    assert risk.project_id == "ops" and lunch.project_id == "default"
    assert [h.id for h in await reader.query("postgres failover", k=2, ranking="dense", cell_types=["Risk"])] == [risk.id]
    assert [h.id for h in await reader.query("postgres failover", k=5, cell_types=["Fact"])] == [lunch.id]
    assert {h.id for h in await reader.recall("postgres", k=5, source_agent=risk.source_agent, layer=risk.layer)} >= {risk.id}
    assert await reader.recall("postgres", k=5, source_agent="someone-else") == []
    assert await reader.recall("postgres", k=5, layer="L1") == []
    assert [h.id for h in await reader.query("postgres", k=5, scene_id=lunch.scene_id or "", ranking="dense")] == [lunch.id]
    assert [c.id async for c in reader.iter_cells(limit=1)] == sorted([risk.id, lunch.id])
    with pytest.raises(ValidationFailed) as bad:
        await reader.query("x", k=0)
    assert (bad.value.code, bad.value.status) == ("validation", 400)
    with pytest.raises(Forbidden):
        await reader.delete_cell(risk.id)
    await writer.delete_cell(risk.id)
    with pytest.raises(NotFound) as gone:
        await reader.get_cell(risk.id)
    assert gone.value.status == 404 and str(gone.value).startswith("not_found: ")


async def test_an_id_cannot_name_another_route(client: tuple[AsyncMemesh, AsyncMemesh]) -> None:
    """``delete_cell("../beacons/<id>")`` removed the beacon: httpx resolved the dot segments of an id put into
    the path unescaped (and ``x?project_id=y`` became a query string). Ids from a model's output are ids."""
    writer, _ = client
    beacon = await writer.place_beacon("database failover incidents")
    for hostile in (f"../beacons/{beacon}", "..", "x?project_id=y", f"{beacon}#frag"):
        with pytest.raises((NotFound, ValidationFailed)):
            await writer.delete_cell(hostile)
        with pytest.raises((NotFound, ValidationFailed)):
            await writer.get_cell(hostile)
    await writer.remove_beacon(beacon)  # still there to remove
    with pytest.raises(ValidationFailed) as naive:  # refused before sending: a naive datetime names no instant
        await writer.place_beacon("x", expires_at=datetime(2030, 1, 1))
    assert naive.value.status == 0


def _scripted(answers: dict[str, httpx.Response]) -> AsyncMemesh:
    """A client whose peer is a script (httpx.MockTransport): the real service never answers these shapes, so
    no real part can (this is the one fake of this file, and it stands for a broken or newer server)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return answers[f"{request.method} {request.url.path}"]

    base = "http://scripted.test"
    return AsyncMemesh(base, "msh_" + "k" * 43, http=httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url=base))


async def test_no_answer_escapes_as_anything_but_a_memesh_error() -> None:
    envelope = lambda code: {"error": {"code": code, "message": "m"}}  # noqa: E731
    node = {
        "id": "c1", "tenant_id": "t", "embedding": [0.1], "node_type": {"Cell": {"project_id": "p", "embedding_engine": "e"}},
        "cell_type": "Insight", "content": "x", "salience": 0.5, "source_agent": "a", "created_at": "2026-01-01T00:00:00Z",
        "last_accessed": "2026-01-01T00:00:00Z", "layer": "L9",
    }  # fmt: skip
    memory = _scripted(
        {
            "GET /v1/cells/a": httpx.Response(200, text="<html>proxy</html>"),
            "GET /v1/cells/b": httpx.Response(200, json={"id": 1}),
            "GET /v1/cells/c": httpx.Response(200, json=node),  # a newer server's cell type and layer
            "GET /v1/cells/d": httpx.Response(409, json=envelope("transaction")),
            "GET /v1/cells/e": httpx.Response(503, json=envelope("storage")),
            "GET /v1/cells/f": httpx.Response(404, json=envelope("gone_elsewhere")),
            "GET /v1/cells/g": httpx.Response(500, json=envelope("embedding")),
            "GET /v1/cells/h": httpx.Response(502, text="bad gateway"),
            "GET /v1/cells": httpx.Response(200, json={"cells": [], "next_cursor": "same"}),
        }
    )
    with pytest.raises(UnreadableAnswer):
        await memory.get_cell("a")
    with pytest.raises(UnreadableAnswer):
        await memory.get_cell("b")
    newer = await memory.get_cell("c")
    assert (newer.cell_type, newer.layer) == ("Insight", "L9")
    for cell_id, kind, code in (
        ("d", TransactionFailed, "transaction"),
        ("e", StorageUnavailable, "storage"),
        ("f", NotFound, "gone_elsewhere"),
        ("g", ServiceFailed, "embedding"),
        ("h", MemeshError, "internal"),
    ):
        with pytest.raises(kind) as caught:
            await memory.get_cell(cell_id)
        assert caught.value.code == code
    with pytest.raises(UnreadableAnswer):  # a page that hands back its own cursor ends the walk, not a loop
        [c async for c in memory.iter_cells()]
    await memory.aclose()


async def test_the_inbox_stream_never_just_ends() -> None:
    """A stream that closed without an error frame (a restart, a dropped connection) ended ``async for``
    silently, and a frame that was not JSON ended it too, its exception surfacing only on leaving ``inbox()``.
    The peer is a scripted WebSocket server on a loopback socket: the real service sends neither on cue."""
    from websockets.asyncio.server import ServerConnection, serve

    item = {
        "delivery_seq": 1,
        "diff": {
            "id": "d", "cell_id": "c", "content": "x", "cell_type": "Fact", "layer": "L0", "salience": 0.5, "energy": 1.0,
            "embedding_engine": "e", "provenance": {"tenant_id": "t", "project_id": "p", "origin_agent": "a",
                                                     "created_at": "2026-01-01T00:00:00Z"},
        },
        "delivery": {"score": 0.9, "hops": 1, "energy": 0.5, "delivered_at": "2026-01-01T00:00:00Z", "node_id": "n",
                     "node_kind": "agent"},
    }  # fmt: skip
    script: list[str] = []

    async def peer(ws: ServerConnection) -> None:
        await ws.send(json.dumps(item))
        if script[-1] == "garbage":
            await ws.send("not json")
            await asyncio.sleep(5)
        elif script[-1] == "silent":
            await asyncio.sleep(5)  # never answers an ack
        else:
            await ws.close(1001, "going away")  # a restart: no error frame

    async with serve(peer, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        memory = AsyncMemesh(f"http://127.0.0.1:{port}", "msh_" + "k" * 43, timeout_s=0.5)
        for how, expected in (("restart", ConnectionFailed), ("garbage", UnreadableAnswer)):
            script.append(how)
            with pytest.raises(expected):
                async with memory.inbox() as inbox:
                    async with asyncio.timeout(10):
                        async for got in inbox:
                            assert got.delivery_seq == 1
        script.append("silent")
        async with memory.inbox() as inbox:
            assert (await anext(inbox)).delivery_seq == 1
            with pytest.raises(ValidationFailed):
                await inbox.ack(True)  # type: ignore[arg-type]
            with pytest.raises(TimedOut):
                await inbox.ack(1)
        await memory.aclose()


async def test_no_answer_in_time_is_timed_out_and_no_connection_is_connection_failed() -> None:
    """A request sent whose answer never came was ConnectionFailed (an Unavailable): a caller retrying
    Unavailable wrote twice. The peer is a loopback socket that accepts and never answers."""

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with AsyncMemesh(f"http://127.0.0.1:{port}", "msh_" + "k" * 43, timeout_s=0.3) as memory:
        with pytest.raises(TimedOut) as late:
            await memory.write("x", "Fact")
        assert late.value.status == 0 and "may have been applied" in late.value.message
    server.close()
    await server.wait_closed()
    async with AsyncMemesh(f"http://127.0.0.1:{port}", "msh_" + "k" * 43, timeout_s=0.3) as memory:
        with pytest.raises(ConnectionFailed):
            await memory.write("x", "Fact")

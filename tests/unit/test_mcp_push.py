"""Inbox push over MCP on a real loopback socket (uvicorn in process, the in-process core).

The SDK's in-process ASGI transport buffers a response, so a listen stream
needs a real server; ``tests/e2e/test_mcp.py`` covers the same against
``memesh serve``. Here: a listen stream outlives the request timeout (it is a
stream, bounded by the inbox stream slots and its key instead), and a listen
past the agent's slots is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from mcp import MCPError
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from api.app import create_app
from head.facade import Memesh
from tests.unit.conftest import ADMIN

TIMEOUT_S = 1.0


@asynccontextmanager
async def serving(core: Memesh) -> AsyncIterator[str]:
    await core.health(timeout_s=60.0)  # every actor loaded first: the 1 s timeout is for the stream, not a cold start
    app = create_app(core, request_timeout_s=TIMEOUT_S)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        await app.state.mcp.close()


def mcp_client(url: str, key: str) -> Client:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=30)
    return Client(streamable_http_client(url, http_client=http), mode="2026-07-28")


async def test_a_listen_stream_outlives_the_request_timeout_and_is_told_of_a_delivery(
    make_core: Callable[..., Memesh],
) -> None:
    core = make_core()
    listener = await core.identity.issue(ADMIN, "push", "listener", ["Reader"])
    writer = await core.identity.issue(ADMIN, "push", "writer", ["Writer"])
    interest = "the nightly backup job moved to 02:00 UTC"
    own = f"memesh://agents/{listener.agent.id}/inbox"
    async with serving(core) as url, mcp_client(url, listener.plaintext_secret) as mcp:
        await mcp.call_tool("place_beacon", {"interest": interest})
        async with mcp.listen(resource_subscriptions=[own]) as subscription:
            await asyncio.sleep(TIMEOUT_S * 2.5)  # past the request timeout: a plain request would be a 504 by now
            async with mcp_client(url, writer.plaintext_secret) as writing:
                written = await writing.call_tool("write_cell", {"content": interest, "cell_type": "Fact"})
                assert not written.is_error, written.content
            event = await asyncio.wait_for(anext(subscription), 20)
            assert getattr(event, "uri", None) == own
    await core.close()


async def test_a_listen_past_the_agents_stream_slots_is_refused(make_core: Callable[..., Memesh]) -> None:
    core = make_core(limits={"max_inbox_streams_per_agent": 1})
    agent = await core.identity.issue(ADMIN, "push", "greedy", ["Reader"])
    own = f"memesh://agents/{agent.agent.id}/inbox"
    async with serving(core) as url, mcp_client(url, agent.plaintext_secret) as mcp:
        async with mcp.listen(resource_subscriptions=[own]):
            with pytest.raises(MCPError) as refused:
                async with mcp.listen(resource_subscriptions=[own]):
                    pass
            assert refused.value.error.message.startswith("quota_exceeded:"), refused.value
        for _ in range(50):  # the slot is freed once the server sees the first stream's connection close
            try:
                async with mcp.listen(resource_subscriptions=[own]) as again:
                    assert again.honored.resource_subscriptions == [own]
                break
            except MCPError:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the slot of a closed listen stream was never freed")
    await core.close()


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # the handshake era's own method
async def test_a_handshake_era_host_subscribes_and_is_told_on_its_session_stream(make_core: Callable[..., Memesh]) -> None:
    """The handshake era: an initialize gets a session id (no head stores it), the host opens its GET
    stream with it, subscribes to its own inbox, and the update arrives there; another URI is refused."""
    core = make_core()
    listener = await core.identity.issue(ADMIN, "push", "listener", ["Reader"])
    writer = await core.identity.issue(ADMIN, "push", "writer", ["Writer"])
    other = await core.identity.issue(ADMIN, "push", "other", ["Reader"])
    interest = "the staging cluster is rebuilt every Friday night"
    own = f"memesh://agents/{listener.agent.id}/inbox"
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            updates.put_nowait(str(message.params.uri))

    async with serving(core) as url:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {listener.plaintext_secret}"}, timeout=30)
        legacy = Client(streamable_http_client(url, http_client=http), mode="legacy", message_handler=on_message)
        async with legacy as mcp:
            assert mcp.server_capabilities.resources is not None and mcp.server_capabilities.resources.subscribe
            with pytest.raises(MCPError) as refused:
                await mcp.session.subscribe_resource(f"memesh://agents/{other.agent.id}/inbox")
            assert refused.value.error.message.startswith("forbidden:")
            await mcp.session.subscribe_resource(own)
            await mcp.call_tool("place_beacon", {"interest": interest})
            await asyncio.sleep(TIMEOUT_S * 1.5)  # the session stream outlives the request timeout too
            async with mcp_client(url, writer.plaintext_secret) as writing:
                assert not (await writing.call_tool("write_cell", {"content": interest, "cell_type": "Fact"})).is_error
            assert await asyncio.wait_for(updates.get(), 20) == own
    await core.close()


async def test_session_streams_hold_inbox_stream_slots(make_core: Callable[..., Memesh]) -> None:
    """A Reader key cannot hold session streams without bound: past the agent's slots, 429 before any stream."""
    core = make_core(limits={"max_inbox_streams_per_agent": 1})
    agent = await core.identity.issue(ADMIN, "push", "greedy", ["Reader"])
    headers = {"authorization": f"Bearer {agent.plaintext_secret}", "accept": "text/event-stream", "mcp-session-id": "a" * 32}
    async with serving(core) as url, httpx.AsyncClient(timeout=10) as http, http.stream("GET", url, headers=headers) as first:
        assert first.status_code == 200
        second = await http.get(url, headers=headers)
        assert second.status_code == 429 and second.json()["error"]["code"] == "quota_exceeded"
    await core.close()

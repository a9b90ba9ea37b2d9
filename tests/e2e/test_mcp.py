"""MCP at /mcp on a running server, with the official ``mcp`` client in both protocol eras.

The handshake era (``legacy``: initialize, then calls) and the 2026-07-28 era
(sessionless, per-request headers) are both driven by the SDK's own client;
the key is sent as ``Authorization: Bearer`` (what most hosts can send) or as
``x-service-key``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx2
import pytest
from mcp import MCPError
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.servers import Server, assert_envelope

ERAS = ["legacy", "2026-07-28"]
TOOLS = {
    "recall",
    "query",
    "write_cell",
    "get_cell",
    "list_cells",
    "delete_cell",
    "open_session",
    "close_session",
    "place_beacon",
    "remove_beacon",
    "get_scene",
    "pull_inbox",
}


def client(server: Server, headers: dict[str, str], era: str, path: str = "/mcp") -> Client:
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    return Client(streamable_http_client(f"{server.base_url}{path}", http_client=http), mode=era)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 120))


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


@pytest.mark.parametrize("era", ERAS)
def test_an_agent_writes_and_recalls_through_mcp(server: Server, era: str) -> None:
    key = server.issue(f"mcp-{era}", "Writer", "mcp-agent")["plaintext_secret"]

    async def body() -> None:
        async with client(server, bearer(key), era) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert set(tools) == TOOLS and "consolidate_scene" not in tools
            assert "cosine distance" in (tools["recall"].description or "")
            assert all("tenant" not in str(t.input_schema) and "agent_id" not in str(t.input_schema) for t in tools.values())
            written = structured(
                await mcp.call_tool(
                    "write_cell", {"content": "The payment service retries a declined card three times.", "cell_type": "Fact"}
                )
            )
            await mcp.call_tool("write_cell", {"content": "Office plants are watered on Mondays.", "cell_type": "Fact"})
            for tool in ("recall", "query"):
                hits = structured(await mcp.call_tool(tool, {"text": "how often is a rejected card payment retried", "k": 2}))[
                    "result"
                ]
                assert hits[0]["node_id"] == written["node_id"], hits
                assert all(set(h) == {"node_id", "distance"} and 0.0 <= h["distance"] <= 2.0 for h in hits)
            dense = structured(await mcp.call_tool("query", {"text": "card payment retried", "k": 2, "ranking": "dense"}))
            assert [h["distance"] for h in dense["result"]] == sorted(h["distance"] for h in dense["result"])
            assert (await mcp.call_tool("query", {"text": "x", "k": 1, "ranking": "bm25"})).is_error
            refused = await mcp.call_tool("recall", {"text": "anything", "k": 100_000})
            assert refused.is_error and refused.content[0].text.startswith("validation:")
            scene = structured(await mcp.call_tool("get_scene", {"scene_id": written["scene_id"]}))
            assert written["node_id"] in scene["members"] and "centroid" not in scene

    run(body)


def test_no_key_and_a_foreign_tenant_get_nothing(server: Server) -> None:
    owner = server.issue("mcp-owner", "Writer", "owner")["plaintext_secret"]
    stranger = server.issue("mcp-stranger", "Writer", "stranger")["plaintext_secret"]
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"accept": "application/json, text/event-stream"}
    for path in ("/mcp", "/mcp/"):
        assert_envelope(httpx.post(f"{server.base_url}{path}", json=request, headers=accept), 401, "unauthorized")
        assert_envelope(
            httpx.post(f"{server.base_url}{path}", json=request, headers={**accept, **bearer("msh_forged")}), 401, "unauthorized"
        )

    async def body() -> None:
        async with client(server, {"x-service-key": owner}, "legacy", path="/mcp/") as mcp:  # no redirect, the same endpoint
            await mcp.call_tool("write_cell", {"content": "Tenant A's launch code is under the mat.", "cell_type": "Fact"})
        async with client(server, bearer(stranger), "2026-07-28") as mcp:
            assert structured(await mcp.call_tool("recall", {"text": "launch code under the mat", "k": 50}))["result"] == []

    run(body)


@pytest.mark.parametrize("era", ERAS)
def test_a_revoked_key_fails_on_the_very_next_call(server: Server, era: str) -> None:
    agent = server.issue(f"mcp-revoke-{era}", "Writer", "doomed")

    async def body() -> None:
        async with client(server, bearer(agent["plaintext_secret"]), era) as mcp:
            structured(await mcp.call_tool("query", {"text": "anything", "k": 1}))
            server.admin("agents", "revoke", agent["agent_id"])
            with pytest.raises(MCPError):  # the client sees the HTTP refusal as a failed request
                await mcp.call_tool("query", {"text": "anything", "k": 1})

    run(body)
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"accept": "application/json, text/event-stream", **bearer(agent["plaintext_secret"])}
    assert_envelope(httpx.post(f"{server.base_url}/mcp", json=request, headers=headers), 401, "unauthorized")


def test_the_inbox_is_pulled_through_mcp_without_embeddings(server: Server) -> None:
    listener = server.issue("mcp-inbox", "Reader", "listener")["plaintext_secret"]
    writer = server.issue("mcp-inbox", "Writer", "writer")["plaintext_secret"]

    async def body() -> None:
        async with client(server, bearer(listener), "2026-07-28") as mcp:
            structured(await mcp.call_tool("place_beacon", {"interest": "certificate expiry alerts for the api gateway"}))
            with server.http(writer) as http:
                http.post(
                    "/v1/cells", json={"content": "The TLS certificate of the api gateway expires soon.", "cell_type": "Risk"}
                )
            page: dict[str, Any] = {"items": []}
            for _ in range(100):
                page = structured(await mcp.call_tool("pull_inbox", {}))
                if page["items"]:
                    break
                await asyncio.sleep(0.2)
            assert page["items"], "nothing was delivered"
            item = page["items"][0]
            assert "embedding" not in item["diff"] and item["delivery_seq"] >= 1
            acked = structured(await mcp.call_tool("pull_inbox", {"ack": page["window_high"]}))
            assert acked["cursor"] == page["window_high"]

    run(body)


def inbox(agent_id: str) -> str:
    return f"memesh://agents/{agent_id}/inbox"


def test_a_listen_stream_on_the_own_inbox_is_told_when_a_delivery_commits(server: Server) -> None:
    """The push no peer has: subscriptions/listen on the caller's inbox resource (2026-07-28 era)."""
    listener = server.issue("mcp-push", "Reader", "listener")
    writer = server.issue("mcp-push", "Writer", "writer")
    own = inbox(listener["agent_id"])

    async def body() -> None:
        async with client(server, bearer(listener["plaintext_secret"]), "2026-07-28") as mcp:
            structured(await mcp.call_tool("place_beacon", {"interest": "rollback plan for the billing database migration"}))
            async with mcp.listen(resource_subscriptions=[own]) as subscription:
                assert subscription.honored.resource_subscriptions == [own]
                with server.http(writer["plaintext_secret"]) as http:
                    written = http.post(
                        "/v1/cells",
                        json={
                            "content": "The billing database migration rolls back by restoring Sunday's snapshot.",
                            "cell_type": "Decision",
                        },
                    )
                    assert written.status_code == 201, written.text
                event = await asyncio.wait_for(anext(subscription), 60)
                assert getattr(event, "uri", None) == own
            page = json.loads((await mcp.read_resource(own)).contents[0].text)
            assert page["items"] and "embedding" not in page["items"][0]["diff"]
            assert page["cursor"] == 0, "reading the resource acknowledges nothing"

    run(body)


def test_another_agents_inbox_can_be_neither_subscribed_to_nor_read(server: Server) -> None:
    me = server.issue("mcp-push-foreign", "Reader", "me")
    other = server.issue("mcp-push-foreign", "Reader", "other")

    async def body() -> None:
        async with client(server, bearer(me["plaintext_secret"]), "2026-07-28") as mcp:
            for uris in ([inbox(other["agent_id"])], [inbox(me["agent_id"]), inbox(other["agent_id"])], ["file:///etc/passwd"]):
                with pytest.raises(MCPError) as refused:
                    async with mcp.listen(resource_subscriptions=uris):
                        pass
                assert str(refused.value.error.message).startswith("forbidden:"), refused.value
            with pytest.raises(MCPError) as refused:
                await mcp.read_resource(inbox(other["agent_id"]))
            assert refused.value.error.message.startswith("forbidden:")

    run(body)


def test_a_revoked_key_ends_its_listen_stream_at_once(server: Server) -> None:
    agent = server.issue("mcp-push-revoke", "Reader", "doomed")

    async def body() -> None:
        own = inbox(agent["agent_id"])
        async with (
            client(server, bearer(agent["plaintext_secret"]), "2026-07-28") as mcp,
            mcp.listen(resource_subscriptions=[own]) as subscription,
        ):
            await asyncio.to_thread(server.admin, "agents", "revoke", agent["agent_id"])
            started = asyncio.get_running_loop().time()
            with pytest.raises(Exception) as ended:  # the stream ends: the listen request's error
                await asyncio.wait_for(anext(subscription), 8)
            assert not isinstance(ended.value, TimeoutError), "the stream outlived its key"
            assert asyncio.get_running_loop().time() - started < 5

    run(body)


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # the handshake era's own method
def test_a_handshake_era_host_is_told_on_its_session_stream(server: Server) -> None:
    """The handshake era has no listen: its initialize gets a session id (stored nowhere), the SDK opens
    its GET stream with it and subscribes; the update arrives there."""
    listener = server.issue("mcp-push-legacy", "Reader", "listener")
    writer = server.issue("mcp-push-legacy", "Writer", "writer")
    own = inbox(listener["agent_id"])
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            updates.put_nowait(str(message.params.uri))

    async def body() -> None:
        http = httpx2.AsyncClient(headers=bearer(listener["plaintext_secret"]), timeout=60)
        transport = streamable_http_client(f"{server.base_url}/mcp", http_client=http)
        legacy = Client(transport, mode="legacy", message_handler=on_message)
        async with legacy as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.session.subscribe_resource(inbox(writer["agent_id"]))
            assert refused.value.error.message.startswith("forbidden:")
            await mcp.session.subscribe_resource(own)
            structured(await mcp.call_tool("place_beacon", {"interest": "on-call rotation for the payments team"}))
            with server.http(writer["plaintext_secret"]) as http_writer:
                written = http_writer.post(
                    "/v1/cells", json={"content": "The payments team on-call rotation becomes weekly.", "cell_type": "Decision"}
                )
                assert written.status_code == 201, written.text
            assert await asyncio.wait_for(updates.get(), 60) == own

    run(body)


def test_a_revoked_key_ends_its_session_stream_at_once(server: Server) -> None:
    agent = server.issue("mcp-push-legacy-revoke", "Reader", "doomed")
    headers = {**bearer(agent["plaintext_secret"]), "accept": "text/event-stream", "mcp-session-id": "0" * 32}
    with httpx.Client(base_url=server.base_url, timeout=httpx.Timeout(10, read=8)) as http:
        with http.stream("GET", "/mcp", headers=headers) as stream:
            assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
            server.admin("agents", "revoke", agent["agent_id"])
            started = time.monotonic()
            for _ in stream.iter_bytes():  # ends when the server closes the stream; a read timeout fails the test
                pass
            assert time.monotonic() - started < 5
        assert_envelope(http.get("/mcp", headers=headers), 401, "unauthorized")

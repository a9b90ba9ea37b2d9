"""The /mcp door in process: admission before MCP, the tool set, coded tool errors, both eras.

The official client runs over an in-process ASGI transport (the SDK's
``httpx2``); ``tests/e2e/test_mcp.py`` does the same against ``memesh serve``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import MCPError
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from api.admission import presented_key
from api.app import create_app
from api.gate_common import MAX_JSON_DEPTH, MAX_JSON_VALUES
from head.facade import Memesh
from mesh.errors import Unauthorized
from tests.unit.conftest import ADMIN, assert_error

ERAS = ["legacy", "2026-07-28"]


@asynccontextmanager
async def mcp_client(app: Any, headers: dict[str, str], era: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://memesh.test", headers=headers)
    async with Client(streamable_http_client("http://memesh.test/mcp", http_client=http), mode=era) as client:
        yield client


async def key_of(core: Memesh, tenant: str, role: str = "Writer") -> str:
    return (await core.identity.issue(ADMIN, tenant, "mcp", [role])).plaintext_secret


def test_the_key_comes_from_the_header_or_a_bearer_token() -> None:
    assert presented_key([("x-service-key", "msh_a")]) == "msh_a"
    assert presented_key([("Authorization", "Bearer msh_b")]) == "msh_b"
    assert presented_key([("authorization", "bearer  msh_c ")]) == "msh_c"
    assert presented_key([("authorization", "Basic bXNoOng=")]) is None
    assert presented_key([("authorization", "Bearer ")]) is None and presented_key([]) is None
    assert presented_key([("x-service-key", "msh_a"), ("authorization", "Bearer x"), ("authorization", "Bearer y")]) == "msh_a"
    assert presented_key([("x-service-key", "msh_a")], bearer=False) == "msh_a"
    assert presented_key([("authorization", "Bearer msh_b")], bearer=False) is None
    keys_twice = [("x-service-key", "msh_a"), ("X-Service-Key", "msh_a")]
    for twice in (keys_twice, [("authorization", "Bearer a"), ("authorization", "Bearer b")]):
        with pytest.raises(Unauthorized):
            presented_key(twice)


async def test_no_key_is_the_spec_envelope_before_any_mcp(core: Memesh) -> None:
    app = create_app(core)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test")
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for path in ("/mcp", "/mcp/"):
        assert_error(await http.post(path, json=request), 401, "unauthorized")
        assert_error(await http.post(path, json=request, headers={"authorization": "Bearer msh_forged"}), 401, "unauthorized")
        assert_error(await http.post(path, content=b"{{{", headers={"x-service-key": "msh_forged"}), 401, "unauthorized")
    await http.aclose()
    await app.state.mcp.close()


@pytest.mark.parametrize("era", ERAS)
async def test_tools_answer_hits_as_node_and_distance_and_errors_start_with_the_code(core: Memesh, era: str) -> None:
    app = create_app(core)
    key = await key_of(core, "t1")
    async with mcp_client(app, {"authorization": f"Bearer {key}"}, era) as mcp:
        written = await mcp.call_tool("write_cell", {"content": "we deploy the api with helm", "cell_type": "Decision"})
        node_id = written.structured_content["node_id"]
        for tool in ("recall", "query"):
            result = await mcp.call_tool(tool, {"text": "we deploy the api with helm", "k": 3})
            hits = result.structured_content["result"]
            assert hits[0] == {"node_id": node_id, "distance": pytest.approx(0.0, abs=1e-4)}
        refused = await mcp.call_tool("get_scene", {"scene_id": "00000000-0000-7000-8000-00000000dead"})
        assert refused.is_error and refused.content[0].text.startswith("not_found:")
        too_many = await mcp.call_tool("query", {"text": "x", "k": 10**6})
        assert too_many.is_error and too_many.content[0].text.startswith("validation:")
        for wrong in ({"k": 3}, {"text": "", "k": 3}, {"text": "x", "k": "many"}, {"text": "x", "cell_types": ["Gossip"]}):
            refused = await mcp.call_tool("recall", wrong)  # refused by the input schema, before memesh runs
            assert refused.is_error and refused.content[0].text.startswith("validation: "), refused.content
    await app.state.mcp.close()


async def test_a_reader_cannot_write_and_another_tenant_sees_nothing(core: Memesh) -> None:
    app = create_app(core)
    writer, reader, stranger = await key_of(core, "t1"), await key_of(core, "t1", "Reader"), await key_of(core, "t2")
    async with mcp_client(app, {"x-service-key": writer}, "legacy") as mcp:
        await mcp.call_tool("write_cell", {"content": "the launch code is under the mat", "cell_type": "Fact"})
    async with mcp_client(app, {"x-service-key": reader}, "2026-07-28") as mcp:
        refused = await mcp.call_tool("write_cell", {"content": "a reader's note", "cell_type": "Fact"})
        assert refused.is_error and refused.content[0].text.startswith("forbidden:")
        assert (await mcp.call_tool("recall", {"text": "launch code under the mat"})).structured_content["result"]
    async with mcp_client(app, {"x-service-key": stranger}, "2026-07-28") as mcp:
        assert (await mcp.call_tool("recall", {"text": "launch code under the mat"})).structured_content["result"] == []
    await app.state.mcp.close()


async def test_messages_other_than_tool_calls_are_charged_too(make_core: Callable[..., Memesh]) -> None:
    """A Reader must not send ``tools/list`` or ``ping`` without bound: each costs a Read token."""
    core = make_core(rate_limits={"read": {"rate": 0.001, "burst": 3}})
    app = create_app(core)
    key = await key_of(core, "t1", "Reader")
    async with mcp_client(app, {"x-service-key": key}, "2026-07-28") as mcp:
        with pytest.raises(MCPError, match=r"^rate_limited: "):
            for _ in range(10):
                await mcp.list_tools()
        refused = await mcp.call_tool("recall", {"text": "anything"})  # the same Read bucket
        assert refused.is_error and refused.content[0].text.startswith("rate_limited:")
        with pytest.raises(MCPError, match=r"^rate_limited: "):  # charged before it is refused as not_found
            await mcp.get_prompt("x")
    await app.state.mcp.close()


async def test_a_search_of_many_nodes_costs_a_read_token_per_hundred(make_core: Callable[..., Memesh]) -> None:
    """As on every door (``Memesh.charge_read``): k=1000 costs ten Read tokens, k=10 one."""
    core = make_core(rate_limits={"read": {"rate": 0.001, "burst": 12}})
    app = create_app(core)
    key = await key_of(core, "t1", "Reader")
    async with mcp_client(app, {"x-service-key": key}, "2026-07-28") as mcp:  # its handshake costs its tokens
        for _ in range(3):
            assert not (await mcp.call_tool("recall", {"text": "anything", "k": 10})).is_error
        refused = await mcp.call_tool("query", {"text": "anything", "k": 1000})
        assert refused.is_error and refused.content[0].text.startswith("rate_limited:")
        assert not (await mcp.call_tool("query", {"text": "anything", "k": 100})).is_error
    await app.state.mcp.close()


async def test_only_post_is_served_and_nothing_holds_a_connection_open(core: Memesh) -> None:
    """Without a session id there is no server stream: a GET must not open one (the session stream is
    bounded by the inbox stream slots, tests/unit/test_mcp_push.py); other methods and bodies get the
    same envelopes as /v1."""
    app = create_app(core, max_body_bytes=1024)
    key = await key_of(core, "t1", "Reader")
    headers = {"x-service-key": key, "accept": "application/json, text/event-stream"}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test")
    for method, allowed in (("GET", "POST"), ("DELETE", "POST"), ("PUT", "DELETE, GET, POST")):
        refused = await asyncio.wait_for(http.request(method, "/mcp", headers=headers), 5)
        assert_error(refused, 405, "validation")  # GET and DELETE need a session id (of an initialize)
        assert refused.headers["allow"] == allowed
    ended = await http.delete("/mcp", headers={**headers, "mcp-session-id": "f" * 32})  # a session id names no state
    assert ended.status_code == 204
    for accept in ("application/json", "text/html", ""):  # a GET stream for a client that takes no event stream
        stream = await asyncio.wait_for(http.get("/mcp", headers={**headers, "accept": accept, "mcp-session-id": "f" * 32}), 5)
        assert_error(stream, 406, "validation")
    assert core.inbox.open_streams == 0  # it held no stream slot
    assert_error(await http.post("/mcp", content=b"x=1", headers={**headers, "content-type": "text/plain"}), 415, "validation")
    assert_error(await http.post("/mcp", json={"pad": "x" * 2048}, headers=headers), 400, "validation")
    await http.aclose()
    await app.state.mcp.close()


@pytest.mark.parametrize("era", ERAS)
async def test_the_sdks_own_refusals_start_with_the_spec_code_too(core: Memesh, era: str) -> None:
    """The SDK answered an unknown prompt with code 0 (and an ERROR traceback), an unknown tool, a resource
    that is not the caller's inbox and params of the wrong type in its own words, with no spec code."""
    app = create_app(core)
    key = await key_of(core, "t1")
    async with mcp_client(app, {"x-service-key": key}, era) as mcp:
        with pytest.raises(MCPError, match=r"^not_found: ") as refused:
            await mcp.get_prompt("x")
        assert refused.value.code == -32602
        unknown = await mcp.call_tool("consolidate_scene", {})
        assert unknown.is_error and unknown.content[0].text.startswith("not_found: ")
        with pytest.raises(MCPError, match=r"^forbidden: "):
            await mcp.read_resource("file:///etc/passwd")
        for arguments, field in (
            ({"ack": 2**70}, "ack"),  # REST's int64 bound, as /v1/inbox:pull and the WebSocket refuse it
            ({"limit": 2**40}, "limit"),
        ):
            refused_pull = await mcp.call_tool("pull_inbox", arguments)
            assert refused_pull.is_error and refused_pull.content[0].text.startswith(f"validation: {field}:")
        for tool, arguments, field in (  # an id is a UUID, as REST's path and gRPC's field: never not_found or []
            ("get_cell", {"node_id": "bad"}, "node_id"),
            ("delete_cell", {"node_id": "bad"}, "node_id"),
            ("get_scene", {"scene_id": "bad"}, "scene_id"),
            ("recall", {"text": "x", "scene_id": "nope"}, "scene_id"),
            ("close_session", {"session_id": "x"}, "session_id"),
            ("remove_beacon", {"node_id": "x"}, "node_id"),
        ):
            refused_id = await mcp.call_tool(tool, arguments)
            assert refused_id.is_error and refused_id.content[0].text.startswith(f"validation: {field}:"), refused_id
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test")
    headers = {"x-service-key": key, "accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    opened = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, headers=headers)
    headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    other = (await core.identity.issue(ADMIN, "t1", "other", ["Writer"])).agent.id
    for method, params, start in (
        ("resources/subscribe", {"uri": "file:///etc/passwd"}, "forbidden: "),
        ("resources/subscribe", {"uri": f"MEMESH://agents/{other}/inbox"}, "forbidden: "),
        ("tools/call", {"name": 5, "arguments": {}}, "validation: "),
        ("tools/call", {"name": "recall", "arguments": [1]}, "validation: "),
    ):
        answer = (
            await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers)
        ).json()
        assert answer["error"]["code"] == -32602 and answer["error"]["message"].startswith(start), answer
    await http.aclose()
    await app.state.mcp.close()


async def test_what_is_no_json_rpc_message_is_the_spec_envelope(core: Memesh) -> None:
    """The SDK answered these 400 (406) with a JSON-RPC error object, a pydantic dump for a bad message;
    every non-2xx answer is the spec's envelope. A request's own JSON-RPC error (it has the id) stays one."""
    app = create_app(core)
    key = await key_of(core, "t1")
    headers = {"x-service-key": key, "accept": "application/json, text/event-stream"}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test", headers=headers)
    tools = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for body in ({"jsonrpc": "2.0", "id": 1, "method": 5}, {**tools, "jsonrpc": "1.0"}, [tools, tools], [], 5):
        refused = await http.post("/mcp", json=body)
        assert_error(refused, 400, "validation")
        assert "pydantic" not in refused.text and "JSON-RPC" in refused.json()["error"]["message"]
    assert_error(await http.post("/mcp", json=tools, headers={"accept": "text/html"}), 406, "validation")
    answered = await http.post("/mcp", json=tools, headers={"mcp-protocol-version": "1999-01-01"})
    assert answered.status_code == 400 and answered.json()["id"] == 1 and isinstance(answered.json()["error"]["code"], int)
    assert (await http.post("/mcp", json=tools)).status_code == 200
    await http.aclose()
    await app.state.mcp.close()


async def test_a_message_too_large_in_shape_or_with_an_id_it_cannot_answer_is_refused(core: Memesh) -> None:
    """Refused 400 ``validation`` before the SDK: a message past MAX_JSON_VALUES values or MAX_JSON_DEPTH levels
    (the SDK builds its objects on the event loop every request shares), and a request whose id is neither a
    string nor an integer (the SDK took it for a notification: 202, never run, its client waiting for ever)."""
    app = create_app(core)
    key = await key_of(core, "t1")
    headers = {"x-service-key": key, "accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test", headers=headers)
    recall = {"name": "recall", "arguments": {"text": "x", "cell_types": ["Fact"] * MAX_JSON_VALUES}}
    deep: Any = "x"
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep]
    write = {"name": "write_cell", "arguments": {"content": "never written", "cell_type": "Fact"}}
    bodies: list[Any] = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": recall},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**write, "_meta": deep}},
        *({"jsonrpc": "2.0", "id": bad, "method": "tools/call", "params": write} for bad in (1.5, 1e308, True, None, [1], {})),
    ]
    for body in bodies:
        assert_error(await http.post("/mcp", json=body), 400, "validation")
    small = {"name": "recall", "arguments": {"text": "x"}}
    served = await http.post("/mcp", json={"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": small})
    assert served.status_code == 200 and served.json()["id"] == "a"
    cells = {"name": "list_cells", "arguments": {}}
    listed = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": cells})
    assert listed.json()["result"]["structuredContent"]["cells"] == []  # no refused write ran
    await http.aclose()
    await app.state.mcp.close()


async def test_a_listen_the_sdk_refuses_keeps_its_code_and_logs_nothing(core: Memesh, caplog: pytest.LogCaptureFixture) -> None:
    """A ``subscriptions/listen`` the SDK refuses (a handshake-era one: no such method there; one whose
    params it cannot read) left the listen's task group as an ExceptionGroup and was answered ``-32603
    internal`` with an ERROR traceback; it is the SDK's ``-32601``, or ``-32602 validation``."""
    app = create_app(core)
    key = await key_of(core, "t1")
    agent_id = (await core.principal(key)).agent_id
    own = f"memesh://agents/{agent_id}/inbox"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"x-service-key": key, "accept": "application/json, text/event-stream"}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test", headers=headers)
    listen = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen"}
    handshake_era = await http.post(
        "/mcp",
        json={**listen, "params": {"notifications": {"resourceSubscriptions": [own]}}},
        headers={"mcp-protocol-version": "2025-06-18"},
    )
    assert handshake_era.json()["error"]["code"] == -32601, handshake_era.text
    now = {"mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen"}
    unreadable = await http.post("/mcp", json={**listen, "params": {"notifications": 5, "_meta": meta}}, headers=now)
    error = unreadable.json()["error"]
    assert error["code"] == -32602 and error["message"].startswith("validation: "), unreadable.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await http.aclose()
    await app.state.mcp.close()


async def test_a_session_stream_the_client_leaves_leaves_no_task_behind(core: Memesh) -> None:
    """A notification stream (``GET /mcp``) whose client left kept its wait for the next update pending,
    which asyncio logged at ERROR ("Task was destroyed but it is pending!") when it was collected."""
    app = create_app(core)
    key = await key_of(core, "t1")
    headers = [(b"x-service-key", key.encode()), (b"accept", b"text/event-stream"), (b"mcp-session-id", b"f" * 32)]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": "/mcp", "raw_path": b"/mcp", "query_string": b"", "headers": headers,
        "client": ("127.0.0.1", 5000), "server": ("memesh.test", 80), "root_path": "",
    }  # fmt: skip
    started = asyncio.Event()
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        await started.wait()
        await asyncio.sleep(0.2)  # the stream waits for its first update
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])
            started.set()

    await asyncio.wait_for(app(scope, receive, send), 10)
    await asyncio.sleep(0)
    assert statuses == [200]
    pending = [t for t in asyncio.all_tasks() if not t.done() and "Queue.get" in repr(t.get_coro())]
    assert pending == []
    await app.state.mcp.close()


async def test_arguments_are_held_to_the_input_schema_strictly(core: Memesh) -> None:
    """The SDK read arguments laxly: ``k: "3"`` was 3, ``k: true`` 1, ``salience: "0.7"`` 0.7, where the
    A2A door and REST refuse them. Values of the schema's own types (an integer for a number, an integral
    number for an integer, as JSON Schema reads it, strings for enums, ids and times) are served as before."""
    app = create_app(core)
    key = await key_of(core, "t1")
    async with mcp_client(app, {"x-service-key": key}, "legacy") as mcp:
        for tool, arguments, field in (
            ("recall", {"text": "x", "k": "3"}, "k"),
            ("recall", {"text": "x", "k": True}, "k"),
            ("query", {"text": "x", "k": 2.5}, "k"),
            ("pull_inbox", {"limit": True}, "limit"),
            ("pull_inbox", {"since": "0"}, "since"),
            ("place_beacon", {"interest": "x", "ttl_s": "60"}, "ttl_s"),
            ("write_cell", {"content": "x", "cell_type": "Fact", "salience": "0.7"}, "salience"),
            ("write_cell", {"content": 5, "cell_type": "Fact"}, "content"),
            ("list_cells", {"limit": "10"}, "limit"),
        ):
            refused = await mcp.call_tool(tool, arguments)
            assert refused.is_error and refused.content[0].text.startswith(f"validation: {field}:"), (tool, refused)
        written = await mcp.call_tool("write_cell", {"content": "the deploy failed", "cell_type": "Fact", "salience": 1})
        assert not written.is_error, written
        hits = await mcp.call_tool("recall", {"text": "deploy", "k": 3.0, "cell_types": ["Fact"], "ranking": "dense"})
        assert not hits.is_error and len(hits.structured_content["result"]) == 1
        beacon = await mcp.call_tool("place_beacon", {"interest": "deploys", "ttl_s": 60})
        assert not beacon.is_error, beacon
        listed = await mcp.call_tool("list_cells", {"limit": 5})
        assert not listed.is_error and len(listed.structured_content["cells"]) == 1
    await app.state.mcp.close()

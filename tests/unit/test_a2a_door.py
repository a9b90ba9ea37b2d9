"""The A2A door in process: admission before JSON-RPC, every operation through the SDK's client, no tasks.

The SDK's own client (``ClientFactory``, JSON-RPC v1.0) runs over an
in-process ASGI transport; ``tests/e2e/test_a2a.py`` drives ``memesh serve``
in v1.0 and 0.3.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, ListTasksRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from api.a2a.card import A2aConfig
from api.app import create_app
from api.gate_common import MAX_JSON_DEPTH, MAX_JSON_VALUES
from head.facade import Memesh
from tests.unit.conftest import ADMIN, assert_error

BASE = "http://memesh.test"
RPC = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}


async def key_of(core: Memesh, tenant: str, role: str = "Writer") -> str:
    return (await core.identity.issue(ADMIN, tenant, "a2a", [role])).plaintext_secret


@asynccontextmanager
async def a2a_app(core: Memesh, data_dir: Path, **kw: Any) -> AsyncIterator[Any]:
    app = create_app(core, a2a=A2aConfig(base_url=BASE, data_dir=data_dir), **kw)
    yield app
    await app.state.a2a.close()


@asynccontextmanager
async def a2a_client(app: Any, headers: dict[str, str]) -> AsyncIterator[Client]:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)
    card = await A2ACardResolver(http, BASE).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    yield client
    await http.aclose()


async def send(client: Client, *parts: Part, task_id: str = "") -> Any:
    """The one data part of the reply message (never a task)."""
    request = SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-1", parts=list(parts), task_id=task_id))
    replies = [event async for event in client.send_message(request)]
    assert len(replies) == 1 and replies[0].HasField("message") and not replies[0].HasField("task")
    (data,) = get_data_parts(replies[0].message.parts)
    return data


def op(name: str, **args: Any) -> Part:
    return new_data_part({"op": name, **args})


async def test_no_key_is_the_envelope_before_any_json_rpc(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path) as app:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)
        for path in ("/a2a/v1", "/a2a/v1/"):
            assert_error(await http.post(path, json=RPC), 401, "unauthorized")
            assert_error(await http.post(path, json=RPC, headers={"authorization": "Bearer msh_forged"}), 401, "unauthorized")
            assert_error(await http.post(path, content=b"{{{", headers={"x-service-key": "msh_forged"}), 401, "unauthorized")
        await http.aclose()


async def test_the_v1_body_rules_apply_after_admission(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path, max_body_bytes=1024) as app:
        headers = {"x-service-key": await key_of(core, "t1", "Reader"), "a2a-version": "1.0"}
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)
        for method in ("GET", "PUT", "DELETE"):
            refused = await http.request(method, "/a2a/v1")
            assert_error(refused, 405, "validation")
            assert refused.headers["allow"] == "POST"
        assert_error(await http.post("/a2a/v1", content=b"x=1", headers={"content-type": "text/plain"}), 415, "validation")
        assert_error(await http.post("/a2a/v1", json={**RPC, "pad": "x" * 2048}), 400, "validation")
        answer = await http.post("/a2a/v1/", json=RPC)  # the same endpoint, no redirect
        assert answer.status_code == 200 and answer.json()["result"]["tasks"] == []
        garbled = await http.post("/a2a/v1", content=b"{not json", headers={"content-type": "application/json"})
        assert garbled.json()["error"]["code"] == -32700  # JSON-RPC's own parse error, once admitted
        await http.aclose()


async def test_json_nested_past_the_decoder_is_a_parse_error_not_an_internal_one(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path) as app:
        headers = {"x-service-key": await key_of(core, "t1", "Reader"), "content-type": "application/json"}
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)
        deep = b"[" * 100_000 + b"]" * 100_000
        answer = await http.post("/a2a/v1", content=deep)
        assert answer.status_code == 200 and answer.json()["error"]["code"] == -32700
        assert "recursion" not in answer.text
        await http.aclose()


async def test_every_operation_answers_one_data_part(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path) as app, a2a_client(app, {"x-service-key": await key_of(core, "t1")}) as client:
        written = await send(client, op("write_cell", content="we deploy the api with helm", cell_type="Decision", salience=0.9))
        assert written["op"] == "write_cell" and set(written["result"]) == {"node_id", "scene_id"}
        node_id, scene_id = written["result"]["node_id"], written["result"]["scene_id"]
        for name in ("recall", "query"):
            hits = await send(client, op(name, text="we deploy the api with helm", k=3))
            assert hits["result"][0] == {"node_id": node_id, "distance": pytest.approx(0.0, abs=1e-4)}
            assert hits["scope"] == {"tenant_id": "t1", "read_scope": [], "layer": None}
        by_text = await send(client, new_text_part("we deploy the api with helm"))  # plain text is a recall
        assert by_text["op"] == "recall" and by_text["result"][0]["node_id"] == node_id
        scene = await send(client, op("get_scene", scene_id=scene_id))
        assert node_id in scene["result"]["members"] and "centroid" not in scene["result"]
        session = await send(client, op("open_session", project_id="payments"))
        closed = await send(client, op("close_session", session_id=session["result"]["session_id"]))
        assert closed == {"op": "close_session", "result": {"ok": True}}
        beacon = await send(client, op("place_beacon", interest="helm charts", ttl_s=3600))
        assert (await send(client, op("remove_beacon", node_id=beacon["result"]["node_id"])))["result"] == {"ok": True}
        page = await send(client, op("pull_inbox", limit=10))
        assert set(page["result"]) == {"items", "cursor", "window_high", "has_more"}


async def test_a_refused_operation_is_the_envelope_in_the_reply(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path) as app:
        reader = await key_of(core, "t1", "Reader")
        async with a2a_client(app, {"authorization": f"Bearer {reader}"}) as client:
            missing = await send(client, op("get_scene", scene_id="00000000-0000-7000-8000-00000000dead"))
            assert missing == {"error": {"code": "not_found", "message": missing["error"]["message"]}}
            forbidden = await send(client, op("write_cell", content="a reader's note", cell_type="Fact"))
            assert forbidden["error"]["code"] == "forbidden"
            too_many = await send(client, op("query", text="x", k=10**6))
            assert too_many["error"]["code"] == "validation"
            with pytest.raises(InvalidParamsError, match="k: must be a whole number"):
                await send(client, op("recall", text="x", k=2.5))
            with pytest.raises(InvalidParamsError, match="op: must be one of"):
                await send(client, op("consolidate_scene", scene_id="x"))
        assert app.state.a2a.handler.task_store._impl.tasks == {}  # refusals store nothing


async def test_another_tenant_sees_nothing(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path) as app:
        async with a2a_client(app, {"x-service-key": await key_of(core, "t1")}) as owner:
            await send(owner, op("write_cell", content="the launch code is under the mat", cell_type="Fact"))
            assert (await send(owner, new_text_part("launch code under the mat")))["result"]
        async with a2a_client(app, {"x-service-key": await key_of(core, "t2")}) as stranger:
            hits = await send(stranger, new_text_part("launch code under the mat"))
            assert hits["result"] == [] and hits["scope"]["tenant_id"] == "t2"


async def test_no_task_is_ever_made_or_shared(core: Memesh, tmp_path: Path) -> None:
    async with a2a_app(core, tmp_path) as app:
        async with a2a_client(app, {"x-service-key": await key_of(core, "t1")}) as alice:
            await send(alice, new_text_part("anything"))
            assert list((await alice.list_tasks(ListTasksRequest())).tasks) == []
            with pytest.raises(TaskNotFoundError):
                await alice.get_task(GetTaskRequest(id="made-up"))
            with pytest.raises(TaskNotFoundError):
                await alice.cancel_task(CancelTaskRequest(id="made-up"))
            with pytest.raises(TaskNotFoundError):  # continuing a task needs one of your own
                await send(alice, new_text_part("anything"), task_id="made-up")
        assert app.state.a2a.handler.task_store._impl.tasks == {}


async def test_every_call_is_charged(make_core: Callable[..., Memesh], tmp_path: Path) -> None:
    """A task lookup or a refused message costs a Read token (a lookup's refusal is a 429 before JSON-RPC);
    an operation its own bucket (a refusal is the reply's envelope)."""
    core = make_core(rate_limits={"read": {"rate": 0.001, "burst": 3}})
    async with a2a_app(core, tmp_path) as app:
        key = await key_of(core, "t1")
        async with a2a_client(app, {"x-service-key": key}) as client:
            for _ in range(2):
                await client.list_tasks(ListTasksRequest())
            with pytest.raises(InvalidParamsError):  # refused before it runs, and charged all the same
                await send(client, op("recall", text="x", k=2.5))
            refused = await send(client, new_text_part("anything"))
            assert refused["error"]["code"] == "rate_limited" and "retry in" in refused["error"]["message"]
            written = await send(client, op("write_cell", content="the Write bucket is another one", cell_type="Fact"))
            assert written["op"] == "write_cell"
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"x-service-key": key})
        limited = await http.post("/a2a/v1", json=RPC, headers={"a2a-version": "1.0"})
        assert_error(limited, 429, "rate_limited")
        assert int(limited.headers["retry-after"]) >= 1
        await http.aclose()
    await core.close()


async def test_a_notification_runs_nothing_and_a_v03_name_under_v1_is_version_not_supported(core: Memesh, tmp_path: Path) -> None:
    """A v1.0 SendMessage without an id wrote its cell and was answered with a null id; a v0.3 name sent with
    ``A2A-Version: 1.0`` was -32603 Internal error."""
    async with a2a_app(core, tmp_path) as app:
        key = await key_of(core, "t1")
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"x-service-key": key})
        write = {"data": {"op": "write_cell", "content": "a notification's note", "cell_type": "Fact"}}
        v1 = {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [write]}}
        v03 = {"message": {"role": "user", "messageId": "m1", "kind": "message", "parts": [{"kind": "data", **write}]}}
        for version, method, params in (("1.0", "SendMessage", v1), ("0.3", "message/send", v03), ("1.0", "ListTasks", {})):
            body = {"jsonrpc": "2.0", "method": method, "params": params}
            answer = (await http.post("/a2a/v1", json=body, headers={"a2a-version": version})).json()
            assert answer["id"] is None and answer["error"]["code"] == -32600, answer
        listed = (await http.get("/v1/cells")).json()
        assert listed["cells"] == []  # nothing ran
        for method, params in (("message/send", v03), ("tasks/get", {"id": "t"})):
            body = {"jsonrpc": "2.0", "id": "r-1", "method": method, "params": params}
            answer = (await http.post("/a2a/v1", json=body, headers={"a2a-version": "1.0"})).json()
            assert answer["id"] == "r-1" and answer["error"]["code"] == -32009, answer
        await http.aclose()


async def test_a_message_too_large_in_shape_is_refused_before_the_sdk(core: Memesh, tmp_path: Path) -> None:
    """The SDK turns every JSON value of a message into objects of its own on the shared event loop: a data
    part of 400,000 values held every other request for 9 s. Past MAX_JSON_VALUES values or MAX_JSON_DEPTH
    levels a body is 400 ``validation`` before the SDK sees it, and costs a Read token."""
    async with a2a_app(core, tmp_path) as app:
        headers = {"x-service-key": await key_of(core, "t1", "Reader"), "content-type": "application/json"}
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)
        wide = {"op": "recall", "text": "x", "cell_types": ["Fact"] * MAX_JSON_VALUES}
        deep: Any = "x"
        for _ in range(MAX_JSON_DEPTH):
            deep = {"a": deep}
        for data, metadata in ((wide, {}), ({"op": "recall", "text": "x"}, deep)):
            message = {"messageId": "m", "role": "user", "kind": "message", "parts": [{"kind": "data", "data": data}]}
            body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message, "metadata": metadata}}
            refused = await http.post("/a2a/v1", json=body)
            assert_error(refused, 400, "validation")
        assert (await http.post("/a2a/v1", json=RPC, headers={"A2A-Version": "1.0"})).status_code == 200
        await http.aclose()


async def test_values_the_sdk_cannot_convert_are_the_clients_error(
    core: Memesh, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lone surrogate, file bytes that are not base64 and NaN or Infinity failed in the SDK's conversions
    and were answered ``-32603`` with the library's own words and an ERROR traceback: they are ``-32602
    validation`` (or ``-32700``: NaN is no JSON) and nothing is logged. An id holding a lone surrogate was
    a 500 (the answer echoing it could not be encoded): ``-32600`` with a null id."""

    def v03(*parts: dict[str, Any]) -> dict[str, Any]:
        message = {"messageId": "m", "role": "user", "kind": "message", "parts": list(parts)}
        return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}

    async with a2a_app(core, tmp_path) as app:
        headers = {"x-service-key": await key_of(core, "t1"), "content-type": "application/json"}
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)
        surrogate = json.dumps(v03({"kind": "text", "text": "X"})).replace('"X"', '"\\ud800"')
        surrogate_key = json.dumps(v03({"kind": "data", "data": {"op": "recall", "text": "x", "X": 1}})).replace(
            '"X"', '"\\udfff"'
        )
        base64_garbage = json.dumps(v03({"kind": "file", "file": {"bytes": "!!!notb64"}}))
        nan = json.dumps(v03({"kind": "data", "data": {"op": "recall", "text": "x", "k": float("nan")}}))
        infinity = json.dumps(v03({"kind": "data", "data": {"op": "write_cell", "content": "x", "salience": float("inf")}}))
        v1_nan = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
        v1_nan["params"] = {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"op": "recall", "k": float("nan")}}]}
        }
        for body, version, code in (
            (surrogate, "0.3", -32602),
            (surrogate_key, "0.3", -32602),
            (base64_garbage, "0.3", -32602),
            (nan, "0.3", -32700),
            (infinity, "0.3", -32700),
            (json.dumps(v1_nan), "1.0", -32700),
        ):
            answer = await http.post("/a2a/v1", content=body.encode(), headers={"A2A-Version": version})
            error = answer.json()["error"]
            assert answer.status_code == 200 and error["code"] == code, (body[:120], answer.text)
            assert code != -32602 or error["message"].startswith("validation: params.message.parts[0]"), error
        for body in ('{"jsonrpc":"2.0","id":"\\ud800","method":"nope"}', '{"jsonrpc":"2.0","id":"\\ud800","method":"ListTasks"}'):
            answer = await http.post("/a2a/v1", content=body.encode(), headers={"A2A-Version": "1.0"})  # was a 500
            assert answer.status_code == 200 and answer.json()["error"]["code"] == -32600 and answer.json()["id"] is None
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        await http.aclose()


async def test_a_clients_mistakes_are_answered_and_not_logged_above_debug(
    core: Memesh, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK logged these at ERROR with tracebacks (and a wrong A2A-Version at WARNING, the header copied
    whole): any key could fill the log. They are answered as before and logged at DEBUG at most."""
    async with a2a_app(core, tmp_path) as app:
        headers = {"x-service-key": await key_of(core, "t1"), "content-type": "application/json"}
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)
        for body, version, code in (
            ([], "", -32600),
            ({"jsonrpc": "2.0", "id": [1], "method": "tasks/get", "params": {"id": "x"}}, "", -32600),
            ({"jsonrpc": "2.0", "id": 1, "method": 3}, "", -32600),
            ({"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": "x"}}, "", -32004),
            ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}, "Z" * 3000, -32009),
        ):
            answer = await http.post("/a2a/v1", json=body, headers={"A2A-Version": version} if version else {})
            streamed = answer.headers["content-type"].startswith("text/event-stream")  # a streaming method's answer
            reply = json.loads(answer.text.split("data: ", 1)[1]) if streamed else answer.json()
            assert answer.status_code == 200 and reply["error"]["code"] == code, (body, answer.text)
        noisy = [r for r in caplog.records if r.name.startswith("a2a") and r.levelno >= logging.WARNING]
        assert noisy == [], [r.getMessage()[:200] for r in noisy]
        await http.aclose()

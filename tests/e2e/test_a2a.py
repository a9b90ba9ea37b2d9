"""The A2A binding on a running server, with ``a2a-sdk``'s own client in protocol v1.0 and v0.3.

The v1.0 client is what ``ClientFactory`` builds from the card as the SDK's
resolver parses it (the v1.0 interface is preferred). The v0.3 client is built
from the card as a v0.3 parser reads it (``url``, ``preferredTransport``,
``protocolVersion`` 0.3), so the factory picks the SDK's v0.3 transport
(``message/send``). Credentials come from the card's own security schemes
through the SDK's ``AuthInterceptor``: ``serviceKey`` sends ``x-service-key``,
``bearer`` sends ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, AuthInterceptor, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth import CredentialService
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.conversions import to_core_agent_card
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import AgentCard, GetTaskRequest, ListTasksRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from a2a.utils.signing import create_signature_verifier
from jwt.api_jwk import PyJWK

from head.card_signing import verify_card_signatures
from tests.servers import Server, assert_envelope

CARD = "/.well-known/agent-card.json"
KEYS = "/.well-known/memesh-card-keys.json"
VERSIONS = ["1.0", "0.3"]
SEND = {"1.0": "SendMessage", "0.3": "message/send"}


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 120))


class KeyFor(CredentialService):
    """The agent's key for one of the card's security schemes (none for the others)."""

    def __init__(self, scheme: str, key: str) -> None:
        self.scheme, self.key = scheme, key

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.key if security_scheme_name == self.scheme else None


async def verified_card(server: Server, http: httpx.AsyncClient) -> AgentCard:
    """The card as the SDK resolves it, its signature checked against the keys memesh publishes at ``jku``."""
    jwks = (await http.get(f"{server.base_url}{KEYS}")).json()

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert jku == f"http://127.0.0.1:{server.port}{KEYS}"
        (key,) = [k for k in jwks["keys"] if k["kid"] == kid]
        return PyJWK(key)

    resolver = A2ACardResolver(http, server.base_url)
    return await resolver.get_agent_card(signature_verifier=create_signature_verifier(key_provider, ["ES256"]))


@asynccontextmanager
async def a2a_client(
    server: Server, version: str, key: str, scheme: str = "serviceKey"
) -> AsyncIterator[tuple[Client, list[Any]]]:
    """The SDK's client for ``version``, and the JSON-RPC requests it sent (method and headers)."""
    sent: list[Any] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            sent.append((json.loads(request.content)["method"], request.headers))

    http = httpx.AsyncClient(timeout=60, event_hooks={"request": [record]})
    card = await verified_card(server, http)
    if version == "0.3":
        card = to_core_agent_card(types_v03.AgentCard.model_validate((await http.get(f"{server.base_url}{CARD}")).json()))
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(
        card, interceptors=[AuthInterceptor(KeyFor(scheme, key))]
    )
    try:
        yield client, sent
    finally:
        await http.aclose()


async def send(client: Client, part: Part) -> Any:
    """The one data part of the one reply message."""
    request = SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-1", parts=[part]))
    replies = [event async for event in client.send_message(request)]
    assert len(replies) == 1 and replies[0].HasField("message"), replies
    (data,) = get_data_parts(replies[0].message.parts)
    return data


def test_the_card_is_public_signed_and_read_by_both_parsers(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        raw, jwks = http.get(CARD).json(), http.get(KEYS).json()
        assert all(path.startswith("/v1/") for path in http.get("/openapi.json").json()["paths"])
    check = verify_card_signatures(raw, jwks)  # memesh's own descriptor-import checker
    assert check is not None and check.verified
    legacy = types_v03.AgentCard.model_validate(raw)
    assert legacy.url == f"http://127.0.0.1:{server.port}/a2a/v1" and legacy.protocol_version == "0.3"
    assert legacy.security == [{"serviceKey": []}, {"bearer": []}]

    async def body() -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            card = await verified_card(server, http)
        assert [i.protocol_version for i in card.supported_interfaces] == ["1.0", "0.3"]
        assert set(card.security_schemes) == {"serviceKey", "bearer"}

    run(body)


@pytest.mark.parametrize("scheme", ["serviceKey", "bearer"])
@pytest.mark.parametrize("version", VERSIONS)
def test_an_agent_writes_and_recalls_through_a2a(server: Server, version: str, scheme: str) -> None:
    key = server.issue(f"a2a-{version}-{scheme}", "Writer", "a2a-agent")["plaintext_secret"]

    async def body() -> None:
        async with a2a_client(server, version, key, scheme) as (client, sent):
            fact = "The payment service retries a declined card three times."
            written = await send(client, new_data_part({"op": "write_cell", "content": fact, "cell_type": "Fact"}))
            await send(
                client,
                new_data_part({"op": "write_cell", "content": "Office plants are watered on Mondays.", "cell_type": "Fact"}),
            )
            node_id = written["result"]["node_id"]
            recalled = await send(client, new_data_part({"op": "recall", "text": "how often is a rejected card retried", "k": 2}))
            assert recalled["op"] == "recall" and recalled["result"][0]["node_id"] == node_id, recalled
            assert all(set(h) == {"node_id", "distance"} and 0.0 <= h["distance"] <= 2.0 for h in recalled["result"])
            by_text = await send(client, new_text_part("how often is a rejected card retried"))  # plain text: a recall
            assert by_text["result"][0]["node_id"] == node_id
        assert {method for method, _ in sent} == {SEND[version]}
        header = "x-service-key" if scheme == "serviceKey" else "authorization"
        assert all(key in headers[header] for _, headers in sent)

    run(body)


def test_no_key_is_refused_before_json_rpc(server: Server) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
    for path in ("/a2a/v1", "/a2a/v1/"):
        assert_envelope(httpx.post(f"{server.base_url}{path}", json=request), 401, "unauthorized")
        forged = {"authorization": "Bearer msh_forged", "a2a-version": "1.0"}
        assert_envelope(httpx.post(f"{server.base_url}{path}", json=request, headers=forged), 401, "unauthorized")


def test_another_tenant_sees_nothing(server: Server) -> None:
    owner = server.issue("a2a-owner", "Writer", "owner")["plaintext_secret"]
    stranger = server.issue("a2a-stranger", "Writer", "stranger")["plaintext_secret"]

    async def body() -> None:
        async with a2a_client(server, "1.0", owner) as (client, _):
            await send(
                client,
                new_data_part({"op": "write_cell", "content": "Tenant A's launch code is under the mat.", "cell_type": "Fact"}),
            )
        async with a2a_client(server, "0.3", stranger, "bearer") as (client, _):
            hits = await send(client, new_data_part({"op": "recall", "text": "launch code under the mat", "k": 50}))
            assert hits["result"] == [] and hits["scope"]["tenant_id"] == "a2a-stranger"

    run(body)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_revoked_key_fails_on_the_very_next_call(server: Server, version: str) -> None:
    agent = server.issue(f"a2a-revoke-{version}", "Writer", "doomed")

    async def body() -> None:
        async with a2a_client(server, version, agent["plaintext_secret"]) as (client, _):
            assert "result" in await send(client, new_text_part("anything"))
            server.admin("agents", "revoke", agent["agent_id"])
            with pytest.raises(A2AClientError, match="401"):  # the HTTP refusal, before any JSON-RPC
                await send(client, new_text_part("anything"))

    run(body)
    headers = {"x-service-key": agent["plaintext_secret"], "a2a-version": "1.0"}
    refused = httpx.post(f"{server.base_url}/a2a/v1", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}, headers=headers)
    assert_envelope(refused, 401, "unauthorized")


def test_tasks_are_never_shared(server: Server) -> None:
    alice = server.issue("a2a-tasks", "Writer", "alice")["plaintext_secret"]
    bob = server.issue("a2a-tasks", "Writer", "bob")["plaintext_secret"]

    async def body() -> None:
        async with a2a_client(server, "1.0", alice) as (client, _):
            request = SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-1", parts=[new_text_part("x")]))
            (reply,) = [event async for event in client.send_message(request)]
            ids = {reply.message.context_id, reply.message.message_id, "made-up"}
            assert list((await client.list_tasks(ListTasksRequest())).tasks) == []
        for version in VERSIONS:
            async with a2a_client(server, version, bob) as (client, _):
                for task_id in ids:
                    with pytest.raises(TaskNotFoundError):
                        await client.get_task(GetTaskRequest(id=task_id))
        async with a2a_client(server, "1.0", bob) as (client, _):
            assert list((await client.list_tasks(ListTasksRequest())).tasks) == []

    run(body)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bad_data_part_is_invalid_params(server: Server, version: str) -> None:
    key = server.issue(f"a2a-bad-{version}", "Writer", "clumsy")["plaintext_secret"]

    async def body() -> None:
        async with a2a_client(server, version, key) as (client, _):
            with pytest.raises(InvalidParamsError, match="k: must be a whole number"):
                await send(client, new_data_part({"op": "recall", "text": "anything", "k": 2.5}))
            with pytest.raises(InvalidParamsError, match="op: must be one of"):
                await send(client, new_data_part({"op": "consolidate_scene", "scene_id": "x"}))
            refused = await send(client, new_data_part({"op": "get_scene", "scene_id": "00000000-0000-7000-8000-00000000dead"}))
            assert refused["error"]["code"] == "not_found" and set(refused) == {"error"}

    run(body)

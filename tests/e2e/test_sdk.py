"""The Python client SDK (``sdk/``, package ``memesh_client``) against a running ``memesh serve``: sync and async,
typed models checked against the served /openapi.json, typed errors, Retry-After honoured, the inbox stream."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from memesh_client import (
    AsyncMemesh,
    Forbidden,
    Memesh,
    NotFound,
    RateLimited,
    RetryPolicy,
    Unauthorized,
    ValidationFailed,
    cell,
    models,
)
from tests.servers import Server

FAILOVER = "The primary Postgres failed over to the replica at 03:12; replication lag peaked at 40s."


def test_the_models_match_the_served_openapi_document(server: Server) -> None:
    """Every field the service documents is a field of the client's model, and what it requires, the model does."""
    schemas = httpx.get(f"{server.base_url}/openapi.json", timeout=30).json()["components"]["schemas"]
    pairs: list[tuple[type[BaseModel], str]] = [
        (models.Node, "NodeOut"),
        (models.CellPayload, "CellPayload"),
        (models.CellPage, "CellListOut"),
        (models.Scene, "SceneOut"),
        (models.ScenePage, "SceneListOut"),
        (models.Consolidation, "ConsolidationOut"),
        (models.PullPage, "PullOut"),
        (models.InboxItem, "SeqInboxItem"),
        (models.Diff, "DiffOut"),
        (models.Provenance, "DiffProvenance"),
        (models.Delivery, "DeliveryOut"),
    ]
    for model, name in pairs:
        documented = schemas[name]
        assert set(model.model_fields) == set(documented["properties"]), name
        required_here = {f for f, info in model.model_fields.items() if info.is_required()}
        assert required_here <= set(documented.get("required", [])), name


def test_an_agent_manages_its_memory_with_the_sync_client(server: Server) -> None:
    writer_key = server.issue("sdk-co", "Writer", "sdk-writer")["plaintext_secret"]
    teammate_key = server.issue("sdk-co", "Writer", "sdk-teammate")["plaintext_secret"]
    with Memesh(server.base_url, writer_key) as agent, Memesh(server.base_url, teammate_key) as teammate:
        first = agent.write(FAILOVER, "Risk", salience=0.9, project_id="ops")
        more = agent.write_many([cell(f"Runbook step {i}: check the replica's lag.", "Task", project_id="ops") for i in range(3)])
        assert isinstance(first, models.Node) and first.project_id == "ops" and len(first.embedding) == 384
        hits = agent.recall("what happened to the database replica", k=4)
        assert hits[0].id == first.id
        assert [n.id for n in agent.query("replica lag runbook", k=4, cell_types=["Task"])] != []
        seen = teammate.get_cell(first.id)  # last_accessed moved with the recall: the rest is the stored cell
        assert seen.model_dump(exclude={"last_accessed"}) == first.model_dump(exclude={"last_accessed"})
        listed = [n.id for n in agent.iter_cells(project_id="ops", limit=1)]
        assert listed == sorted([first.id, *(n.id for n in more)])
        scene = agent.get_scene(first.scene_id or "")
        assert scene.project_id == "ops" and scene.member_count >= 1
        with pytest.raises(Forbidden) as refused:
            teammate.delete_cell(first.id)
        assert refused.value.status == 403 and refused.value.code == "forbidden"
        agent.delete_cell(first.id)
        with pytest.raises(NotFound):
            agent.get_cell(first.id)
        assert first.id not in [n.id for n in agent.recall("what happened to the database replica", k=4)]
        with pytest.raises(ValidationFailed) as bad:
            agent.query("anything", k=0)
        assert bad.value.status in (400, 422) and bad.value.message
        session = agent.open_session("ops")
        agent.close_session(session)
    with Memesh(server.base_url, "msh_" + "x" * 40) as stranger, pytest.raises(Unauthorized):
        stranger.list_cells()


def test_retry_after_is_honoured_and_a_refusal_without_retries_carries_it(server: Server) -> None:
    """The session server's Read bucket is 60 deep and refills 20 per second (tests/servers.py)."""
    key = server.issue("sdk-rate", "Reader", "sdk-reader")["plaintext_secret"]
    with Memesh(server.base_url, key, retry=RetryPolicy(max_retries=0)) as impatient:

        def refusal(_: int) -> RateLimited | None:
            try:
                impatient.list_cells(limit=1)
            except RateLimited as refused:
                return refused
            return None

        with ThreadPoolExecutor(20) as pool:  # 200 calls at once: the bucket cannot refill between them
            refusals = [r for r in pool.map(refusal, range(200)) if r is not None]
        assert refusals, "200 concurrent reads against a bucket of 60 were never refused"
        limited = refusals[0]
        assert limited.status == 429 and limited.retry_after is not None and limited.retry_after > 0
    seen: list[int] = []  # every status the patient client received, its refused tries included
    http = httpx.Client(base_url=server.base_url, timeout=30, event_hooks={"response": [lambda r: seen.append(r.status_code)]})
    with Memesh(server.base_url, key, retry=RetryPolicy(max_retries=50, max_wait_s=5), http=http) as patient:
        started = time.monotonic()
        with ThreadPoolExecutor(10) as pool:  # the bucket is empty: each call waits for its token instead of failing
            list(pool.map(lambda _: patient.list_cells(limit=1), range(30)))
        assert time.monotonic() - started >= 0.5
    assert seen.count(200) == 30 and 429 in seen, "the client never met a 429: nothing was retried"


def test_the_async_inbox_stream_delivers_acknowledges_and_resumes(server: Server) -> None:
    reader_key = server.issue("sdk-inbox", "Reader", "sdk-listener")["plaintext_secret"]
    writer_key = server.issue("sdk-inbox", "Writer", "sdk-author")["plaintext_secret"]

    async def body() -> None:
        async with AsyncMemesh(server.base_url, reader_key) as listener, AsyncMemesh(server.base_url, writer_key) as author:
            await listener.place_beacon("database failover and replication incidents")
            related = await author.write(FAILOVER, "Risk", salience=0.9)
            await author.write("The cafeteria now serves vegan lasagne on Thursdays.", "Fact")
            async with listener.inbox() as inbox:
                item = await asyncio.wait_for(anext(inbox), 60)
                assert isinstance(item, models.InboxItem) and item.diff.cell_id == related.id
                assert item.delivery.node_kind == "beacon" and item.delivery.score > 0
                assert await inbox.ack(item.delivery_seq) == item.delivery_seq
            page = await listener.pull()
            assert page.cursor == item.delivery_seq and page.items == []  # resumes after the acknowledged item
            second = await author.write("Replication to the standby Postgres broke again during the failover drill.", "Risk")
            async with listener.inbox() as inbox:
                following = await asyncio.wait_for(anext(inbox), 60)
                assert following.delivery_seq > item.delivery_seq and following.diff.cell_id == second.id
        async with AsyncMemesh(server.base_url, "msh_" + "y" * 40) as stranger:
            with pytest.raises(Unauthorized):
                async with stranger.inbox():
                    pass

    asyncio.run(asyncio.wait_for(body(), 180))


def test_the_package_installs_on_its_own_with_a_small_dependency_set() -> None:
    import tomllib
    from pathlib import Path

    project: dict[str, Any] = tomllib.loads((Path(__file__).resolve().parents[2] / "sdk" / "pyproject.toml").read_text())
    assert project["project"]["name"] == "memesh-client"
    deps = {d.split(">")[0].split("=")[0] for d in project["project"]["dependencies"]}
    assert deps == {"httpx", "pydantic", "websockets"}
    import memesh_client

    assert "memesh_client" in memesh_client.__file__ and "sdk" in memesh_client.__file__

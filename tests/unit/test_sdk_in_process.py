"""The client SDK's requests against the real app in-process (httpx's ASGI transport; the hash engine): every
search option reaches the service, answers parse, refusals are typed. Over sockets: tests/e2e/test_sdk.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from api.app import create_app
from head.facade import Memesh
from memesh_client import AsyncMemesh, Forbidden, NotFound, ValidationFailed, cell
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

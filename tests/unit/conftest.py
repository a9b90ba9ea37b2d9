"""In-process fixtures: the real core (real LanceDB under tmp_path) without Ray."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from cluster.compose import build_memesh
from cluster.settings import Settings
from head.facade import Memesh
from mesh.identity import Principal, Role

ADMIN = Principal(agent_id="00000000-0000-7000-8000-000000000001", tenant_id="system", roles=frozenset({Role.SERVICE_ADMIN}))


def in_process_settings(data_dir: Path, **sections: dict[str, Any]) -> Settings:
    base: dict[str, Any] = {
        "ray": {"in_process": True},
        "embedding": {"engine": "hash"},
        "storage": {"data_dir": data_dir, "commit_window_ms": 1},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return Settings(**base)


@pytest.fixture
def make_core(tmp_path: Path) -> Callable[..., Memesh]:
    def make(**sections: dict[str, Any]) -> Memesh:
        return build_memesh(in_process_settings(tmp_path / "data", **sections))

    return make


@pytest.fixture
async def core(make_core: Callable[..., Memesh]) -> AsyncIterator[Memesh]:
    memesh = make_core()
    yield memesh
    await memesh.close()


class Api:
    """An HTTP client for one in-process app, with helpers to issue keys."""

    def __init__(self, memesh: Memesh) -> None:
        self.memesh = memesh
        self.app = create_app(memesh)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://memesh.test")

    async def key(self, tenant: str = "t1", roles: tuple[str, ...] = ("Writer",), read_scope: list[str] | None = None) -> str:
        issued = await self.memesh.identity.issue(ADMIN, tenant, f"agent-{tenant}", list(roles), read_scope)
        return issued.plaintext_secret

    async def send(self, method: str, path: str, key: str | None, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {"x-service-key": key} if key else {}
        return await self.http.request(method, path, json=body, headers=headers, **kw)


@pytest.fixture
async def api(core: Memesh) -> AsyncIterator[Api]:
    client = Api(core)
    yield client
    await client.http.aclose()


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    """The spec's envelope, the spec's status and code, a message, nothing else."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


AsyncCall = Callable[..., Awaitable[httpx.Response]]

"""Agents for the Ray tier's tests: the service admin that issues keys, and writers it issues."""

from __future__ import annotations

from head.facade import Memesh
from mesh.identity import Principal, Role

ADMIN = Principal(agent_id="00000000-0000-7000-8000-000000000001", tenant_id="system", roles=frozenset({Role.SERVICE_ADMIN}))


async def writer(memesh: Memesh, tenant: str = "t1", name: str = "writer") -> Principal:
    issued = await memesh.identity.issue(ADMIN, tenant, name, ["Writer"])
    return await memesh.identity.authenticate(issued.plaintext_secret)

"""Descriptor use cases over the in-process core: set, import (signed, idempotent), tenancy, audit."""

from __future__ import annotations

import pytest
from joserfc.jwk import ECKey

from head.facade import Memesh
from mesh.errors import Forbidden, NotFound, ValidationFailed
from mesh.identity import Principal, Role
from tests.unit.conftest import ADMIN
from tests.unit.test_descriptors import fixture, jwks_of, sign_card

T2_ADMIN = Principal("00000000-0000-7000-8000-0000000000a2", "t2", frozenset({Role.PROJECT_ADMIN}))


async def kinds(core: Memesh) -> list[str]:
    return [r.kind for r in await core.directory.audit_log().rows(0, 1000)]


async def test_set_import_and_read_back(core: Memesh) -> None:
    agent = (await core.identity.issue(ADMIN, "t1", "planner", ["Writer"])).agent
    with pytest.raises(NotFound):
        await core.descriptors.get(ADMIN, agent.id)
    manual = await core.descriptors.put(ADMIN, agent.id, {"name": "planner", "description": "plans sprints"})
    assert manual.origin is not None and manual.origin.card_shape == "manual"
    assert (await core.descriptors.get(ADMIN, agent.id)).description == "plans sprints"

    key = ECKey.generate_key("P-256")
    card = sign_card(fixture("a2a_v1_card"), key, "ES256", "k1")
    imported = await core.descriptors.import_document(ADMIN, agent.id, "a2a", card, jwks_of((key, "k1")), "registry")
    assert imported.origin is not None and imported.origin.card_shape == "a2a-v1"
    assert imported.origin.signature is not None and imported.origin.signature.kid == "k1"
    again = await core.descriptors.import_document(ADMIN, agent.id, "a2a", card, jwks_of((key, "k1")), "registry")
    assert again == imported  # idempotent: the same document changes nothing and writes no second row
    assert (await kinds(core)).count("DescriptorImport") == 1

    old = await core.descriptors.import_document(ADMIN, agent.id, "a2a", fixture("a2a_v03_card"), None, None)
    assert old.origin is not None and old.origin.card_shape == "a2a-v0.3"
    acp = await core.descriptors.import_document(ADMIN, agent.id, "acp", fixture("acp_manifest"), None, None)
    assert acp.origin is not None and acp.origin.card_shape == "acp-manifest"
    assert (await core.descriptors.get(ADMIN, agent.id)).to_json() == acp.to_json()  # survives the round trip

    tampered = {**card, "name": "someone else"}
    with pytest.raises(ValidationFailed):  # fail-closed: nothing stored
        await core.descriptors.import_document(ADMIN, agent.id, "a2a", tampered, jwks_of((key, "k1")), None)
    assert (await core.descriptors.get(ADMIN, agent.id)).to_json() == acp.to_json()


async def test_descriptors_follow_the_tenant_rules(core: Memesh) -> None:
    agent = (await core.identity.issue(ADMIN, "t1", "planner", ["Writer"])).agent
    await core.descriptors.put(ADMIN, agent.id, {"name": "planner"})
    with pytest.raises(NotFound):  # a cross-tenant read looks like a missing agent
        await core.descriptors.get(T2_ADMIN, agent.id)
    with pytest.raises(Forbidden):
        await core.descriptors.put(T2_ADMIN, agent.id, {"name": "hijacked"})
    with pytest.raises(Forbidden):
        await core.descriptors.import_document(T2_ADMIN, agent.id, "acp", fixture("acp_manifest"), None, None)
    assert (await core.descriptors.get(ADMIN, agent.id)).name == "planner"
    assert (await kinds(core))[-2:] == ["AuthzDenied", "AuthzDenied"]
    with pytest.raises(Forbidden):
        await core.descriptors.get(Principal("w", "t1", frozenset({Role.WRITER})), agent.id)

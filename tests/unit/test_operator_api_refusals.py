"""What the operator REST API refuses, and how (in process, sessions opened on the console's store as in
tests/unit/test_admin_gate.py): bodies where a route takes none, descriptor shapes, path ids, bodies on a
GET, integers in query strings, and the bootstrap operator disabling itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from head.clock import utc_now
from head.facade import Memesh
from tests.unit.conftest import ADMIN, assert_error
from tests.unit.test_admin_gate import ConsoleHarness, console_over

ROOT = "root-operator"


@pytest.fixture
async def console(make_core: Callable[..., Memesh]) -> AsyncIterator[ConsoleHarness]:
    core = make_core(admin={"bootstrap_oidc_subject": ROOT})
    await core.identity.ensure_bootstrap_subject(ROOT)
    async with console_over(core) as harness:
        yield harness


async def test_a_route_that_takes_no_body_does_nothing_with_a_bad_one(console: ConsoleHarness) -> None:
    """revoke, suspend, reinstate and rotate ran on a body of ``{{`` or ``[1,2]`` (204, and the key rotated)."""
    token = await console.session_for("ops", role="ProjectAdmin")
    target = (await console.core.identity.issue(ADMIN, "acme", "target", ["Writer"])).agent.id
    json_body = {"content-type": "application/json"}
    for action in ("revoke", "suspend", "reinstate", "rotate"):
        path = f"/admin/api/agents/{target}/{action}"
        assert_error(await console.send("POST", path, token, content=b"{{", headers=json_body), 400, "validation")
        assert_error(await console.send("POST", path, token, content=b"[1,2]", headers=json_body), 422, "validation")
    assert (await console.core.identity.get(ADMIN, target)).status.value == "active"  # nothing was done
    assert (await console.send("POST", f"/admin/api/agents/{target}/suspend", token, json={})).status_code == 204
    assert (await console.send("POST", f"/admin/api/agents/{target}/reinstate", token)).status_code == 204


async def test_a_descriptor_of_the_wrong_shape_is_422_and_a_value_out_of_range_400(console: ConsoleHarness) -> None:
    token = await console.session_for("ops", role="ProjectAdmin")
    target = (await console.core.identity.issue(ADMIN, "acme", "described", ["Writer"])).agent.id
    path = f"/admin/api/agents/{target}/descriptor"
    for body in ({}, {"name": 1}, [1], {"name": "x", "nme": "y"}, {"name": "x", "capabilities": {"streaming": "yes"}}):
        assert_error(await console.send("PUT", path, token, json=body), 422, "validation")
    assert_error(await console.send("PUT", path, token, json={"name": "x" * 100_000}), 400, "validation")
    assert (await console.send("PUT", path, token, json={"name": "planner"})).status_code == 200


async def test_a_malformed_id_in_the_path_is_400_and_any_spelling_of_a_uuid_finds_its_agent(console: ConsoleHarness) -> None:
    token = await console.session_for("ops", role="ProjectAdmin")
    target = (await console.core.identity.issue(ADMIN, "acme", "spelled", ["Writer"])).agent.id
    for path in ("/admin/api/agents/not-a-uuid", "/admin/api/agents/not-a-uuid/descriptor", "/admin/api/jobs/xyz"):
        assert_error(await console.send("GET", path, token), 400, "validation")
    assert_error(await console.send("POST", "/admin/api/agents/not-a-uuid/revoke", token), 400, "validation")
    found = await console.send("GET", f"/admin/api/agents/{target.upper()}", token)
    assert found.status_code == 200 and found.json()["agent_id"] == target


async def test_a_get_with_a_body_is_held_to_the_body_rules(console: ConsoleHarness) -> None:
    token = await console.session_for("ops", role="ProjectAdmin")
    sent = await console.send("GET", "/admin/api/agents?limit=1", token, content=b"hello", headers={"content-type": "text/plain"})
    assert_error(sent, 415, "validation")


async def test_an_integer_in_a_query_string_is_decimal_digits(console: ConsoleHarness) -> None:
    """``3_0`` was read as 30, ``2.0`` as 2 and ``+3`` as 3."""
    token = await console.session_for("ops", role="ProjectAdmin")
    for loose in ("3_0", "2.0", "+3", "٣", " 3"):
        for path in ("/admin/api/agents", "/admin/api/observatory/events"):
            assert_error(await console.send("GET", path, token, params={"limit": loose}), 400, "validation")
    assert (await console.send("GET", "/admin/api/agents", token, params={"limit": "3"})).status_code == 200


async def test_the_bootstrap_operator_cannot_disable_itself(console: ConsoleHarness) -> None:
    """The bootstrap admin key could not, but the operator ``admin.bootstrap_oidc_subject`` logs in as could."""
    root = await console.core.identity.principal_for_subject(ROOT)
    assert root is not None
    token, _ = await console.console.sessions.open(root.agent_id, ROOT, utc_now())
    for action in ("suspend", "revoke"):
        assert_error(await console.send("POST", f"/admin/api/agents/{root.agent_id}/{action}", token), 403, "forbidden")
    assert (await console.send("GET", "/admin/api/me", token)).status_code == 200

"""A refused caller's audit rows: one a minute per agent and surface, the rest counted (``mesh.denials``,
``head.role_gate``). A Reader's key sent to the admin surfaces at the Admin rate wrote a row per refusal,
1.7 million a day into a log kept for ever and verified whole."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from head.facade import Memesh
from head.role_gate import RoleGate
from mesh.denials import DenialLog
from mesh.errors import Forbidden
from tests.unit.conftest import ADMIN


def test_the_first_refusal_is_written_the_rest_of_the_window_counted() -> None:
    log = DenialLog(window_s=60.0)
    assert log.refused(("a", "grpc"), 0.0, "a1") == 0
    assert [log.refused(("a", "grpc"), t, f"a{t}") for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert log.refused(("a", "console"), 3.0) == 0  # another surface is another pair
    assert log.refused(("b", "grpc"), 4.0) == 0
    assert log.refused(("a", "grpc"), 60.0) == 3  # the next row carries the three counted
    assert log.refused(("a", "grpc"), 61.0) is None
    assert log.pending() == [(None, 1)]  # what the last refusal said of itself: here nothing


def test_pending_hands_out_what_is_counted_and_bounds_the_table() -> None:
    log = DenialLog(window_s=10.0, max_pairs=2)
    for n in range(4):
        log.refused((f"agent{n}", "grpc"), float(n), n)
        log.refused((f"agent{n}", "grpc"), float(n) + 0.5, n)  # one counted each
    assert log.pending(5.0) == []  # over the bound, but every window is still open
    assert log.pending(11.5) == [(0, 1), (1, 1)]  # the oldest quiet pairs, until the table is at its bound
    assert log.pending() == [(2, 1), (3, 1)]  # a shutdown: everything left
    assert log.pending() == []


async def test_a_readers_refusals_at_the_admin_gate_write_a_row_a_minute(make_core: Callable[..., Memesh]) -> None:
    core = make_core()
    reader = (await core.identity.issue(ADMIN, "t1", "curious", ["Reader"])).agent.principal()
    now = [0.0]
    gate = RoleGate(core.directory, lambda: now[0])

    async def denied_rows() -> list[dict[str, object]]:
        rows = await core.directory.audit_log().rows(0, 10_000)
        return [json.loads(r.detail) for r in rows if r.kind == "AuthzDenied"]

    for _ in range(50):
        with pytest.raises(Forbidden):
            await gate.refuse_non_admin(reader, "admin_grpc", "AdminService")
    assert await denied_rows() == [{"action": "admin_grpc", "reason": "role"}]
    now[0] = 61.0
    with pytest.raises(Forbidden):
        await gate.refuse_non_admin(reader, "admin_grpc", "AdminService")
    assert (await denied_rows())[-1] == {"action": "admin_grpc", "reason": "role", "repeated": 49}
    with pytest.raises(Forbidden):
        await gate.refuse_non_admin(reader, "admin_grpc", "AdminService")
    await gate.close()  # an orderly close writes what is still counted
    assert (await denied_rows())[-1] == {"action": "admin_grpc", "reason": "role", "repeated": 1}
    await gate.refuse_non_admin(ADMIN, "admin_grpc", "AdminService")  # an admin passes, unrecorded
    assert len(await denied_rows()) == 3
    await core.close()

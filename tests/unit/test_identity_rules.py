"""Roles, credential transitions, rate limits, ids, the recall blend."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest

from mesh.errors import Conflict, Forbidden, NotFound, RateLimited, ValidationFailed
from mesh.identity import (
    Agent,
    AgentStatus,
    Principal,
    Role,
    check_can_issue,
    check_can_mutate_agent,
    check_can_read_agent,
    check_display_name,
    hash_key,
    looks_like_key,
    parse_roles,
    require_admin,
    require_writer,
    transition,
)
from mesh.ids import MonotonicUuid7, is_uuid, uuid7
from mesh.query import recall_score, rerank_for_recall
from mesh.ratelimit import BucketPolicy, TokenBuckets
from mesh.tuning import RecallTuning
from tests.unit.helpers import T0, cell, direction, later


def principal(*roles: Role, tenant: str = "t1") -> Principal:
    return Principal(agent_id="me", tenant_id=tenant, roles=frozenset(roles))


def agent(tenant: str = "t1", status: AgentStatus = AgentStatus.ACTIVE) -> Agent:
    return Agent("a1", tenant, "name", frozenset({Role.WRITER}), status, hash_key("msh_x"), T0, T0)


def test_reader_may_not_write_and_non_admins_are_refused_early() -> None:
    require_writer(principal(Role.WRITER))
    with pytest.raises(Forbidden):
        require_writer(principal(Role.READER))
    with pytest.raises(Forbidden):
        require_admin(principal(Role.WRITER))
    require_admin(principal(Role.PROJECT_ADMIN))


def test_project_admin_is_confined_to_its_tenant() -> None:
    pa = principal(Role.PROJECT_ADMIN)
    check_can_read_agent(pa, agent("t1"))
    with pytest.raises(NotFound):
        check_can_read_agent(pa, agent("t2"))
    with pytest.raises(Forbidden):
        check_can_mutate_agent(pa, agent("t2"))
    with pytest.raises(Forbidden):
        check_can_issue(pa, "t2", frozenset({Role.WRITER}))
    with pytest.raises(Forbidden):
        check_can_issue(pa, "t1", frozenset({Role.SERVICE_ADMIN}))
    service_admin_here = replace(agent("t1"), roles=frozenset({Role.SERVICE_ADMIN}))
    check_can_read_agent(pa, service_admin_here)
    with pytest.raises(Forbidden):  # else it could rotate a service-wide key to itself
        check_can_mutate_agent(pa, service_admin_here)
    sa = principal(Role.SERVICE_ADMIN, tenant="system")
    check_can_read_agent(sa, agent("t2"))
    check_can_mutate_agent(sa, agent("t2"))
    check_can_mutate_agent(sa, service_admin_here)
    check_can_issue(sa, "t9", frozenset({Role.SERVICE_ADMIN}))


def test_credential_state_machine() -> None:
    a = agent()
    suspended = transition(a, "suspend", later(1))
    assert suspended.status is AgentStatus.SUSPENDED
    assert transition(suspended, "reinstate", later(2)).status is AgentStatus.ACTIVE
    rotated = transition(a, "rotate", later(3), new_key_hash=hash_key("msh_new"))
    assert rotated.key_hash != a.key_hash and rotated.status is AgentStatus.ACTIVE
    revoked = transition(a, "revoke", later(4))
    assert transition(revoked, "revoke", later(5)) is revoked  # idempotent: a retried revoke succeeds
    for action in ("reinstate", "rotate", "suspend"):
        with pytest.raises(Conflict):
            transition(revoked, action, later(5), new_key_hash="h")


def test_role_and_name_validation() -> None:
    assert parse_roles(["Writer", "Reader"]) == {Role.WRITER, Role.READER}
    for bad in ([], ["Root"]):
        with pytest.raises(ValidationFailed):
            parse_roles(bad)
    assert check_display_name(" ok ") == "ok"
    for bad_name in ("", "x" * 65):
        with pytest.raises(ValidationFailed):
            check_display_name(bad_name)
    assert check_display_name("x" * 64)
    assert looks_like_key("msh_" + "a" * 43) and not looks_like_key("Bearer abc")


def test_token_bucket_refuses_with_retry_after_and_refills() -> None:
    buckets = TokenBuckets({"Read": BucketPolicy(rate=1.0, burst=2.0), "Off": BucketPolicy(rate=0, burst=1)})
    buckets.charge("Read", "a", now=0.0)
    buckets.charge("Read", "a", now=0.0)
    with pytest.raises(RateLimited) as caught:
        buckets.charge("Read", "a", now=0.2)
    assert caught.value.retry_after == 1
    buckets.charge("Read", "b", now=0.2)  # buckets are per caller
    buckets.charge("Read", "a", now=1.3)  # refilled
    for _ in range(100):
        buckets.charge("Off", "a", now=0.0)  # rate 0 disables


def test_uuid7_is_time_ordered_and_valid() -> None:
    a = uuid7(1_000, bytes(10))
    b = uuid7(1_001, bytes(10))
    assert a < b and is_uuid(a) and uuid.UUID(a).version == 7
    assert uuid.UUID(a).variant == uuid.RFC_4122
    assert not is_uuid("nope")


def test_ids_made_in_one_millisecond_still_sort_in_creation_order() -> None:
    source = MonotonicUuid7()
    rng = random.Random(3)
    ids = [source.next_id(5_000 + i // 1000, rng.randbytes(10)) for i in range(10_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids[:50])


def test_recall_blend_prefers_salient_recent_cells_among_equals() -> None:
    tuning = RecallTuning()
    v = direction(1)
    stale = cell(v, salience=0.5, at=T0)
    fresh = replace(cell(v, salience=0.5, at=T0), last_accessed=later(7 * 24 * 3600))
    salient = cell(v, salience=1.0, at=T0)
    now = later(7 * 24 * 3600)
    assert recall_score(1.0, fresh, now, tuning) > recall_score(1.0, stale, now, tuning)
    ranked = rerank_for_recall([(stale, 0.9), (fresh, 0.9), (salient, 0.9)], 2, now, tuning)
    assert {c.id for c, _ in ranked} == {fresh.id, salient.id}
    much_closer = rerank_for_recall([(stale, 0.99), (salient, 0.5)], 1, now, tuning)
    assert much_closer[0][0].id == stale.id


@pytest.mark.parametrize(
    "name",
    ["a\u0000b", "line\nbreak", "\u202egnp.exe", "x\u2066y", "a\u200bzw", "\ufeffbom", "\u2028line", "line\u2029",
     "\u00a0nbsp", "a\ue000b", "a\ud800b", "tag\U000e0041"],
)  # fmt: skip
def test_a_display_name_holds_no_control_character_nor_bidi_override(name: str) -> None:
    """The console and the CLI print display names: a right-to-left override disguised ``exe.png``, a zero-width
    space or a BOM made a name that looks like another, and line separators or a no-break space at an end
    were cut away after a 200 (only the space is cut now; the rest is refused)."""
    with pytest.raises(ValidationFailed):
        check_display_name(name)


def test_a_display_name_keeps_its_letters_and_emoji() -> None:
    assert check_display_name(" émile 👨\u200d💻 ") == "émile 👨\u200d💻"

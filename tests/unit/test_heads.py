"""Several heads over one deployment (in process: two facades on one directory, the real HeadRoster actor
class): a credential change at one head holds at every head on the very next request, a head that lost
the roster trusts no cache, and the rate limits are split between the live heads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import httpx
import pytest

from actors.head_roster import HeadRoster, HeadRosterConfig
from api.app import create_app
from api.console.gate import SESSION_COOKIE
from api.console.oidc import ConsoleConfig
from cluster.compose import rate_policies
from cluster.settings import Settings
from head.facade import Bucket, Memesh
from mesh.console_sessions import PendingLogin
from mesh.errors import RateLimited, Unauthorized, Unavailable
from mesh.roster import EVERYTHING, Roster
from tests.unit.conftest import ADMIN, in_process_settings

CONSOLE = ConsoleConfig(issuer="http://127.0.0.1:9", client_id="memesh-console", client_secret="s3cret")


def second_head(core: Memesh, settings: Settings) -> Memesh:
    """Another head process of the same deployment: its own caches, buckets and roster link."""
    return Memesh(core.directory, core.embedder, rate_policies(settings), heads_lease_s=3.0, heads_poll_s=0.5)


@pytest.fixture
async def heads(make_core: Callable[..., Memesh], tmp_path) -> AsyncIterator[tuple[Memesh, Memesh]]:  # type: ignore[no-untyped-def]
    a = make_core()
    b = second_head(a, in_process_settings(tmp_path / "data"))
    assert await a.join_heads() >= 1 and await b.join_heads() == 2
    yield a, b
    await b.close()
    await a.close()


@pytest.mark.parametrize("action", ["revoke", "suspend", "rotate"])
async def test_a_change_at_one_head_fails_the_old_key_at_the_other_on_the_next_request(
    heads: tuple[Memesh, Memesh], action: str
) -> None:
    a, b = heads
    issued = await a.identity.issue(ADMIN, "t1", "agent", ["Writer"], None)
    key = issued.plaintext_secret
    assert (await b.principal(key)).agent_id == issued.agent.id
    assert b.identity.cached(key) is not None  # b answers it from its cache from now on
    with b.identity.watch(issued.agent.id) as stream_event:
        _, new_key = await a.identity.apply(ADMIN, issued.agent.id, action)
        assert stream_event.is_set(), "an open stream at the other head was not woken"
    with pytest.raises(Unauthorized):
        await b.principal(key)
    if action == "rotate":
        assert new_key is not None and (await b.principal(new_key)).agent_id == issued.agent.id


async def test_a_reinstated_key_works_at_the_other_head_at_once(heads: tuple[Memesh, Memesh]) -> None:
    a, b = heads
    issued = await a.identity.issue(ADMIN, "t1", "agent", ["Writer"], None)
    await a.identity.apply(ADMIN, issued.agent.id, "suspend")
    with pytest.raises(Unauthorized):
        await b.principal(issued.plaintext_secret)  # now in b's negative cache
    await a.identity.apply(ADMIN, issued.agent.id, "reinstate")
    assert (await b.principal(issued.plaintext_secret)).agent_id == issued.agent.id


async def test_each_head_holds_its_share_of_a_rate_limit(make_core: Callable[..., Memesh], tmp_path) -> None:  # type: ignore[no-untyped-def]
    limits = {"rate_limits": {"write": {"rate": 0.001, "burst": 10}}}
    a = make_core(**limits)
    b = second_head(a, in_process_settings(tmp_path / "data", **limits))
    await a.join_heads()
    await b.join_heads()
    for _ in range(200):  # a's next poll reports two heads (bounded: 10 s)
        if a.heads.heads == 2:
            break
        await asyncio.sleep(0.05)
    assert a.heads.heads == 2, "head a never saw head b"
    issued = await a.identity.issue(ADMIN, "t1", "agent", ["Writer"], None)
    principal = await a.principal(issued.plaintext_secret)
    charged = {}
    for name, head in (("a", a), ("b", b)):
        charged[name] = 0
        with pytest.raises(RateLimited):
            for _ in range(11):
                head.charge(principal, Bucket.WRITE)
                charged[name] += 1
    assert charged == {"a": 5, "b": 5}, "two heads: each holds half the burst, together the limit"
    await b.close()
    await a.close()


async def test_a_head_that_lost_the_roster_trusts_no_cache(make_core: Callable[..., Memesh]) -> None:
    core = make_core()
    await core.join_heads()
    issued = await core.identity.issue(ADMIN, "t1", "agent", ["Writer"], None)
    await core.principal(issued.plaintext_secret)
    assert core.identity.cached(issued.plaintext_secret) is not None
    core.heads._fresh_until = 0.0  # its lease ran out (what a roster that stops answering leads to)
    assert core.identity.cached(issued.plaintext_secret) is None
    await core.close()


async def test_a_console_session_from_one_head_works_at_the_other_until_a_logout_anywhere(
    heads: tuple[Memesh, Memesh],
) -> None:
    a, b = heads
    app_a, app_b = create_app(a, console=CONSOLE), create_app(b, console=CONSOLE)
    agent = (await a.identity.issue(ADMIN, "acme", "op", ["ProjectAdmin"], oidc_subject="op")).agent
    token, _ = await app_a.state.console.sessions.open(agent.id, "op", datetime.now(UTC))
    cookie = {"cookie": f"{SESSION_COOKIE}={token}"}
    transport = httpx.ASGITransport
    async with (
        httpx.AsyncClient(transport=transport(app=app_a), base_url="http://memesh.test") as at_a,
        httpx.AsyncClient(transport=transport(app=app_b), base_url="http://memesh.test") as at_b,
    ):
        assert (await at_b.get("/admin/api/me", headers=cookie)).status_code == 200
        assert (await at_b.post("/admin/auth/logout", headers=cookie)).status_code == 204
        assert (await at_a.get("/admin/api/me", headers=cookie)).status_code == 401
    login = PendingLogin("nonce", "verifier", "http://memesh.test/admin/auth/callback")
    await app_a.state.console.sessions.put_login("state-1", login, datetime.now(UTC), "127.0.0.1")
    assert await app_b.state.console.sessions.take_login("state-1", datetime.now(UTC)) == login  # the callback at b
    assert await app_a.state.console.sessions.take_login("state-1", datetime.now(UTC)) is None  # taken once


# ------------------------------------------------------------------ the rules
def test_the_roster_waits_for_live_heads_only_and_a_late_head_drops_everything() -> None:
    roster = Roster(lease_s=3.0, max_log=2, version=100)
    assert roster.poll("a", -1, 0.0) == [] and roster.poll("b", -1, 0.0) == []
    v = roster.publish("agent-1")
    assert roster.lagging(v, 1.0) == ["a", "b"]
    assert roster.poll("a", 100, 1.0) == ["agent-1"]  # a hears of it, and acknowledges at its next poll
    roster.poll("a", v, 1.1)
    assert roster.lagging(v, 1.2) == ["b"]
    assert roster.lagging(v, 3.5) == [], "b has not polled for a lease: nobody waits for it (and it has fenced)"
    roster.publish("agent-2")
    roster.publish("agent-3")
    assert roster.poll("b", 100, 4.5) == [EVERYTHING], "the log no longer reaches back to b"
    assert roster.live(4.5) == ["b"], "a, silent for longer than the lease, is forgotten"


async def test_a_restarted_roster_continues_above_every_version_a_head_holds() -> None:
    first = HeadRoster(HeadRosterConfig())
    seen, _, _, life = await first.poll("h", -1, 0.0)
    await asyncio.sleep(0.01)
    restarted = HeadRoster(HeadRosterConfig())
    await restarted.publish("agent-1", 1.0)
    version, changes, _, new_life = await restarted.poll("h", seen, 0.0)
    assert version > seen and changes == [EVERYTHING] and new_life != life


async def test_a_head_drops_its_cache_for_a_restarted_roster_whose_clock_is_behind(
    heads: tuple[Memesh, Memesh],
) -> None:
    """A roster restarted on a node whose clock is an hour behind starts below every version a head holds:
    the head must still drop what the lost log would have told it (here a revoke it never heard of)."""
    a, b = heads
    issued = await a.identity.issue(ADMIN, "t1", "agent", ["Writer"], None)
    key = issued.plaintext_secret
    assert (await b.principal(key)).agent_id == issued.agent.id and b.identity.cached(key) is not None
    lost = HeadRoster(HeadRosterConfig())  # the roster that dies: b never reads what it is told
    a.heads._roster = lambda: lost
    await a.identity.apply(ADMIN, issued.agent.id, "revoke")
    behind = HeadRoster(HeadRosterConfig(), restarted=False, wall=lambda: time.time() - 3600)
    a.directory.instances["head_roster"] = behind  # type: ignore[attr-defined]
    a.heads._roster = a.directory.head_roster
    for _ in range(100):  # b's next poll reaches the new roster (bounded: 5 s)
        if b.heads._life == behind.life:
            break
        await asyncio.sleep(0.05)
    assert b.heads._life == behind.life, "b never polled the restarted roster"
    with pytest.raises(Unauthorized):
        await b.principal(key)


async def test_publish_waits_for_a_live_head_that_does_not_poll_until_its_lease_ends() -> None:
    roster = HeadRoster(HeadRosterConfig(lease_s=0.5))
    await roster.poll("silent", -1, 0.0)
    started = asyncio.get_running_loop().time()
    assert await roster.publish("agent-1", 5.0) == 1
    assert 0.4 < asyncio.get_running_loop().time() - started < 2.0
    with pytest.raises(Unavailable):
        await roster.poll("slow", -1, 0.0)
        await roster.publish("agent-2", 0.1)  # a live head, and no time to wait for it


async def test_a_restarted_roster_confirms_no_change_before_one_lease_has_passed() -> None:
    """Heads of the roster that died may trust their caches until their lease runs out, and the new roster cannot
    know them: a change it confirmed sooner could leave one of them serving a revoked key."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await HeadRoster(HeadRosterConfig(lease_s=0.5), restarted=False).publish("agent-1", 5.0) == 0
    assert loop.time() - started < 0.2, "a first roster waits for nobody"
    restarted = HeadRoster(HeadRosterConfig(lease_s=0.5), restarted=True)
    started = loop.time()
    assert await restarted.publish("agent-1", 5.0) == 0
    assert loop.time() - started >= 0.45
    with pytest.raises(Unavailable):
        await HeadRoster(HeadRosterConfig(lease_s=0.5), restarted=True).publish("agent-2", 0.1)


async def test_a_head_closes_right_after_a_credential_change_it_made(make_core: Callable[..., Memesh]) -> None:
    """The head's roster poll was answered by its own revoke just as close cancelled it: Python 3.11's
    ``wait_for`` returned the answer and dropped the cancel, and the poll loop ran on, so close never returned."""
    core = make_core()
    issued = await core.identity.issue(ADMIN, "t1", "a", ["Writer"], None)
    await core.principal(issued.plaintext_secret)
    await core.identity.apply(ADMIN, issued.agent.id, "revoke")
    started = time.monotonic()
    closing = asyncio.ensure_future(core.close())
    await asyncio.wait([closing], timeout=10)  # its cancel could be swallowed as the poll's was: timed, not cancelled
    assert closing.done(), "close did not return"
    assert time.monotonic() - started < 5

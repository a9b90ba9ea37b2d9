"""A search leaves out the scene shards known to hold nothing of the tenant (``mesh.shard_absence``), and a
head never skips a shard after that shard acknowledged a write of the tenant, whichever head wrote it.

In process: two facades on one directory (two heads of one deployment, the real HeadRoster actor class)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from actors.directory import LocalActor
from actors.head_roster import HeadRoster, HeadRosterConfig
from actors.presence import HeadsTeller
from cluster.compose import build_memesh, rate_policies
from head.facade import Memesh
from head.roster_link import RosterLink
from mesh.erasure import parse_scope
from mesh.errors import Unavailable
from mesh.identity import Principal, Role
from mesh.model import CellType, NewCell
from mesh.query import NodeFilter
from mesh.roster import EVERYTHING
from mesh.shard_absence import ShardAbsence, arrival_key, loaded_key
from mesh.sharding import partition_key
from tests.unit.conftest import ADMIN, in_process_settings
from tests.unit.test_data_lifecycle import T1_ADMIN
from tests.unit.test_data_lifecycle import _ShiftedHash as RenamedHash

WRITER = Principal("00000000-0000-7000-8000-0000000000b1", "t1", frozenset({Role.WRITER}))


def test_a_mark_is_learned_only_when_no_announcement_came_while_the_search_travelled() -> None:
    view = ShardAbsence()
    since = view.generation
    view.apply([arrival_key(0, "t2")])  # any shard's announcement, while the search to shard 1 travels
    view.learned(1, ["t1"], since)
    assert not view.skip(1, "t1"), "an answer from before an announcement was kept"
    view.learned(1, ["t1"], view.generation)
    assert view.skip(1, "t1") and not view.skip(0, "t1") and not view.skip(1, "t2")


def test_an_arrival_a_load_or_missed_changes_drop_marks() -> None:
    view = ShardAbsence()
    view.learned(0, ["t1", "t2"], 0)
    view.learned(1, ["t1"], 0)
    assert view.apply([arrival_key(0, "t1"), "agent-7"]) == ["agent-7"], "other changes pass through in order"
    assert not view.skip(0, "t1") and view.skip(0, "t2") and view.skip(1, "t1")
    view.apply([loaded_key(0)])
    assert not view.skip(0, "t2") and view.skip(1, "t1"), "a load voids what was known of that shard only"
    assert view.apply([EVERYTHING]) == [EVERYTHING] and len(view) == 0, "a head that missed changes forgets all"


def test_the_view_is_bounded() -> None:
    view = ShardAbsence(max_marks=3)
    view.learned(0, [f"t{n}" for n in range(10)], 0)
    assert len(view) <= 3


def project_on(core: Memesh, tenant_id: str, shard: int) -> str:
    """A project of ``tenant_id`` whose cells the scene shard ``shard`` owns."""
    spec = core.directory.spec
    return next(p for n in range(1000) if spec.owner("scene_shard", partition_key(tenant_id, p := f"p{n}")) == shard)


@pytest.fixture
async def two_heads(tmp_path) -> AsyncIterator[tuple[Memesh, Memesh]]:  # type: ignore[no-untyped-def]
    settings = in_process_settings(tmp_path / "data")
    a = build_memesh(settings)
    b = Memesh(a.directory, a.embedder, rate_policies(settings), heads_lease_s=3.0, heads_poll_s=0.5)
    assert await a.join_heads() >= 1 and await b.join_heads() == 2
    yield a, b
    await b.close()
    await a.close()


async def recall(head: Memesh, text: str) -> list[str]:
    return [c.content for c in await head.memory.recall(WRITER, text, None, 10, NodeFilter())]


async def test_a_head_skips_an_empty_shard_until_another_head_writes_the_tenant_there(
    two_heads: tuple[Memesh, Memesh],
) -> None:
    a, b = two_heads
    assert a.directory.spec.scene_shards == 2
    first, other = project_on(a, "t1", 0), project_on(a, "t1", 1)
    await a.memory.write_cells(
        WRITER, [NewCell(content="the primary database is in Frankfurt", cell_type=CellType.FACT, project_id=first)]
    )
    assert await recall(b, "where is the primary database") == ["the primary database is in Frankfurt"]
    assert b.memory.absence.skip(1, "t1") and not b.memory.absence.skip(0, "t1")
    calls = b.memory.searches.calls
    await recall(b, "where is the primary database")
    assert b.memory.searches.calls == calls + 1, "the shard known to hold nothing of t1 was asked again"

    # the other head writes t1's first cell on shard 1: acknowledged only once b has dropped its mark
    await a.memory.write_cells(
        WRITER, [NewCell(content="the replica database is in Dublin", cell_type=CellType.FACT, project_id=other)]
    )
    assert not b.memory.absence.skip(1, "t1")
    assert "the replica database is in Dublin" in await recall(b, "where is the replica database")


async def test_a_head_whose_roster_lease_ran_out_asks_every_shard(two_heads: tuple[Memesh, Memesh]) -> None:
    a, b = two_heads
    await a.memory.write_cells(
        WRITER, [NewCell(content="queues drain every night", cell_type=CellType.FACT, project_id=project_on(a, "t1", 0))]
    )
    await recall(b, "when do queues drain")
    assert b.memory.absence.skip(1, "t1")
    b.memory.fresh = lambda: False  # what the head's roster link says once the roster stops answering it
    calls = b.memory.searches.calls
    await recall(b, "when do queues drain")
    assert b.memory.searches.calls == calls + 2, "a fenced head trusted what it knew of the shards"


def test_the_heads_lease_reaches_every_scene_shard(make_core: Callable[..., Memesh]) -> None:
    """A shard's announcement waits for heads on the heads' own lease and poll."""
    core = make_core(heads={"lease_s": 2.0, "poll_s": 0.5})
    for index in range(core.directory.spec.scene_shards):
        shard = core.directory.scene_shard(index)
        assert isinstance(shard, LocalActor)
        assert (shard.target.config.heads_lease_s, shard.target.config.heads_poll_s) == (2.0, 0.5)


async def test_a_shard_rebuilt_by_a_reembed_still_owns_the_tenants_it_announced(two_heads: tuple[Memesh, Memesh]) -> None:
    """A reembed rebuilds the partition from the cells it holds: a tenant an erase emptied there is gone from
    it, but was announced, so the shard must not say it holds nothing of it (its next write announces nothing)."""
    a, b = two_heads
    first, other = project_on(a, "t1", 0), project_on(a, "t1", 1)
    await a.memory.write_cells(WRITER, [NewCell(content="alerts page the on-call", cell_type=CellType.FACT, project_id=first)])
    await a.memory.write_cells(WRITER, [NewCell(content="a note to erase", cell_type=CellType.FACT, project_id=other)])
    await a.data.erase(T1_ADMIN, parse_scope("project", other, None), f"project:{other}", dry_run=False)
    a.reembed._target = lambda: RenamedHash()  # what compose passes: the configured engine
    job = await a.reembed.start(ADMIN)
    await a.reembed.wait(60)
    assert a.reembed.job(ADMIN, job.job_id).status == "succeeded"
    await recall(b, "who do alerts page")
    assert not b.memory.absence.skip(1, "t1"), "the rebuilt shard said it holds nothing of an announced tenant"
    await a.memory.write_cells(WRITER, [NewCell(content="the pager rota is weekly", cell_type=CellType.FACT, project_id=other)])
    assert "the pager rota is weekly" in await recall(b, "how often does the pager rota change")


async def test_a_head_learns_nothing_off_the_roster_and_forgets_what_it_knew_when_it_comes_back(
    two_heads: tuple[Memesh, Memesh],
) -> None:
    a, b = two_heads
    await a.memory.write_cells(
        WRITER, [NewCell(content="backups run at noon", cell_type=CellType.FACT, project_id=project_on(a, "t1", 0))]
    )
    b.memory.fresh = lambda: False  # its lease ran out: searches teach it nothing
    await recall(b, "when do backups run")
    assert len(b.memory.absence) == 0
    b.memory.fresh = b.heads.fresh
    await recall(b, "when do backups run")
    assert b.memory.absence.skip(1, "t1")
    b._roster_rejoined()  # what its roster link calls on the first answer after a lapse
    assert len(b.memory.absence) == 0


async def test_a_roster_link_calls_on_rejoin_when_it_joins_and_after_each_lapse_only() -> None:
    roster = HeadRoster(HeadRosterConfig(lease_s=3.0), restarted=False)
    now = [0.0]
    rejoins: list[float] = []
    link = RosterLink(lambda: roster, lambda changes: None, 3.0, 0.05, lambda: now[0], lambda: rejoins.append(now[0]))
    link.start()
    await link.joined(5.0)
    for _ in range(10):  # polls answered well within the lease
        await asyncio.sleep(0.06)
    assert rejoins == [0.0]
    now[0] = 10.0  # the lease ran out between two polls
    for _ in range(10):
        await asyncio.sleep(0.06)
    assert link.fresh() and rejoins[0] == 0.0 and set(rejoins[1:]) == {10.0}, rejoins
    after_lapse = len(rejoins)  # (the answer to a poll sent before the lapse renews nothing: it may count twice)
    for _ in range(10):
        await asyncio.sleep(0.06)
    assert len(rejoins) == after_lapse, "a head on its lease dropped its caches again"
    await link.close()


class _DirectoryOfRoster:
    """Only the roster of a directory (the one thing a HeadsTeller calls): a real HeadRoster behind it."""

    def __init__(self, roster: HeadRoster) -> None:
        self._roster = roster

    def head_roster(self) -> HeadRoster:
        return self._roster


async def test_a_first_write_the_roster_does_not_confirm_is_refused_and_announced_again_by_its_retry() -> None:
    silent = HeadRoster(HeadRosterConfig(lease_s=30.0), restarted=True)  # confirms nothing for 30 s
    teller = HeadsTeller(1, lambda: _DirectoryOfRoster(silent), lease_s=0.2, poll_s=0.1)  # type: ignore[arg-type, return-value]
    with pytest.raises(Unavailable):
        await teller.tell(["t1"])
    assert teller.absent(lambda _: False, ["t1"]) == ["t1"], "a tenant whose announcement failed counted as told"
    await teller.loaded()  # a load's announcement gives up without refusing anything
    answering = HeadRoster(HeadRosterConfig(lease_s=0.2), restarted=False)
    teller._directory = lambda: _DirectoryOfRoster(answering)  # type: ignore[assignment, return-value]
    await teller.tell(["t1"])  # the retry
    assert teller.absent(lambda _: False, ["t1"]) == []

"""Deliveries made visible on the inbox shard's journal, committed to their table behind (real LanceDB under a
temporary directory, the actor classes in-process): what is visible survives a restart, an erase leaves no
byte of it in the journal, retention's deletes are never undone by a replay, and a start that moves inbox
partitions commits the journals before it reads the tables."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.write_journal import JOURNAL_DIR
from head.facade import Memesh
from mesh.erasure import parse_scope
from mesh.errors import StorageUnavailable
from mesh.inbox_wire import InboxDelivery
from mesh.model import CellType, NewCell
from tests.unit.test_data_lifecycle import T1_ADMIN
from tests.unit.test_hostile_storage import grep
from tests.unit.test_propagation import agent, drain, settle, write
from tests.unit.test_resize import assert_every_row_at_its_owner, started
from tests.unit.test_scene_rows import _broken

TOPIC = "kubernetes helm deployment"


def _inboxes(core: Memesh) -> list[Any]:
    """The in-process inbox shards (their tables are patched to fail as a storage outage would)."""
    return [core.directory.inbox_shard(i).target for i in range(core.directory.spec.inbox_shards)]  # type: ignore[attr-defined]


def inbox_journals(data: Path, needle: str) -> list[str]:
    """The inbox shards' journal files that hold ``needle``."""
    return [p for p in grep(data / "lance" / JOURNAL_DIR, needle) if Path(p).name.startswith("inbox_shard")]


@contextlib.contextmanager
def deliveries_refused(core: Memesh) -> Iterator[list[int]]:
    """Inside the block every inbox shard's deliveries table refuses its appends; yields the refused ones."""
    shards = _inboxes(core)
    real = {id(shard): shard._deliveries.append for shard in shards}
    refused: list[int] = []

    async def refusing(*args: object) -> None:
        refused.append(1)
        await _broken(*args)

    for shard in shards:
        shard._deliveries.append = refusing
    try:
        yield refused
    finally:
        for shard in shards:
            shard._deliveries.append = real[id(shard)]


async def loaded(core: Memesh) -> Memesh:
    for shard in _inboxes(core):
        await shard._ready()
    return core


def seen(page: dict[str, Any]) -> list[tuple[int, str, str]]:
    return sorted((i["delivery_seq"], i["diff"]["cell_id"], i["delivery"]["node_kind"]) for i in page["items"])


async def seen_after_restart(make_core: Callable[..., Memesh], sections: dict[str, Any], secret: str) -> list[Any]:
    """The agent's whole inbox as a fresh start on the same data shows it."""
    core = make_core(**sections)
    try:
        return seen(await drain(core, await core.identity.authenticate(secret), limit=100))
    finally:
        await core.close()


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(300):  # bounded: 30 s
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} after 30 s")


async def test_a_delivery_is_visible_on_the_journal_while_the_table_refuses_and_survives_a_restart(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = await loaded(make_core())
    listener, secret = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, TOPIC)
    with deliveries_refused(core) as refused:
        cell_id = await write(core, writer, f"{TOPIC} runbook updated", salience=0.8)
        page = await drain(core, listener)
        assert cell_id in {c for _, c, _ in seen(page)}  # visible although no table commit succeeded
        await until(lambda: bool(refused), "the commit behind the delivery was never tried")
        assert (await core.health())["delivery_journal_pending"] >= 1
        assert inbox_journals(tmp_path / "data", cell_id)
        await core.close()  # the table still refuses: the deliveries stay journaled, and the close says so

    core = await loaded(make_core())  # the next start commits them at load
    try:
        again = await drain(core, await core.identity.authenticate(secret))
        assert seen(again) == seen(page)  # the same deliveries at the same sequences
        assert inbox_journals(tmp_path / "data", "diff") == []  # emptied: each segment committed
        stored = {r["delivery_id"] for shard in _inboxes(core) for r in (await shard._deliveries.load()).to_pylist()}
        held = {d.delivery_id for shard in _inboxes(core) for inbox in shard._inboxes.values() for d in inbox.deliveries}
        assert held and held <= stored  # in the table now
    finally:
        await core.close()


async def test_retention_deletes_land_after_the_commit_behind_so_no_restart_revives_a_trimmed_delivery(
    make_core: Callable[..., Memesh],
) -> None:
    sections = {
        "retention": {"max_deliveries_per_inbox": 2},
        "storage": {"soft_commit_window_ms": 0},  # a trim's delete is sent at once, within the 20 ms before the commit
        "propagation": {"node_budget": 100, "close_match_budget": 100},
    }
    core = await loaded(make_core(**sections))
    listener, secret = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, TOPIC)
    new = [NewCell(f"{TOPIC} runbook revision {n}", CellType.FACT, salience=0.8) for n in range(6)]
    await core.memory.write_cells(writer, new)  # one walk batch: its deliveries reach the inbox together
    await settle(core)
    kept = seen(await drain(core, listener, limit=100))
    assert 0 < len(kept) <= 2 and kept[-1][0] > 2  # the oldest left
    for shard in _inboxes(core):
        await shard._trims.drain()
        await shard._settled()
    await core.close()
    assert await seen_after_restart(make_core, sections, secret) == kept


async def test_an_erase_leaves_no_byte_of_a_delivery_in_the_journal(make_core: Callable[..., Memesh], tmp_path: Path) -> None:
    core = await loaded(make_core())
    listener, secret = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, TOPIC)
    try:
        with deliveries_refused(core) as refused:
            cell_id = await write(core, writer, f"{TOPIC}: the vault code is quokka-7731", salience=0.8)
            assert cell_id in {c for _, c, _ in seen(await drain(core, listener))}
            await until(lambda: bool(refused), "the commit behind the delivery was never tried")
            assert inbox_journals(tmp_path / "data", "quokka-7731")
            erase = asyncio.create_task(core.data.erase(T1_ADMIN, parse_scope("node", cell_id, None), f"node:{cell_id}", False))
            await asyncio.sleep(1.0)  # it cannot empty the journal while the table refuses: it retries
            assert not erase.done() and inbox_journals(tmp_path / "data", "quokka-7731")
        assert (await asyncio.wait_for(erase, 30)).digest  # the retry completes and certifies
        assert grep(tmp_path / "data", "quokka-7731") == []
        assert (await drain(core, listener))["items"] == []
    finally:
        await core.close()
    core = make_core()
    try:
        assert (await drain(core, await core.identity.authenticate(secret)))["items"] == []  # nothing came back
    finally:
        await core.close()


async def test_a_start_that_moves_inbox_partitions_commits_the_delivery_journals_first(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = await loaded(await started(make_core, tmp_path))
    writer, _ = await agent(core)
    listeners = [await agent(core) for _ in range(12)]
    for listener, _ in listeners:
        await core.inbox.place_beacon(listener, TOPIC)
    with deliveries_refused(core):
        await write(core, writer, f"{TOPIC} tide tables", salience=0.8)
        before = [seen(await drain(core, listener)) for listener, _ in listeners]
        assert sum(map(bool, before)) >= 4  # the walk reached most of them
        await core.close()
    assert inbox_journals(tmp_path / "data", "tide tables")

    grown = await started(make_core, tmp_path, inbox_shards=8)  # 2 -> 8: three partitions in four move
    try:
        (move,) = [m for m in grown.partitions.moves if m.kind == "inbox_shard"]
        assert move.rows > 0
        after = [seen(await drain(grown, await grown.identity.authenticate(secret))) for _, secret in listeners]
        assert after == before
        moved = {agent_id for shard in _inboxes(grown)[2:] for agent_id, inbox in shard._inboxes.items() if inbox.deliveries}
        assert moved  # some journaled deliveries reached a new shard
    finally:
        await grown.close()
    await assert_every_row_at_its_owner(tmp_path / "data")  # each journaled delivery went to its partition's owner


async def test_a_trim_whose_delete_failed_is_retried_so_no_restart_revives_it(make_core: Callable[..., Memesh]) -> None:
    sections = {"retention": {"max_deliveries_per_inbox": 1}, "propagation": {"node_budget": 100, "close_match_budget": 100}}
    core = await loaded(make_core(**sections))
    listener, secret = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, TOPIC)
    with deliveries_refused(core):
        new = [NewCell(f"{TOPIC} runbook revision {n}", CellType.FACT, salience=0.8) for n in range(3)]
        await core.memory.write_cells(writer, new)
        await settle(core)
        kept = seen(await drain(core, listener, limit=100))
        assert len(kept) == 1
        for shard in _inboxes(core):
            await shard._trims.drain()  # its delete failed: the journal could not be settled
        assert any(shard._untrimmed for shard in _inboxes(core))
    for shard in _inboxes(core):
        await shard.sweep()  # storage answers again: the sweep deletes what the failed trim left
        assert not shard._untrimmed
    await core.close()
    assert await seen_after_restart(make_core, sections, secret) == kept


async def test_a_settle_that_meets_the_commit_behind_writes_each_delivery_once(make_core: Callable[..., Memesh]) -> None:
    core = await loaded(make_core())
    try:
        listener, _ = await agent(core)
        writer, _ = await agent(core)
        await core.inbox.place_beacon(listener, TOPIC)
        for shard in _inboxes(core):  # a slow table: the background commit is still under way when the settle comes
            append = shard._deliveries.append

            async def slow(rows: Any, append: Any = append) -> None:
                await asyncio.sleep(0.1)
                await append(rows)

            shard._deliveries.append = slow
        await write(core, writer, f"{TOPIC} runbook updated", salience=0.8)
        await asyncio.sleep(0.04)  # past the 20 ms after which the commit behind starts
        for shard in _inboxes(core):
            await shard._settled()
        ids = [r["delivery_id"] for shard in _inboxes(core) for r in (await shard._deliveries.read_all()).to_pylist()]
        assert ids and len(ids) == len(set(ids))
    finally:
        await core.close()


async def test_a_closed_inbox_shard_refuses_deliveries(make_core: Callable[..., Memesh]) -> None:
    core = await loaded(make_core())
    shard = _inboxes(core)[0]
    await core.close()
    with pytest.raises(StorageUnavailable):
        await shard.deliver([InboxDelivery("a1", "d1:n1", "d1", "p", 0.9, "{}", 0.0)])


async def test_new_deliveries_number_above_the_cursor_after_every_earlier_one_left(
    make_core: Callable[..., Memesh],
) -> None:
    core = await loaded(make_core())
    listener, secret = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, TOPIC)
    try:
        cell_id = await write(core, writer, f"{TOPIC} runbook updated", salience=0.8)
        page = await drain(core, listener)
        await drain(core, listener, ack=page["window_high"])
        await core.data.erase(T1_ADMIN, parse_scope("node", cell_id, None), f"node:{cell_id}", False)
        assert (await drain(core, listener))["items"] == []
    finally:
        await core.close()
    core = await loaded(make_core())
    try:
        listener = await core.identity.authenticate(secret)
        await write(core, writer, f"{TOPIC} a second runbook", salience=0.8)
        again = await drain(core, listener)
        assert len(again["items"]) == 1 and again["items"][0]["delivery_seq"] > page["window_high"]
    finally:
        await core.close()


def delivery(diff_id: str, agent_id: str = "a1") -> InboxDelivery:
    return InboxDelivery(agent_id, f"{diff_id}:n1", diff_id, "p", 0.9, "{}", 0.0)


async def test_an_erase_takes_out_a_delivery_whose_flush_failed_so_a_later_flush_never_writes_it(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = await loaded(make_core())
    shard = _inboxes(core)[0]
    try:
        await shard.deliver([delivery("keep-1")])
        shard._behind._max_pending = 0  # the journal refuses as at its back-pressure bound: this flush fails
        with pytest.raises(StorageUnavailable):
            await shard.deliver([delivery("secret-walrus")])
        shard._behind._max_pending = 10_000
        await shard.erase(["secret-walrus"], None)
        await shard.deliver([delivery("keep-2")])  # the next flush: it must not carry the erased one along
        await shard._settled()
    finally:
        await core.close()
    assert grep(tmp_path / "data", "secret-walrus") == []
    core = await loaded(make_core())
    try:
        held = [d.diff_id for d in _inboxes(core)[0]._inboxes["a1"].deliveries]
        assert held == ["keep-1", "keep-2"]  # nothing erased came back with the restart
    finally:
        await core.close()


async def test_a_failed_compaction_after_the_commit_behind_appends_no_row_twice(make_core: Callable[..., Memesh]) -> None:
    core = await loaded(make_core())
    shard = _inboxes(core)[0]
    tried: list[int] = []

    async def compacting(every: int) -> bool:  # every compaction fails, as a storage hiccup would
        tried.append(every)
        raise StorageUnavailable("compaction refused")

    shard._deliveries.optimize_if_due = compacting
    try:
        await shard.deliver([delivery("d1")])
        await until(lambda: shard._behind.outstanding == 0, "the appended rows were never taken as committed")
        await asyncio.sleep(1.5)  # past the first retry pause: a commit taken for failed would append again
        assert tried  # the compaction was tried (and failed) after the append
        await shard._settled()
        ids = [r["delivery_id"] for r in (await shard._deliveries.read_all()).to_pylist()]
        assert ids == ["d1:n1"]
    finally:
        await core.close()


async def test_a_shard_closed_before_it_loaded_refuses_calls_and_leaves_the_journal_alone(
    make_core: Callable[..., Memesh],
) -> None:
    core = make_core()
    shard = _inboxes(core)[0]
    await core.close()
    with pytest.raises(StorageUnavailable):
        await shard.deliver([delivery("late")])
    with pytest.raises(StorageUnavailable):
        await shard.cursor("a1")
    assert shard._deliveries is None  # never loaded: its load would replay and clear a successor's journal

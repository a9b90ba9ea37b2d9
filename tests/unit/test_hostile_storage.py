"""Storage under hostile or unlucky conditions: rows that cannot be read back, commits racing a
close, erasures that must leave no byte behind, manifests that must not pile up.

Each test names the finding of the 2026-11-23 review (../shared/reference/security-review.md)
it would have caught.
"""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from actors.audit_log import AuditLog, AuditLogConfig
from actors.beacon_set import BeaconSet, BeaconSetConfig
from actors.codecs import beacons_from_arrow, beacons_to_arrow, cells_from_arrow
from actors.group_commit import GroupCommitter
from actors.schemas import beacon_schema, cell_schema
from actors.storage import LanceStore, StorageConfig
from mesh.errors import ConfigInvalid, StorageUnavailable
from mesh.model import Beacon, normalize

DIMS = 8


def grep(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``needle`` (what an auditor with shell access would run)."""
    found = subprocess.run(["grep", "-rl", "--binary-files=text", needle, str(root)], capture_output=True, text=True)
    return found.stdout.split()


def beacon(expires_at: datetime | None, beacon_id: str = "00000000-0000-7000-8000-0000000000b1") -> Beacon:
    return Beacon(
        id=beacon_id,
        tenant_id="t1",
        agent_id="a1",
        interest="anything",
        embedding=normalize(np.ones(DIMS)),
        engine="hash-8",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        expires_at=expires_at,
    )


def test_a_timestamp_past_year_9999_in_utc_decodes_clamped() -> None:
    """C1: ``9999-12-31T23:59:59-23:59`` is 10000-01-01 in UTC; reading it back raised OverflowError."""
    far = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone_minus(23, 59))
    table = beacons_to_arrow([beacon(far)], DIMS)
    (decoded,) = beacons_from_arrow(table)
    assert decoded.expires_at is not None and decoded.expires_at.year == 9999


def timezone_minus(hours: int, minutes: int) -> object:
    from datetime import timezone

    return timezone(-timedelta(hours=hours, minutes=minutes))


def test_a_row_that_cannot_be_decoded_is_skipped_not_fatal() -> None:
    """C1 (loaders): one bad row must not stop a load; the others load."""
    good = beacons_to_arrow([beacon(None)], DIMS).to_pylist()[0]
    bad = {**good, "id": "00000000-0000-7000-8000-0000000000b2", "embedding": [float("nan")] * DIMS}
    table = pa.Table.from_pylist([good, bad], schema=beacon_schema(DIMS))
    assert [b.id for b in beacons_from_arrow(table)] == [good["id"]]
    cell_row = {
        "id": "c1",
        "tenant_id": "t1",
        "project_id": "p",
        "cell_type": "NotAType",
        "content": "x",
        "salience": 0.5,
        "source_agent": "a",
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        "last_accessed": datetime(2026, 1, 1, tzinfo=UTC),
        "layer": "L0",
        "scene_id": None,
        "session_id": None,
        "superseded_by": None,
        "tombstone": False,
        "engine": "e",
        "embedding": [0.5] * DIMS,
    }
    assert cells_from_arrow(pa.Table.from_pylist([cell_row], schema=cell_schema(DIMS))) == []


async def test_a_beacon_set_loads_a_table_holding_a_year_10000_row(tmp_path: Path) -> None:
    """C1, as the review reproduced it: the row is in the table, the actor restarts, and must answer."""
    storage = StorageConfig(str(tmp_path / "lance"))
    store = await LanceStore.open(storage)
    table = await store.table("beacon_set_0_beacons", beacon_schema(DIMS))
    far = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone_minus(23, 59))  # type: ignore[arg-type]
    await table.append(beacons_to_arrow([beacon(far), beacon(None, "00000000-0000-7000-8000-0000000000b3")], DIMS))
    restarted = BeaconSet(BeaconSetConfig(storage, 0, DIMS, sweep_interval_s=0))
    health = await restarted.health()
    assert health["beacons"] == 2 and health["skipped_rows"] == 0
    await restarted.close()


async def test_submits_racing_a_flush_barrier_never_hang() -> None:
    """M7: ``close()`` cancelled the worker while submits were arriving; with a zero window the batch
    in flight was never resolved and its caller hung for ever."""
    flushed: list[int] = []

    async def flush(items: list[int]) -> None:
        await asyncio.sleep(0)
        flushed.extend(items)

    committer: GroupCommitter[int] = GroupCommitter(flush, 0.0, 4)
    for round_ in range(50):
        submits = [asyncio.create_task(committer.submit([round_ * 10 + i])) for i in range(5)]
        await asyncio.sleep(0)
        closing = asyncio.create_task(committer.close())
        submits += [asyncio.create_task(committer.submit([round_ * 10 + i])) for i in range(5, 9)]
        await asyncio.wait_for(asyncio.gather(closing, *submits), timeout=5)
    assert sorted(flushed) == sorted(r * 10 + i for r in range(50) for i in range(9))


async def test_an_urgent_committer_skips_its_window_for_waiting_and_later_batches() -> None:
    flushed: list[list[int]] = []

    async def flush(items: list[int]) -> None:
        flushed.append(items)

    committer: GroupCommitter[int] = GroupCommitter(flush, 3600.0, 100)  # soft state: a window nobody waits out
    waiting = asyncio.create_task(committer.submit([1]))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    async with committer.urgent():
        await asyncio.wait_for(waiting, timeout=5)  # the batch in its window flushed at once
        await asyncio.wait_for(committer.submit([2]), timeout=5)  # and a later one does not wait either
    assert flushed == [[1], [2]]
    later = asyncio.create_task(committer.submit([3]))  # outside the block, the window applies again
    await asyncio.sleep(0.01)
    assert not later.done()
    await committer.flush()
    await later


async def test_an_adaptive_committer_flushes_a_lone_write_at_once_and_gathers_the_writes_under_load() -> None:
    flushed: list[list[int]] = []
    gate = asyncio.Event()

    async def flush(items: list[int]) -> None:
        flushed.append(items)
        await gate.wait()

    window = 0.5
    committer: GroupCommitter[int] = GroupCommitter(flush, window, 100, adaptive=True)
    lone = asyncio.create_task(committer.submit([1]))
    await asyncio.sleep(0.01)
    assert flushed == [[1]], "a lone write on an idle committer waited for its window"
    followers = [asyncio.create_task(committer.submit([n])) for n in (2, 3)]  # arrive while [1] is committing
    gate.set()
    await asyncio.wait_for(lone, timeout=5)
    await asyncio.sleep(0.05)
    assert flushed == [[1]] and not any(f.done() for f in followers), "under load the window no longer gathered"
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(asyncio.gather(*followers), timeout=5)
    assert flushed == [[1], [2, 3]]  # one commit for both, after the window
    assert asyncio.get_running_loop().time() - started > window / 2
    await asyncio.sleep(window * 1.2)  # idle again: the next lone write is not held back
    again = asyncio.create_task(committer.submit([4]))
    await asyncio.sleep(0.01)
    assert again.done() and flushed[-1] == [4]
    plain: GroupCommitter[int] = GroupCommitter(flush, window, 100)  # soft state keeps its window
    soft = asyncio.create_task(plain.submit([5]))
    await asyncio.sleep(0.01)
    assert not soft.done()
    await plain.flush()
    await soft


async def test_a_failed_flush_fails_its_submitters_and_the_next_batch_commits() -> None:
    attempts: list[list[int]] = []

    async def flush(items: list[int]) -> None:
        attempts.append(items)
        if len(attempts) == 1:
            raise OSError("disk full")

    committer: GroupCommitter[int] = GroupCommitter(flush, 0.001, 100)
    with pytest.raises(OSError):
        await committer.submit([1])
    await committer.submit([2])
    assert attempts == [[1], [2]]


async def test_erase_rows_leaves_no_byte_in_any_data_file(tmp_path: Path) -> None:
    """H2(b): LanceDB deletes are deletion vectors; a compacted fragment with one deleted row kept its bytes
    even after ``optimize(cleanup_older_than=0)``."""
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance")))
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("content", pa.string(), nullable=False)])
    table = await store.table("t", schema, identity="id")
    rows = [{"id": f"id{i}", "content": f"row {i}" + (" SECRET-ERASE-ME-123" if i == 500 else "")} for i in range(1001)]
    await table.append(pa.Table.from_pylist(rows, schema=schema))
    for i in range(3):
        await table.append(pa.Table.from_pylist([{"id": f"late{i}", "content": "late"}], schema=schema))
    await table.purge()  # one compacted fragment: the case deletion vectors leave behind
    replacement = pa.Table.from_pylist([{"id": "id7", "content": "rewritten"}], schema=schema)
    await table.append(pa.Table.from_pylist([{"id": "id7b", "content": "OLD-SUMMARY-QUOTE"}], schema=schema))
    assert grep(tmp_path, "SECRET-ERASE-ME-123") and grep(tmp_path, "OLD-SUMMARY-QUOTE")
    await table.erase_rows("id", ["id500", "id7b"], replacement)
    assert grep(tmp_path, "SECRET-ERASE-ME-123") == [] and grep(tmp_path, "OLD-SUMMARY-QUOTE") == []
    held = {r["id"]: r["content"] for r in (await table.read_all()).to_pylist()}
    assert len(held) == 1003 and "id500" not in held and held["id7"] == "rewritten" and held["late2"] == "late"
    await table.erase_rows("id", ["id500"])  # idempotent: nothing left to find
    assert len((await table.read_all()).to_pylist()) == 1003


async def test_the_audit_table_is_compacted_and_appends_are_exactly_once(tmp_path: Path) -> None:
    """M1: one LanceDB version (and manifest) per audit row, never compacted: about 41 B x n^2 of manifests.
    L8: a call Ray retries must not write a second row."""
    log = AuditLog(AuditLogConfig(StorageConfig(str(tmp_path / "lance"), optimize_every=16, keep_versions_s=0)))
    for n in range(100):
        await log.append("AgentIssued", "a", "t", f"target-{n}", "ok", {"n": n}, op_id=f"op-{n}")
    assert await log.append("AgentIssued", "a", "t", "target-5", "ok", {"n": 5}, op_id="op-5") == 6  # the stored row
    versions = list((tmp_path / "lance" / "audit_log.lance" / "_versions").glob("*.manifest"))
    assert len(versions) < 40, len(versions)
    assert (await log.verify()) == {"ok": True, "rows": 100, "first_bad_seq": None}
    again = AuditLog(AuditLogConfig(StorageConfig(str(tmp_path / "lance"))))  # a restarted actor remembers the op ids
    assert await again.append("AgentIssued", "a", "t", "target-7", "ok", {"n": 7}, op_id="op-7") == 8
    assert (await again.verify())["rows"] == 100


async def test_fsync_mode_syncs_every_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """M5: nothing was ever synced; the ``storage.fsync`` mode must sync before a commit is answered."""
    import actors.storage as storage

    synced: list[Path] = []
    real = storage.sync_file_system
    monkeypatch.setattr(storage, "sync_file_system", lambda path: (synced.append(path), real(path)))
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance"), fsync=True))
    schema = pa.schema([pa.field("id", pa.string(), nullable=False)])
    table = await store.table("t", schema)
    await table.append(pa.Table.from_pylist([{"id": "a"}], schema=schema))
    await table.upsert(pa.Table.from_pylist([{"id": "a"}], schema=schema))
    assert len(synced) == 2 and synced[0] == tmp_path / "lance"
    plain = await LanceStore.open(StorageConfig(str(tmp_path / "plain")))
    other = await plain.table("t", schema)
    await other.append(pa.Table.from_pylist([{"id": "a"}], schema=schema))
    assert len(synced) == 2


async def test_an_older_table_gains_new_nullable_columns(tmp_path: Path) -> None:
    """Data written before a column existed opens (null-filled) instead of refusing the start."""
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance")))
    old = pa.schema([pa.field("id", pa.string(), nullable=False)])
    await (await store.table("t", old)).append(pa.Table.from_pylist([{"id": "a"}], schema=old))
    new = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("at", pa.timestamp("us", tz="UTC"))])
    table = await store.table("t", new)
    assert (await table.read_all()).to_pylist() == [{"id": "a", "at": None}]


async def test_a_commit_torn_by_a_machine_crash_is_rolled_back_at_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """M5: after a power loss the latest manifest may point at a data file that never reached the disk;
    the table's loader must not refuse to start (it restores the newest version that reads)."""
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance")))
    schema = pa.schema([pa.field("id", pa.string(), nullable=False)])
    table = await store.table("t", schema)
    for name in ("a", "b", "c"):
        await table.append(pa.Table.from_pylist([{"id": name}], schema=schema))
    newest = max((tmp_path / "lance" / "t.lance" / "data").glob("*.lance"), key=lambda f: f.stat().st_mtime_ns)
    newest.unlink()  # the torn commit: its manifest is there, its data is not
    reopened = await (await LanceStore.open(StorageConfig(str(tmp_path / "lance")))).table("t", schema)
    assert sorted(r["id"] for r in (await reopened.load()).to_pylist()) == ["a", "b"]
    assert "restored version" in caplog.text
    await reopened.append(pa.Table.from_pylist([{"id": "d"}], schema=schema))
    assert sorted(r["id"] for r in (await reopened.read_all()).to_pylist()) == ["a", "b", "d"]


@pytest.mark.parametrize("step", ["add", "delete"])
async def test_an_erase_cut_between_its_steps_loses_no_other_row_and_repeats_cleanly(tmp_path: Path, step: str) -> None:
    """kill -9 in the middle of a fragment rewrite must not lose the other rows of the fragment (they are
    acknowledged writes), and the repeated erase must not leave them twice."""
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance")))
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("content", pa.string(), nullable=False)])
    table = await store.table("t", schema, identity="id")
    await table.append(pa.Table.from_pylist([{"id": f"id{i}", "content": f"row {i}"} for i in range(50)], schema=schema))
    real_step = getattr(table._table, step)  # the step a crash interrupts

    async def crash(*_: object) -> None:
        raise OSError(f"killed at the {step}")

    setattr(table._table, step, crash)
    with pytest.raises(StorageUnavailable):
        await table.erase_rows("id", ["id7"])
    setattr(table._table, step, real_step)
    after_crash = [r["id"] for r in (await table.read_all()).to_pylist()]
    assert set(after_crash) == {f"id{i}" for i in range(50)}  # nothing of anyone else lost
    assert len(await table.load()) == 50  # a reload sees each row once
    await table.erase_rows("id", ["id7"])  # the erase, resumed
    ids = [r["id"] for r in (await table.read_all()).to_pylist()]
    assert sorted(ids) == sorted(f"id{i}" for i in range(50) if i != 7) and len(ids) == len(set(ids))


async def test_an_erase_by_a_shared_column_keeps_every_other_row_of_that_column(tmp_path: Path) -> None:
    """An inbox erases its deliveries by ``diff_id`` or ``agent_id``, which many rows share: the rewrite
    must tell rows apart by their identity (``delivery_id``), not by the column it erases by, even when
    it resumes after a crash between its add and its delete."""
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance")))
    schema = pa.schema([pa.field("delivery_id", pa.string(), nullable=False), pa.field("agent_id", pa.string(), nullable=False)])
    table = await store.table("deliveries", schema, identity="delivery_id")
    rows = [{"delivery_id": f"d{i}", "agent_id": f"agent{i % 3}"} for i in range(30)]
    await table.append(pa.Table.from_pylist(rows, schema=schema))
    real_delete = table._table.delete  # the step a crash interrupts

    async def crash(_: str) -> None:
        raise OSError("killed between the add and the delete")

    table._table.delete = crash
    with pytest.raises(StorageUnavailable):
        await table.erase_rows("agent_id", ["agent0"])
    table._table.delete = real_delete
    assert sorted(r["delivery_id"] for r in (await table.load()).to_pylist()) == sorted(r["delivery_id"] for r in rows)
    await table.erase_rows("agent_id", ["agent0"])
    held = [r["delivery_id"] for r in (await table.read_all()).to_pylist()]
    assert sorted(held) == sorted(f"d{i}" for i in range(30) if i % 3) and len(held) == len(set(held))
    with pytest.raises(ConfigInvalid):
        await (await store.table("plain", schema)).erase_rows("agent_id", ["agent1"])

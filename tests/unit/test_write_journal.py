"""The write journal (``actors.write_journal``, ``actors.commit_behind``): a local database's scene shards
acknowledge a write once it is journaled and commit it to LanceDB behind the answer. On the real LanceDB:
an acknowledged write survives a table that refuses every commit, an erase leaves no byte of the cell in
the journal, and a start that moves partitions commits the journals before it reads the tables."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import pyarrow as pa
import pytest

from actors.chores import Background
from actors.codecs import cells_to_arrow
from actors.commit_behind import CommitBehind
from actors.group_commit import GroupCommitter
from actors.schemas import cell_schema
from actors.storage import LanceStore, StorageConfig
from actors.write_journal import JOURNAL_DIR, WriteJournal, replay_journal
from head.facade import Memesh
from mesh.erasure import parse_scope
from mesh.errors import StorageUnavailable
from mesh.model import CellType, NewCell, normalize
from tests.unit.test_data_lifecycle import T1_ADMIN
from tests.unit.test_hostile_storage import grep
from tests.unit.test_propagation import agent
from tests.unit.test_resize import assert_every_row_at_its_owner, started
from tests.unit.test_scene_rows import DIMS, _broken, _cell, _shards


def rows(*ids: str) -> pa.Table:
    return pa.table({"id": list(ids), "content": [f"content of {i}" for i in ids]})


def segments(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir())} if directory.is_dir() else {}


@contextlib.contextmanager
def cells_refused(core: Memesh) -> Iterator[list[int]]:
    """Inside the block every scene shard's cells table refuses its commits, as a storage outage would; yields
    the list of refused commits (one entry each), so a test can wait for the first instead of sleeping."""
    real = {id(shard): shard._cells.write for shard in _shards(core)}
    refused: list[int] = []

    async def refusing(*args: object) -> None:
        refused.append(1)
        await _broken(*args)

    for shard in _shards(core):
        shard._cells.write = refusing
    try:
        yield refused
    finally:
        for shard in _shards(core):
            shard._cells.write = real[id(shard)]


async def all_committed(core: Memesh) -> None:
    """Until no journaled write waits for its table (``memesh_write_journal_pending`` 0); fails after 60 s."""
    for _ in range(600):
        if (await core.health())["journal_pending"] == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("journaled writes still wait for their table after 60 s")


def test_a_journal_reads_back_its_records_in_order_and_ignores_a_torn_last_one(tmp_path: Path) -> None:
    journal = WriteJournal(tmp_path, "scene_shard_0", fsync=True)
    for n in range(3):
        journal.append(rows(f"a{n}", f"b{n}"))
    journal.close()
    (path,) = tmp_path.iterdir()
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 5])  # a crash in the middle of a fourth append
    again = WriteJournal(tmp_path, "scene_shard_0", fsync=False).read()
    assert again is not None and again.column("id").to_pylist() == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert WriteJournal(tmp_path, "scene_shard_1", fsync=False).read() is None  # another shard's journal


def test_a_segment_goes_once_every_record_in_it_is_committed(tmp_path: Path) -> None:
    journal = WriteJournal(tmp_path, "scene_shard_0", fsync=False)
    first, second = journal.append(rows("a")), journal.append(rows("b"))
    journal.release(first)
    (size,) = segments(tmp_path).values()
    assert size > 0  # "b" is not committed yet: the segment holds it
    journal.release(second)
    assert list(segments(tmp_path).values()) == [0]  # the open segment is emptied in place
    third = journal.append(rows("c"))
    journal.rotate()
    fourth = journal.append(rows("d"))
    assert len(segments(tmp_path)) == 2
    journal.release(third)
    assert len(segments(tmp_path)) == 1  # the older segment, all committed, is deleted
    journal.release(fourth)
    assert journal.read() is None and journal.outstanding == 0


def test_a_zero_filled_tail_is_torn_and_a_damaged_segment_is_kept_aside(tmp_path: Path) -> None:
    journal = WriteJournal(tmp_path, "scene_shard_0", fsync=False)
    journal.append(rows("a"))
    journal.close()
    (path,) = tmp_path.iterdir()
    path.write_bytes(path.read_bytes() + bytes(4096))  # what a machine crash can leave past the last record
    again = WriteJournal(tmp_path, "scene_shard_0", fsync=False)
    assert again.read() is not None and again.read().column("id").to_pylist() == ["a"]  # type: ignore[union-attr]
    again.clear()
    assert segments(tmp_path) == {}  # a torn tail is no damage: the segment goes

    journal = WriteJournal(tmp_path, "scene_shard_0", fsync=False)
    for name in ("b", "c"):
        journal.append(rows(name))
    journal.close()
    (path,) = tmp_path.iterdir()
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF  # a flipped byte in the first record, a whole record after it
    path.write_bytes(bytes(data))
    damaged = WriteJournal(tmp_path, "scene_shard_0", fsync=False)
    found = damaged.read()
    assert found is not None and found.column("id").to_pylist() == ["c"]  # read past the damage
    damaged.clear()
    assert list(segments(tmp_path)) == [path.name + ".damaged"]  # kept for an operator, never deleted
    assert damaged.damaged_files() == [tmp_path / (path.name + ".damaged")]

    journal = WriteJournal(tmp_path, "scene_shard_0", fsync=False)  # numbered above the one kept aside
    journal.append(rows("d"))
    journal.close()
    (last,) = [p for p in tmp_path.iterdir() if p.name.endswith(".wal")]
    assert last.name != path.name
    data = bytearray(last.read_bytes())
    data[-3] ^= 0xFF  # a bit flipped in the last record, whole in length: damage, not an append cut short
    last.write_bytes(bytes(data))
    again = WriteJournal(tmp_path, "scene_shard_0", fsync=False)
    assert again.read() is None
    again.clear()
    assert sorted(segments(tmp_path)) == sorted([path.name + ".damaged", last.name + ".damaged"])


def test_an_append_that_fails_after_its_bytes_are_written_is_cut_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = WriteJournal(tmp_path, "scene_shard_0", fsync=True)
    journal.append(rows("kept"))

    def failing(_: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("actors.write_journal.os.fsync", failing)
    with pytest.raises(StorageUnavailable):
        journal.append(rows("refused"))  # its write is rolled back and answered 503: it must never be replayed
    monkeypatch.undo()
    journal.close()
    again = WriteJournal(tmp_path, "scene_shard_0", fsync=False).read()
    assert again is not None and again.column("id").to_pylist() == ["kept"]


async def test_a_journaled_write_waits_for_storage_within_a_bound() -> None:
    async def refuse(_: list[object]) -> None:
        raise StorageUnavailable("storage failed during a commit")

    with TemporaryDirectory() as directory:
        committer: GroupCommitter[object] = GroupCommitter(refuse, 0.0, 100)
        behind = CommitBehind(WriteJournal(Path(directory), "p", False), committer, Background("test"), "test", 0.0, 2)
        behind.accept(rows("a"), ["a"])
        behind.accept(rows("b"), ["b"])
        assert behind.holds("a") and behind.outstanding == 2
        with pytest.raises(StorageUnavailable, match="waiting for storage"):  # no journal without end
            behind.accept(rows("c"), ["c"])
        assert not behind.holds("c")
        behind.close()


async def test_journaled_writes_under_load_share_commits_one_window_apart() -> None:
    """A commit costs the same CPU for one row or sixty-four: under load, the records accepted within a window
    go in one commit (the first after ``delay_s``, the next ``window_s`` after it began), and each leaves the
    journal once its commit landed; a lone write later is committed ``delay_s`` after it, as before."""
    commits: list[list[object]] = []

    async def commit(items: list[object]) -> None:
        commits.append(items)

    with TemporaryDirectory() as directory:
        committer: GroupCommitter[object] = GroupCommitter(commit, 0.0, 1000)
        behind = CommitBehind(
            WriteJournal(Path(directory), "p", False), committer, Background("test"), "test", 0.01, 100, window_s=0.3
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        for n in range(40):  # 40 writes over about 0.4 s
            behind.accept(rows(f"w{n}"), [f"w{n}"])
            await asyncio.sleep(0.01)
        while behind.outstanding:
            await asyncio.sleep(0.01)
            assert loop.time() - started < 5
        assert [item for batch in commits for item in batch] == [f"w{n}" for n in range(40)]
        assert len(commits) <= 3, [len(batch) for batch in commits]  # not forty
        await asyncio.sleep(0.4)
        commits.clear()
        lone = loop.time()
        behind.accept(rows("alone"), ["alone"])
        for _ in range(100):
            if not behind.outstanding:
                break
            await asyncio.sleep(0.005)
        assert commits == [["alone"]] and loop.time() - lone < 0.2
        behind.close()


async def test_a_replay_fills_a_column_added_since_the_journal_was_written(tmp_path: Path) -> None:
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance")))
    cells = await store.keyed("scene_shard_0_cells", cell_schema(DIMS), "id", identity="id")
    stored = await cells.load()
    journal = WriteJournal(tmp_path / "journal", "scene_shard_0", fsync=False)
    journal.append(cells_to_arrow([_cell(1, normalize(np.ones(DIMS)))], DIMS).drop_columns(["session_id"]))
    replayed = await replay_journal(journal, cells, stored)
    assert replayed.num_rows == 1 and replayed.column("session_id").to_pylist() == [None]
    assert (await cells.load()).column("id").to_pylist() == [_cell(1, np.ones(DIMS)).id]


async def test_a_write_is_acknowledged_on_the_journal_while_the_table_refuses_every_commit(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = make_core()
    writer, _ = await agent(core)
    await core.memory.write_cells(writer, [NewCell("warm the tables up", CellType.FACT)])
    for shard in _shards(core):
        shard._cells.write = _broken
    written = await core.memory.write_cells(writer, [NewCell(f"lighthouse keeper log {n}", CellType.FACT) for n in range(3)])
    (acked,) = await core.memory.write_cells(writer, [NewCell("the lighthouse lamp was relit", CellType.FACT)])
    assert (await core.cells.get(writer, acked.id)).content == "the lighthouse lamp was relit"  # served from memory
    owner = next(shard for shard in _shards(core) if acked.id in shard.partition.cells)
    assert acked.id not in owner._cells and owner._behind.outstanding > 0  # no row in the table
    assert (await core.health())["journal_pending"] >= 2  # memesh_write_journal_pending shows it
    assert grep(tmp_path / "data" / "lance" / JOURNAL_DIR, "the lighthouse lamp was relit")
    await core.close()  # the table still refuses: the rows stay journaled, and the close says so

    core = make_core()  # the next start commits them at load
    try:
        for cell in [*written, acked]:
            assert (await core.cells.get(writer, cell.id)).content == cell.content
        assert all(size == 0 for size in segments(tmp_path / "data" / "lance" / JOURNAL_DIR).values())
        owner = next(shard for shard in _shards(core) if acked.id in shard.partition.cells)
        assert acked.id in owner._cells  # in the table now
    finally:
        await core.close()


async def test_a_journaled_write_whose_commit_failed_lands_once_storage_answers_again(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = make_core()
    try:
        writer, _ = await agent(core)
        await core.memory.write_cells(writer, [NewCell("warm the tables up", CellType.FACT)])
        await all_committed(core)
        with cells_refused(core) as refused:
            (cell,) = await core.memory.write_cells(writer, [NewCell("the ferry timetable changed", CellType.FACT)])
            for _ in range(300):  # its commit fails behind the answer (bounded: 30 s)
                if refused:
                    break
                await asyncio.sleep(0.1)
            assert refused, "the commit behind the answer was never tried"
            assert (await core.health())["journal_pending"] == 1
        await all_committed(core)  # no other write comes: the retry alone commits it (0.5 s, then 1 s, ...)
        owner = next(shard for shard in _shards(core) if cell.id in shard.partition.cells)
        assert cell.id in owner._cells and (await core.health())["journal_pending"] == 0
        assert grep(tmp_path / "data" / "lance" / JOURNAL_DIR, "ferry timetable") == []
    finally:
        await core.close()


async def test_an_erase_leaves_no_byte_of_the_cell_in_the_journal(make_core: Callable[..., Memesh], tmp_path: Path) -> None:
    core = make_core()
    try:
        writer, _ = await agent(core)
        await core.memory.write_cells(writer, [NewCell("warm the tables up", CellType.FACT)])
        with cells_refused(core):
            (secret,) = await core.memory.write_cells(writer, [NewCell("the vault code is quokka-7731", CellType.FACT)])
            await core.memory.write_cells(writer, [NewCell("a note that stays", CellType.FACT)])
            assert grep(tmp_path / "data", "quokka-7731")
            scope = parse_scope("node", secret.id, None)
            erase = asyncio.create_task(core.data.erase(T1_ADMIN, scope, f"node:{secret.id}", dry_run=False))
            await asyncio.sleep(1.0)  # it cannot empty the journal while the table refuses: it retries
            assert not erase.done() and grep(tmp_path / "data" / "lance" / JOURNAL_DIR, "quokka-7731")
        assert (await asyncio.wait_for(erase, 30)).digest  # the retry completes and certifies
        assert grep(tmp_path / "data", "quokka-7731") == []
    finally:
        await core.close()
    core = make_core()
    try:
        held = {c.content for shard in _shards(core) for c in (await shard._ready()).cells.values()}
        assert held == {"warm the tables up", "a note that stays"}  # the erased cell came back from nowhere
    finally:
        await core.close()


async def test_an_erase_waits_while_a_damaged_journal_segment_may_hold_the_cell(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = make_core()
    try:
        writer, _ = await agent(core)
        (cell,) = await core.memory.write_cells(writer, [NewCell("a lighthouse on the reef", CellType.FACT)])
        owner = next(shard for shard in _shards(core) if cell.id in shard.partition.cells)
        kept = tmp_path / "data" / "lance" / JOURNAL_DIR / f"{owner._behind.journal.prefix}.1.wal.damaged"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(b"what a load could not read")  # as a load leaves a segment damaged before its end
        scope = parse_scope("node", cell.id, None)
        erase = asyncio.create_task(core.data.erase(T1_ADMIN, scope, f"node:{cell.id}", dry_run=False))
        await asyncio.sleep(1.0)
        assert not erase.done()  # no certificate while a file the erase cannot read may hold the cell
        kept.unlink()  # the operator's part
        assert (await asyncio.wait_for(erase, 30)).digest
    finally:
        await core.close()


async def test_a_start_that_moves_partitions_commits_the_journals_before_it_reads_the_tables(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = await started(make_core, tmp_path)
    writer, _ = await agent(core)
    for shard in _shards(core):
        await shard._ready()
        shard._cells.write = _broken
    written = {}
    for n in range(24):  # 24 projects: some of them move to the new shards
        (cell,) = await core.memory.write_cells(writer, [NewCell(f"tide table {n}", CellType.FACT, project_id=f"harbour-{n}")])
        written[cell.id] = cell.content
    await core.close()
    assert grep(tmp_path / "data" / "lance" / JOURNAL_DIR, "tide table 17")

    grown = await started(make_core, tmp_path, scene_shards=5)
    try:
        (move,) = [m for m in grown.partitions.moves if m.kind == "scene_shard"]
        assert move.rows > 0
        for cell_id, content in written.items():
            assert (await grown.cells.get(writer, cell_id)).content == content
    finally:
        await grown.close()
    await assert_every_row_at_its_owner(tmp_path / "data")  # each journaled row went to its partition's owner

"""The write journal: a scene shard acknowledges a write once its cell rows are in a local append-only
file, and an inbox shard makes a delivery visible once its row is, and each commits them to LanceDB
behind (``storage.write_journal``, local storage only).

A LanceDB commit of one row costs 5 to 14 ms on the machines we measured; an append to a file costs
microseconds (and an ``fsync`` well under a millisecond when ``storage.fsync`` asks for one), so a
write no longer waits for the table, nor a listener for its delivery's.

Guarantees of :class:`WriteJournal`:
- ``append`` returns only once the record is in the file (the OS holds it, so a killed process loses
  nothing; with ``fsync`` the disk holds it, so a machine crash loses nothing either).
- Records (``actors.journal_records``) are checksummed. ``read`` returns every whole record in append
  order: a torn end of the newest segment (a crash mid-append, or a zero-filled tail: never
  acknowledged) is ignored; damage anywhere else is read past (the next whole record is found by a
  forward scan), logged as an error with its byte range, and the segment is kept aside
  (``<name>.damaged``) by ``clear``, never deleted; an erase on the shard is refused while one is there
  (it may hold an acknowledged row). A failed append is cut from the file before the write is refused.
- Records are only ever creations of rows: a scene shard's new cells, or an inbox shard's new deliveries
  (:func:`journaled_table` names the table of each journal). A replay (:func:`replay_journal`) inserts
  the rows whose key the table does not hold and ignores the rest, so a replay after later changes (a
  tombstone, an access time, a reembed, all committed to the table directly) never writes an older row
  over a newer one. Whatever removes rows from the table must empty the journal of them first
  (``SceneShard.erase_cells``, ``InboxShard.erase`` and the inbox's retention settle the journal
  before they delete), so a replay never brings a removed row back.
- A segment file is deleted once every record in it is committed (the open one is emptied in place once
  its own records are), so the journal holds what the tables do not yet and, until its segment goes,
  what they took since; after ``CommitBehind.settle`` no byte of an erased cell is left in it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from actors.file_sync import local_path
from actors.journal_records import encode, read_segment
from actors.schemas import DELIVERY_SCHEMA, cell_schema
from actors.storage import KeyedTable, LanceStore, RowTable, StorageConfig, storage_errors
from mesh.errors import StorageUnavailable

log = logging.getLogger(__name__)

SEGMENT_BYTES = 4 << 20  # a segment this large takes no more records: it goes once they are committed
JOURNAL_DIR = "_journal"


def journal_dir(database: Path) -> Path:
    """Where the journals of a local database live (beside its tables, not a table itself)."""
    return database / JOURNAL_DIR


def shard_journal(storage: StorageConfig, prefix: str) -> WriteJournal | None:
    """The journal of the tables ``prefix`` on a local database (None on an object store: another machine
    may load the shard, and it would not see this file). With ``write_journal`` off it takes no appends,
    but a load still replays what an earlier start journaled."""
    database = local_path(storage.uri)
    if database is None:
        return None
    return WriteJournal(journal_dir(database), prefix, storage.fsync, storage.write_journal)


DELIVERIES = "_deliveries"  # an inbox shard's journal is named after its deliveries table


def journaled_table(prefix: str, dims: int) -> tuple[str, pa.Schema, str]:
    """The table a journal's records belong to, its schema and its key: a scene shard's journal is named by
    its tables' prefix (the records are cells), an inbox shard's by its deliveries table."""
    if prefix.endswith(DELIVERIES):
        return prefix, DELIVERY_SCHEMA, "delivery_id"
    return f"{prefix}_cells", cell_schema(dims), "id"


async def replay_journals(store: LanceStore, storage: StorageConfig, dims: int) -> int:
    """Commit every journal under the database to its table; returns the rows committed. Only while no
    partitioned actor runs (a start that resizes or sweeps reads the tables directly, and a moved partition's
    rows must move with the rest)."""
    database = local_path(storage.uri)
    directory = journal_dir(database) if database is not None else None
    if directory is None or not directory.is_dir():
        return 0
    replayed = 0
    with storage_errors("reading the write journals"):
        prefixes = sorted({p.name.split(".")[0] for p in directory.iterdir() if p.name.endswith(".wal")})
    for prefix in prefixes:
        name, schema, key = journaled_table(prefix, dims)
        table = await store.table(name, schema, identity=key)
        stored = await table.load()
        journal = WriteJournal(directory, prefix, storage.fsync)
        replayed += (await replay_journal(journal, table, stored)).num_rows - stored.num_rows
    return replayed


class WriteJournal:
    """The journal of one table prefix: segment files ``<prefix>.<n>.wal`` under ``directory``."""

    def __init__(self, directory: Path, prefix: str, fsync: bool, enabled: bool = True) -> None:
        self.enabled = enabled  # takes appends (``storage.write_journal``); a replay reads it either way
        self._directory = directory
        self._prefix = prefix
        self._fsync = fsync
        self._segment = 0  # the open (or last) segment's number: a new one is above every file's
        self._fd: int | None = None
        self._size = 0
        self._live: dict[int, int] = {}  # record number -> its segment
        self._counts: dict[int, int] = {}  # segment -> records in it not yet committed
        self._next = 0
        self._damaged: set[Path] = set()

    def _segments(self, damaged: bool = False) -> list[tuple[int, Path]]:
        """The live segments in order (with ``damaged``, also those kept aside)."""
        suffix = r"\.wal(\.damaged(\.\d+)?)?" if damaged else r"\.wal"
        pattern = re.compile(re.escape(self._prefix) + r"\.(\d+)" + suffix)
        if not self._directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self._directory.iterdir() if (m := pattern.fullmatch(p.name))]
        return sorted(found)

    def damaged_files(self) -> list[Path]:
        """Segments kept aside as damaged: they may hold acknowledged rows no replay could read."""
        return [p for _, p in self._segments(damaged=True) if not p.name.endswith(".wal")]

    def _path(self, segment: int) -> Path:
        return self._directory / f"{self._prefix}.{segment}.wal"

    def read(self) -> pa.Table | None:
        """Every whole record of every segment, in order, as one table (None when there is none); see the
        module's guarantees for torn and damaged bytes."""
        tables: list[pa.Table] = []
        segments = self._segments()
        for n, path in segments:
            found = read_segment(path.read_bytes(), newest=n == segments[-1][0])
            tables += found.tables
            if found.torn:
                log.warning("write journal %s: a torn last append ignored (never acknowledged)", path)
            if found.damaged:
                self._damaged.add(path)
                log.error(
                    "write journal %s: damaged bytes %s (%d whole records read); the file is kept as %s.damaged: "
                    "an acknowledged write may have been there, and erases on this shard wait until an operator removes it",
                    path,
                    found.bad,
                    len(found.tables),
                    path.name,
                )
        return pa.concat_tables(tables, promote_options="default") if tables else None

    def append(self, rows: pa.Table) -> int:
        """Write ``rows`` as one record; returns its number, for ``release``. Raises StorageUnavailable
        when the file cannot take it (nothing was acknowledged)."""
        record = encode(rows)
        try:
            if self._fd is None or self._size >= SEGMENT_BYTES:
                self._open_next()
            assert self._fd is not None
            written = os.write(self._fd, record)
            if written != len(record):
                raise OSError(f"short write ({written} of {len(record)} bytes)")
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            log.error("write journal %s: append failed: %s", self._prefix, exc)
            self._cut_back()
            raise StorageUnavailable("storage failed during a journal append") from exc
        self._size += len(record)
        number, self._next = self._next, self._next + 1
        self._live[number] = self._segment
        self._counts[self._segment] = self._counts.get(self._segment, 0) + 1
        return number

    def _cut_back(self) -> None:
        """After a failed append: the record, whole or not, must not be replayed (its write is rolled back and
        refused), so the segment is cut back to its acknowledged records; then the next append opens a new one."""
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError as exc:  # the refused record may come back at a replay; say so loudly
                log.error("write journal %s: a refused write could not be cut from %s: %s", self._prefix, self._segment, exc)
        self._close_fd()

    def _open_next(self) -> None:
        self._close_fd()
        self._directory.mkdir(parents=True, exist_ok=True)
        self._segment = max([self._segment, *(n for n, _ in self._segments(damaged=True))]) + 1
        # O_EXCL: a segment is only ever appended to by the instance that made it
        self._fd = os.open(self._path(self._segment), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._size = 0
        self._counts.setdefault(self._segment, 0)
        if self._fsync:  # the new file's name is durable before a record in it is acknowledged
            directory = os.open(self._directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rotate(self) -> None:
        """Send the next append to a new segment, so that what is journaled now can be dropped apart from it;
        drop the segments with nothing left to commit. Raises StorageUnavailable when one cannot be removed."""
        self._close_fd()
        try:
            self._drop_committed()
        except OSError as exc:
            raise StorageUnavailable("storage failed removing a committed journal segment") from exc

    @property
    def outstanding(self) -> int:
        """Records appended and not yet released."""
        return len(self._live)

    def release(self, number: int) -> None:
        """Record ``number`` is committed to its table: drop every segment left with nothing to commit."""
        segment = self._live.pop(number, None)
        if segment is None:
            return
        self._counts[segment] -= 1
        try:
            self._drop_committed()
        except OSError as exc:  # the rows are committed; the file goes at the next rotate (an erase's) or load
            log.warning("write journal %s: a committed segment stays for now: %s", self._prefix, exc)

    def _drop_committed(self) -> None:
        for segment in [s for s, n in self._counts.items() if n == 0]:
            if segment == self._segment and self._fd is not None:
                if self._size:  # the open segment: emptied in place, it takes the next appends
                    os.ftruncate(self._fd, 0)
                    self._size = 0
                continue
            self._path(segment).unlink(missing_ok=True)
            del self._counts[segment]

    def clear(self) -> None:
        """Delete every segment (after a replay committed them all); a damaged one is renamed aside instead."""
        self._close_fd()
        for _, path in self._segments():
            if path in self._damaged:
                aside, k = path.with_name(path.name + ".damaged"), 0
                while aside.exists():  # never over an earlier one
                    k += 1
                    aside = path.with_name(f"{path.name}.damaged.{k}")
                path.rename(aside)
            else:
                path.unlink(missing_ok=True)
        self._damaged.clear()
        self._live.clear()
        self._counts.clear()

    def close(self) -> None:
        self._close_fd()

    @property
    def prefix(self) -> str:
        return self._prefix


async def replay_journal(journal: WriteJournal, table: KeyedTable | RowTable, stored: pa.Table) -> pa.Table:
    """Commit the journaled rows ``table`` (whose rows are ``stored``, just loaded) does not hold, then
    empty the journal; returns ``stored`` with them. A row the table holds is newer or the same. A keyed
    table is written through (so it learns the keys); a row table by its identity, appended."""
    with storage_errors(f"replay of the write journal {journal.prefix}"):
        return await _replay(journal, table, stored)


async def _replay(journal: WriteJournal, table: KeyedTable | RowTable, stored: pa.Table) -> pa.Table:
    journaled = journal.read()
    if journaled is None:
        journal.clear()
        return stored
    key = table.key if isinstance(table, KeyedTable) else table.identity
    assert key is not None, "a journaled table has a key"
    held = pa.array(stored.column(key).to_pylist() if stored.num_rows else [], type=pa.string())
    absent = journaled.filter(pc.invert(pc.is_in(journaled.column(key), value_set=held)))
    if absent.num_rows:  # a column added since the journal was written (nullable, as every new one) is null
        names = set(absent.schema.names)
        columns = [absent.column(f.name) if f.name in names else pa.nulls(absent.num_rows, f.type) for f in stored.schema]
        absent = pa.Table.from_arrays(columns, names=stored.schema.names).cast(stored.schema)
        await (table.write(absent) if isinstance(table, KeyedTable) else table.append(absent))
        log.info("write journal %s: %d acknowledged rows committed at load", journal.prefix, absent.num_rows)
    journal.clear()
    return pa.concat_tables([stored, absent]) if absent.num_rows else stored

"""LanceDB access: the only module that talks to the storage driver.

Guarantees:
- Every LanceDB or filesystem failure surfaces as
  :class:`mesh.errors.StorageUnavailable` (translated here, nowhere else).
- A table has one writer, the actor that owns it, and its mutations run one at
  a time (a per-table lock), so a multi-step rewrite is never interleaved with
  a group commit of the same table.
- ``GroupCommitter`` turns many small writes into one append, and each
  ``submit`` returns only after the batch holding it has committed (an
  acknowledged write is durable). With ``StorageConfig.fsync`` a commit also
  waits for the file system to have the bytes on stable storage (``syncfs``),
  so a 2xx survives a machine crash, not only a process crash.
- Tables are compacted in the background every ``optimize_every`` commits so
  versions and fragments do not pile up.
- ``RowTable.erase_rows`` leaves no byte of a removed or replaced row in any
  data file: LanceDB deletes are deletion vectors, so every fragment holding
  such a row is rewritten without it, and every older version is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import warnings
from collections.abc import Awaitable, Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from mesh.errors import ConfigInvalid, MemeshError, StorageUnavailable

log = logging.getLogger(__name__)

DELETE_CHUNK = 2_000  # ids per ``IN (...)`` predicate


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """How an actor stores its tables (``storage.*`` settings), shared by every actor kind.

    ``fsync``: after each commit, flush the file system holding a local
    database to stable storage before answering (costs latency; see
    docs/storage.md for the figures).
    """

    uri: str
    commit_window_s: float = 0.002
    optimize_every: int = 64
    cache_mb: int = 32
    fsync: bool = False
    keep_versions_s: float = 30.0  # older table versions (and their files) are dropped at compaction after this


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Translate driver failures into the one storage error."""
    try:
        yield
    except MemeshError:
        raise
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        log.error("storage failure during %s: %s", what, exc)
        raise StorageUnavailable(f"storage failed during {what}") from exc


def _local_path(uri: str) -> Path | None:
    """The directory of a database on a local file system (None for an object store URI)."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    return Path(uri.removeprefix("file://"))


_libc: Any = None


def sync_file_system(path: Path) -> None:
    """Flush every dirty page of the file system holding ``path`` to stable storage (Linux
    ``syncfs``; ``os.sync`` elsewhere). Blocking: call it from a worker thread."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    target = path if path.exists() else path.parent
    fd = os.open(target, os.O_RDONLY)
    try:
        if getattr(_libc, "syncfs", None) is None or _libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _version_number(entry: Any) -> int:
    return int(entry["version"] if isinstance(entry, dict) else entry.version)


def in_clause(column: str, values: Collection[str]) -> str:
    """``column IN ('a','b')`` with every value quoted (single quotes doubled)."""
    return f"{column} IN (" + ",".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def _chunks(values: list[str], size: int = DELETE_CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class LanceStore:
    """A connection to the LanceDB database at ``uri`` (a path or any URI LanceDB accepts)."""

    def __init__(self, connection: Any, config: StorageConfig) -> None:
        self._db = connection
        self._config = config
        local = _local_path(config.uri)
        self._sync_path = local if config.fsync and local is not None else None

    @classmethod
    async def open(cls, config: StorageConfig) -> LanceStore:
        """Connect with bounded caches: LanceDB's default session grows with every
        committed version (about 180 MB more over 3,000 single-row commits here),
        and memesh searches its own in-memory vectors, not LanceDB indexes."""
        import lancedb  # imported here: the head process never opens a table

        cache_bytes = config.cache_mb << 20
        with storage_errors("connect"):
            # Single writer per table: this process sees its own commits at once;
            # a zero interval also makes re-opened handles check for the latest version.
            session = lancedb.Session(index_cache_size_bytes=cache_bytes, metadata_cache_size_bytes=cache_bytes)
            return cls(await lancedb.connect_async(config.uri, read_consistency_interval=timedelta(0), session=session), config)

    async def table(self, name: str, schema: pa.Schema, identity: str | None = None) -> RowTable:
        """Open ``name``, creating it empty with ``schema`` when absent. A stored table that lacks
        nullable columns of ``schema`` gets them (null-filled): data written by an older version
        opens. Any other difference is refused (ConfigInvalid) rather than guessed at.

        ``identity`` names the column no two rows share; only a table that has one can be
        rewritten by ``erase_rows``, and its ``load`` returns each identity once."""
        if identity is not None and identity not in schema.names:
            raise ConfigInvalid(f"table {name}: identity column {identity} is not in its schema")
        with storage_errors(f"open {name}"):
            try:
                table = await self._db.open_table(name)
            except ValueError:  # not found
                table = await self._db.create_table(name, schema=schema, exist_ok=True)
            stored: pa.Schema = await table.schema()
            missing = [f for f in schema if f.name not in stored.names]
            if any(not f.nullable for f in missing):
                raise ConfigInvalid(f"table {name} lacks required columns {[f.name for f in missing if not f.nullable]}")
            if missing:
                log.warning("table %s: adding columns %s", name, [f.name for f in missing])
                await table.add_columns(missing)
            return RowTable(name, table, schema, self._sync_path, self._config.keep_versions_s, identity)


class RowTable:
    """One LanceDB table with the few operations the actors use; mutations are serialised."""

    def __init__(
        self,
        name: str,
        table: Any,
        schema: pa.Schema,
        sync_path: Path | None = None,
        keep_versions_s: float = 30.0,
        identity: str | None = None,
    ) -> None:
        self.name = name
        self.identity = identity
        self._keep = timedelta(seconds=keep_versions_s)
        self._table = table
        self.schema = schema
        self._commits = 0
        self._lock = asyncio.Lock()
        self._sync_path = sync_path

    async def _synced(self) -> None:
        self._commits += 1
        if self._sync_path is not None:
            with storage_errors(f"sync {self.name}"):
                await asyncio.to_thread(sync_file_system, self._sync_path)

    async def read_all(self) -> pa.Table:
        with storage_errors(f"read {self.name}"):
            result: pa.Table = await self._table.to_arrow()
            return result.select(self.schema.names)

    async def load(self) -> pa.Table:
        """Every row, for an actor's (re)load. When the latest version cannot be read (a commit torn by
        a machine crash: its manifest is on disk, a data file is not), the newest version that reads is
        restored and an error is logged: what was lost is what that torn commit held, which no caller
        was told was durable when ``storage.fsync`` is on. Raises StorageUnavailable when none reads.

        A table with an ``identity`` yields each identity once (the last row of it): an erase cut
        between its add and its delete leaves two copies until it is resumed."""
        return self._once_each(await self._latest_readable())

    def _once_each(self, rows: pa.Table) -> pa.Table:
        if self.identity is None or rows.num_rows == 0:
            return rows
        column = rows.column(self.identity)
        if pc.count_distinct(column).as_py() == rows.num_rows:
            return rows
        last = {k: i for i, k in enumerate(column.to_pylist())}
        return rows.take(sorted(last.values()))

    async def _latest_readable(self) -> pa.Table:
        try:
            return await self.read_all()
        except StorageUnavailable:
            pass
        async with self._lock:
            with storage_errors(f"recover {self.name}"):
                versions = sorted((_version_number(v) for v in await self._table.list_versions()), reverse=True)
                for version in versions[1:]:
                    try:
                        await self._table.checkout(version)
                        rows: pa.Table = await self._table.to_arrow()
                    except (OSError, RuntimeError, ValueError, pa.ArrowException):
                        continue
                    await self._table.restore(version)
                    await self._table.checkout_latest()
                    log.error("table %s: its latest version could not be read; restored version %d", self.name, version)
                    return rows.select(self.schema.names)
        raise StorageUnavailable(f"no version of {self.name} can be read")

    async def count(self) -> int:
        with storage_errors(f"count {self.name}"):
            return int(await self._table.count_rows())

    async def append(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        async with self._lock:
            with storage_errors(f"append to {self.name}"):
                await self._table.add(rows)
            await self._synced()

    async def upsert(self, rows: pa.Table, key: str = "id") -> None:
        """Insert or replace whole rows by ``key``."""
        if rows.num_rows == 0:
            return
        async with self._lock:
            with storage_errors(f"upsert into {self.name}"):
                await self._table.merge_insert(key).when_matched_update_all().when_not_matched_insert_all().execute(rows)
            await self._synced()

    async def delete_where_in(self, column: str, values: Collection[str]) -> None:
        """Delete the rows whose ``column`` is one of ``values`` (sent in chunks). The bytes of the
        rows stay in the data files until compaction: use ``erase_rows`` for an erasure."""
        if not values:
            return
        async with self._lock:
            for chunk in _chunks(sorted(values)):
                with storage_errors(f"delete from {self.name}"):
                    await self._table.delete(in_clause(column, chunk))
            await self._synced()

    async def erase_rows(self, key: str, remove: Collection[str], replace: pa.Table | None = None) -> None:
        """Delete the rows whose ``key`` is in ``remove`` and replace the rows of ``replace`` (by
        ``key``), leaving no byte of any old row in the table's files.

        Every fragment holding a removed or replaced row is rewritten: its other
        rows are read and added again (with ``replace``) first, then the whole
        fragment is deleted (LanceDB drops a fragment whose rows are all
        deleted), then every older version with its files is dropped. Costs a
        read and a write of the affected fragments.

        Crash-safe and idempotent: a row of another record is never absent
        (added before its old fragment goes), and a repeat after a crash between
        the add and the delete finds those rows already outside the fragments it
        rewrites and does not add them twice (rows are told apart by the table's
        ``identity``, which it must have).
        """
        identity = self.identity
        if identity is None:
            raise ConfigInvalid(f"table {self.name} has no identity column: erase_rows cannot tell its rows apart")
        replacing = set(replace.column(key).to_pylist()) if replace is not None and replace.num_rows else set()
        keys = set(remove) | replacing
        if not keys:
            return
        async with self._lock:
            with storage_errors(f"erase from {self.name}"):
                fragments: set[int] = set()
                for chunk in _chunks(sorted(keys)):
                    found = await self._table.query().with_row_id().where(in_clause(key, chunk)).select([key]).to_arrow()
                    fragments.update(row_id >> 32 for row_id in found.column("_rowid").to_pylist())
                within = " OR ".join(f"(_rowid >= {f << 32} AND _rowid < {(f + 1) << 32})" for f in sorted(fragments))
                parts: list[pa.Table] = []
                if fragments:
                    held: pa.Table = (await self._table.query().where(within).to_arrow()).select(self.schema.names)
                    survivors = held.filter(pc.invert(pc.is_in(held.column(key), pa.array(sorted(keys)))))
                    parts.append(await self._not_held_elsewhere(identity, survivors, within))
                if replacing and replace is not None:
                    parts.append(replace.select(self.schema.names))
                rows = pa.concat_tables([p.cast(self.schema) for p in parts]) if parts else None
                if rows is not None and rows.num_rows:
                    await self._table.add(rows)
                if fragments:
                    await self._table.delete(within)
                await self._optimize(timedelta(0), delete_unverified=True)
            await self._synced()
        self._commits = 0

    async def _not_held_elsewhere(self, identity: str, rows: pa.Table, within: str) -> pa.Table:
        """``rows`` once per identity, without those a row outside ``within`` already holds."""
        rows = self._once_each(rows)
        if rows.num_rows == 0:
            return rows
        elsewhere: pa.Table = await self._table.query().where(f"NOT ({within})").select([identity]).to_arrow()
        if elsewhere.num_rows == 0:
            return rows
        return rows.filter(pc.invert(pc.is_in(rows.column(identity), elsewhere.column(identity).combine_chunks())))

    async def purge(self) -> None:
        """Compact and drop every older version (after deletes of rows that held no content)."""
        async with self._lock:
            with storage_errors(f"purge {self.name}"):
                await self._optimize(timedelta(0), delete_unverified=False)
            await self._synced()
        self._commits = 0

    async def _optimize(self, older_than: timedelta, delete_unverified: bool) -> None:
        with warnings.catch_warnings():
            # LanceDB warns that readers of older versions would fail: this actor is the table's only reader and writer.
            warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0", category=UserWarning)
            warnings.filterwarnings("ignore", message="optimize.cleanup_older_than=0", category=UserWarning)
            await self._table.optimize(cleanup_older_than=older_than, delete_unverified=delete_unverified)

    async def optimize_if_due(self, every: int) -> bool:
        """Compact and prune old versions once ``every`` commits have accumulated."""
        if self._commits < every:
            return False
        async with self._lock:
            with storage_errors(f"optimize {self.name}"):
                await self._optimize(self._keep, delete_unverified=False)
        self._commits = 0
        return True


T = TypeVar("T")


class LoadOnce:
    """Runs an actor's async loader exactly once, on first use; concurrent callers wait for it.

    (A Ray actor's constructor cannot await, so actors load their tables lazily.)
    A loader that fails leaves nothing marked loaded: the next call tries again.
    """

    def __init__(self, loader: Callable[[], Awaitable[None]]) -> None:
        self._loader = loader
        self._done = False
        self._lock = asyncio.Lock()

    async def __call__(self) -> None:
        if self._done:
            return
        async with self._lock:
            if not self._done:
                await self._loader()
                self._done = True


@dataclass
class _Batch(Generic[T]):
    items: list[T] = field(default_factory=list)
    done: asyncio.Future[None] | None = None


class GroupCommitter(Generic[T]):
    """Collects items for up to ``window_s`` (or until ``max_items``) and writes them with one ``flush``.

    Guarantees:
    - ``submit`` resolves when the flush holding its items has returned, or
      raises what that flush raised; it never hangs (a flush that is
      interrupted fails its batch).
    - One flush runs at a time, so batches reach storage in submission order;
      items submitted during a flush form the next batch.
    - ``flush`` is a barrier: it returns once everything submitted before it
      has been flushed (skipping the window), whatever the outcome. The worker
      is never cancelled: it ends by itself when nothing is pending, and the
      next ``submit`` starts a new one.
    """

    def __init__(self, flush: Callable[[list[T]], Awaitable[None]], window_s: float, max_items: int) -> None:
        self._flush = flush
        self._window_s = window_s
        self._max_items = max_items
        self._pending: _Batch[T] = _Batch()
        self._hurry = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._inflight: asyncio.Future[None] | None = None

    async def submit(self, items: list[T]) -> None:
        if not items:
            return
        batch = self._pending
        if batch.done is None:
            batch.done = asyncio.get_running_loop().create_future()
        batch.items.extend(items)
        done = batch.done
        if len(batch.items) >= self._max_items:
            self._hurry.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())
        await asyncio.shield(done)

    async def _run(self) -> None:
        while self._pending.items:
            if not self._hurry.is_set() and self._window_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), self._window_s)
            self._hurry.clear()
            batch, self._pending = self._pending, _Batch()
            assert batch.done is not None
            self._inflight = batch.done
            try:
                await self._flush(batch.items)
            except Exception as exc:  # noqa: BLE001 - handed to every waiter, never swallowed
                batch.done.set_exception(exc)
            except BaseException:  # cancelled mid-flush (the loop is closing): nobody may wait forever
                batch.done.set_exception(StorageUnavailable("the commit was interrupted"))
                raise
            else:
                batch.done.set_result(None)
            finally:
                self._inflight = None

    async def flush(self) -> None:
        """Wait until everything submitted so far is flushed (a barrier; failures stay with their submitters)."""
        waits = [f for f in (self._inflight, self._pending.done) if f is not None and not f.done()]
        if not waits:
            return
        self._hurry.set()
        await asyncio.gather(*(asyncio.shield(f) for f in waits), return_exceptions=True)

    async def close(self) -> None:
        """Flush what is pending; the committer stays usable (a later submit starts a new worker)."""
        await self.flush()

"""LanceDB access: the only module that talks to the storage driver.

Guarantees:
- Every LanceDB or filesystem failure surfaces as
  :class:`mesh.errors.StorageUnavailable` (translated here, nowhere else).
- A table has one writer, the actor that owns it, and its mutations run one at
  a time (a per-table lock), so a multi-step rewrite is never interleaved with
  a group commit of the same table.
- A write is acknowledged only once committed (``actors.group_commit``
  batches many into one commit). With ``StorageConfig.fsync`` a commit also
  waits for the file system to have the bytes on stable storage (``syncfs``),
  so a 2xx survives a machine crash, not only a process crash.
- Tables are compacted every ``optimize_every`` commits so versions and
  fragments do not pile up; ``KeyedTable`` is the one way records are
  written (append new, upsert committed, delete, erase).
- ``RowTable.erase_rows`` leaves no byte of a removed or replaced row in any
  data file: LanceDB deletes are deletion vectors, so every fragment holding
  such a row is rewritten without it, and every older version is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import warnings
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from actors.file_sync import local_path, sync_file_system
from mesh.errors import ConfigInvalid, MemeshError, StorageUnavailable

log = logging.getLogger(__name__)

DELETE_CHUNK = 2_000  # ids per ``IN (...)`` predicate


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """How an actor stores its tables (``storage.*`` settings), shared by every actor kind. ``fsync``:
    after each commit, flush the file system holding a local database to stable storage before
    answering (costs latency; see docs/storage.md for the figures)."""

    uri: str
    options: dict[str, str] = field(default_factory=dict)  # LanceDB storage options, e.g. an S3 endpoint
    commit_window_s: float = 0.002
    # Soft state (agent nodes, walk marks, inbox trims) is committed at most this often: nobody waits for it,
    # and a crash loses at most this much of it, never an acknowledged write.
    soft_commit_window_s: float = 1.0
    access_commit_window_s: float = 10.0  # recall's access times: whole rows a commit, so a hot cell's once a window
    optimize_every: int = 64
    cache_mb: int = 32
    fsync: bool = False
    keep_versions_s: float = 30.0  # older table versions (and their files) are dropped at compaction after this
    commit_max_rows: int = 1024  # a group commit of records holds at most this many
    write_journal: bool = True  # a local database's scene shards acknowledge writes on a journal (actors.write_journal)


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


def _version_number(entry: Any) -> int:
    return int(entry["version"] if isinstance(entry, dict) else entry.version)


def in_clause(column: str, values: Collection[str]) -> str:
    """``column IN ('a','b')`` with every value quoted (single quotes doubled)."""
    return f"{column} IN (" + ",".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def _chunks(values: list[str], size: int = DELETE_CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


_IMPORT_LOCK = threading.Lock()


def import_lancedb() -> ModuleType:
    """``lancedb``, imported with the pydantic models it defines built on first use (``defer_build``:
    they validate exactly as eagerly built ones; models defined before or after keep the defaults).
    The plain import took 2.9 s of CPU in every storage actor's process, most of it building the REST
    namespace client's models a local or object-store table never uses; this one takes 1.7 s."""
    loaded = sys.modules.get("lancedb")
    if loaded is not None:
        return loaded
    try:
        from pydantic._internal._config import config_defaults
    except ImportError:  # pragma: no cover - a pydantic that moved its defaults
        import lancedb

        return lancedb
    with _IMPORT_LOCK:  # two threads interleaving here could leave the deferral on for the process
        before = config_defaults["defer_build"]
        config_defaults["defer_build"] = True
        try:
            import lancedb
        finally:
            config_defaults["defer_build"] = before
    return lancedb


def warm_up(_actor: object = None) -> bool:
    """Import LanceDB now (it takes seconds: its client models are built at import), so an actor started
    ahead of a partition move does not pay it on its first request (``RayDirectory.prepare_partitions``)."""
    import_lancedb()
    return True


class LanceStore:
    """A connection to the LanceDB database at ``uri`` (a path or any URI LanceDB accepts)."""

    def __init__(self, connection: Any, config: StorageConfig) -> None:
        self._db = connection
        self._config = config
        local = local_path(config.uri)
        self._sync_path = local if config.fsync and local is not None else None

    @classmethod
    async def open(cls, config: StorageConfig) -> LanceStore:
        """Connect with bounded caches: LanceDB's default session grows with every
        committed version (about 180 MB more over 3,000 single-row commits here),
        and memesh searches its own in-memory vectors, not LanceDB indexes."""
        lancedb = import_lancedb()  # imported here: the head process never opens a table

        cache_bytes = config.cache_mb << 20
        with storage_errors("connect"):
            # Single writer per table: this process sees its own commits at once;
            # a zero interval also makes re-opened handles check for the latest version.
            session = lancedb.Session(index_cache_size_bytes=cache_bytes, metadata_cache_size_bytes=cache_bytes)
            connection = await lancedb.connect_async(
                config.uri,
                read_consistency_interval=timedelta(0),
                storage_options=config.options or None,
                session=session,
            )
            return cls(connection, config)

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

    async def table_names(self) -> list[str]:
        """Every table of the database."""
        names: list[str] = []
        token: str | None = None
        with storage_errors("list tables"):
            while True:
                page = await self._db.list_tables(page_token=token, limit=1000)
                names += page.tables
                token = page.page_token
                if not token:
                    return names

    async def drop(self, name: str) -> None:
        """Remove table ``name`` and its files (absent already is fine)."""
        with storage_errors(f"drop {name}"):
            await self._db.drop_table(name, ignore_missing=True)

    async def keyed(self, name: str, schema: pa.Schema, key: str, identity: str | None = None) -> KeyedTable:
        """``table`` as a :class:`KeyedTable` by ``key``, compacted every ``optimize_every`` commits."""
        return KeyedTable(await self.table(name, schema, identity), key, self._config.optimize_every)


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


class KeyedTable:
    """A table of whole records keyed by one column, written the one way every actor writes them.

    ``write`` appends the records whose key has no committed row and upserts the
    others (an append costs a fraction of a merge over the whole table), so a
    key never has two rows from this path; ``delete`` removes rows by key;
    both compact the table every ``StorageConfig.optimize_every`` commits.
    Which keys have a committed row is learnt from ``load`` and kept by every
    mutation made through this object, so the owner must make all of them here.
    """

    def __init__(self, rows: RowTable, key: str, optimize_every: int) -> None:
        if key not in rows.schema.names:
            raise ConfigInvalid(f"table {rows.name}: key column {key} is not in its schema")
        self.rows = rows
        self.key = key
        self._every = optimize_every
        self._stored: set[str] = set()
        self._lock = asyncio.Lock()  # a key's stored-or-not check and its commit are one step

    def __contains__(self, key: object) -> bool:
        """True when ``key`` has a committed row."""
        return key in self._stored

    async def load(self) -> pa.Table:
        """Every stored row (``RowTable.load``); their keys count as committed from now on."""
        rows = await self.rows.load()
        self._stored = set(rows.column(self.key).to_pylist())
        return rows

    async def write(self, rows: pa.Table) -> None:
        """Commit ``rows``: new keys appended, committed ones replaced; of rows sharing a key, the last."""
        if rows.num_rows == 0:
            return
        keys = rows.column(self.key).to_pylist()
        if len(set(keys)) != len(keys):
            last = {k: i for i, k in enumerate(keys)}
            rows = rows.take(sorted(last.values()))
            keys = rows.column(self.key).to_pylist()
        async with self._lock:
            stored = pa.array([k in self._stored for k in keys], type=pa.bool_())
            await self.rows.append(rows.filter(pc.invert(stored)))
            await self.rows.upsert(rows.filter(stored), key=self.key)
            self._stored.update(keys)
        await self.rows.optimize_if_due(self._every)

    async def delete(self, keys: Collection[str]) -> None:
        """Remove the rows of ``keys`` (their bytes stay until compaction: see ``erase``)."""
        async with self._lock:
            gone = [k for k in keys if k in self._stored]
            if not gone:
                return
            await self.rows.delete_where_in(self.key, gone)
            self._stored.difference_update(gone)
        await self.rows.optimize_if_due(self._every)

    async def erase(self, remove: Collection[str], replace: pa.Table | None = None) -> None:
        """``RowTable.erase_rows`` by this table's key: no byte of a removed or replaced row stays."""
        async with self._lock:
            await self.rows.erase_rows(self.key, remove, replace)
            self._stored.difference_update(remove)
            if replace is not None:
                self._stored.update(replace.column(self.key).to_pylist())

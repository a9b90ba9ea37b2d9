"""LanceDB access: the only module that talks to the storage driver.

Guarantees:
- Every LanceDB or filesystem failure surfaces as
  :class:`mesh.errors.StorageUnavailable` (translated here, nowhere else).
- A table has one writer, the actor that owns it; ``GroupCommitter`` turns many
  small writes into one append, and each ``submit`` returns only after the
  batch holding it has committed (an acknowledged write is durable).
- Tables are compacted in the background every ``optimize_every`` commits so
  versions and fragments do not pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

import pyarrow as pa

from mesh.errors import MemeshError, StorageUnavailable

log = logging.getLogger(__name__)


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


class LanceStore:
    """A connection to the LanceDB database at ``uri`` (a path or any URI LanceDB accepts)."""

    def __init__(self, connection: Any) -> None:
        self._db = connection

    @classmethod
    async def open(cls, uri: str, cache_bytes: int = 32 << 20) -> LanceStore:
        """Connect with bounded caches: LanceDB's default session grows with every
        committed version (about 180 MB more over 3,000 single-row commits here),
        and memesh searches its own in-memory vectors, not LanceDB indexes."""
        import lancedb  # imported here: the head process never opens a table

        with storage_errors("connect"):
            # Single writer per table: this process sees its own commits at once;
            # a zero interval also makes re-opened handles check for the latest version.
            session = lancedb.Session(index_cache_size_bytes=cache_bytes, metadata_cache_size_bytes=cache_bytes)
            return cls(await lancedb.connect_async(uri, read_consistency_interval=timedelta(0), session=session))

    async def table(self, name: str, schema: pa.Schema) -> RowTable:
        """Open ``name``, creating it empty with ``schema`` when absent."""
        with storage_errors(f"open {name}"):
            table = await self._db.create_table(name, schema=schema, exist_ok=True)
            return RowTable(name, table, schema)


class RowTable:
    """One LanceDB table with the few operations the actors use."""

    def __init__(self, name: str, table: Any, schema: pa.Schema) -> None:
        self.name = name
        self._table = table
        self.schema = schema
        self._commits = 0

    async def read_all(self) -> pa.Table:
        with storage_errors(f"read {self.name}"):
            result: pa.Table = await self._table.to_arrow()
            return result

    async def count(self) -> int:
        with storage_errors(f"count {self.name}"):
            return int(await self._table.count_rows())

    async def append(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        with storage_errors(f"append to {self.name}"):
            await self._table.add(rows)
        self._commits += 1

    async def upsert(self, rows: pa.Table, key: str = "id") -> None:
        """Insert or replace whole rows by ``key``."""
        if rows.num_rows == 0:
            return
        with storage_errors(f"upsert into {self.name}"):
            await self._table.merge_insert(key).when_matched_update_all().when_not_matched_insert_all().execute(rows)
        self._commits += 1

    async def delete(self, predicate: str) -> None:
        with storage_errors(f"delete from {self.name}"):
            await self._table.delete(predicate)
        self._commits += 1

    async def delete_where_in(self, column: str, values: list[str], chunk: int = 2000) -> None:
        """Delete the rows whose ``column`` is one of ``values`` (quoted; sent in chunks)."""
        for start in range(0, len(values), chunk):
            quoted = ",".join("'" + v.replace("'", "''") + "'" for v in values[start : start + chunk])
            await self.delete(f"{column} IN ({quoted})")

    async def purge(self) -> None:
        """Compact and drop every older version, so deleted rows leave the files too (erasure)."""
        with storage_errors(f"purge {self.name}"), warnings.catch_warnings():
            # LanceDB warns that readers of older versions would fail: this actor is the table's only reader and writer.
            warnings.filterwarnings("ignore", message="optimize.cleanup_older_than=0", category=UserWarning)
            await self._table.optimize(cleanup_older_than=timedelta(0))
        self._commits = 0

    async def optimize_if_due(self, every: int) -> bool:
        """Compact and prune old versions once ``every`` commits have accumulated."""
        if self._commits < every:
            return False
        with storage_errors(f"optimize {self.name}"):
            await self._table.optimize(cleanup_older_than=timedelta(seconds=30))
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

    ``submit`` resolves when the flush holding its items has returned, or
    raises what that flush raised. One flush runs at a time, so batches reach
    storage in submission order; items submitted during a flush form the next
    batch.
    """

    def __init__(self, flush: Callable[[list[T]], Awaitable[None]], window_s: float, max_items: int) -> None:
        self._flush = flush
        self._window_s = window_s
        self._max_items = max_items
        self._pending: _Batch[T] = _Batch()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._inflight: asyncio.Future[None] | None = None

    async def submit(self, items: list[T]) -> None:
        if not items:
            return
        if self._worker is None or self._worker.done():
            self._wake = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._loop())
        batch = self._pending
        if batch.done is None:
            batch.done = asyncio.get_running_loop().create_future()
        batch.items.extend(items)
        done = batch.done
        assert self._wake is not None
        self._wake.set()
        await asyncio.shield(done)

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            if len(self._pending.items) < self._max_items and self._window_s > 0:
                await asyncio.sleep(self._window_s)
            self._wake.clear()
            batch, self._pending = self._pending, _Batch()
            if not batch.items or batch.done is None:
                continue
            self._inflight = batch.done
            try:
                await self._flush(batch.items)
            except Exception as exc:  # noqa: BLE001 - handed to every waiter, never swallowed
                batch.done.set_exception(exc)
            else:
                batch.done.set_result(None)

    async def close(self) -> None:
        """Flush what is pending, wait for the flush under way, then stop the worker."""
        waits = [f for f in (self._inflight, self._pending.done) if f is not None and not f.done()]
        if waits and self._wake is not None:
            self._wake.set()
            await asyncio.gather(*(asyncio.shield(f) for f in waits), return_exceptions=True)
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

"""Writes acknowledged on the write journal, committed to their tables behind the answer.

Guarantees of :class:`CommitBehind`:
- ``accept`` returns once the created cells are journaled (``actors.write_journal``), or raises
  StorageUnavailable and the caller rolls the write back; it never waits for a table commit.
- Every accepted change is handed to the owner's group committer ``delay_s`` after its answer (the
  answer and the walk's first waves go first, and the writes of those milliseconds share the commit),
  or under load when ``window_s`` has passed since the last commit began: one commit carries every
  record accepted meanwhile. A LanceDB commit costs 5 to 11 ms of CPU whatever it holds (1 to 64 rows,
  docs/benchmarks.md), so at a hundred writes a second the commits, not the writes, would fill the
  shard. A record leaves the journal only when the commit holding its changes succeeded. A failed commit is
  logged and retried with backoff (0.5 s doubling to 30 s) until it lands, or by ``settle`` or, failing
  all those, by the next load's replay: an acknowledged write is never lost while its journal file is.
- Bounded: past ``max_pending`` records waiting for their table (storage down or far behind), ``accept``
  refuses new writes with StorageUnavailable (503) instead of journaling without end.
- ``settle`` is the barrier for whoever reads or removes table rows directly (an erase, a reembed, a
  close): when it returns, everything accepted before it is committed and the journal holds none of
  it; it raises StorageUnavailable when a commit fails (the rows stay journaled).
- A record is in at most one commit at a time: a settle that meets the background commit of the same
  record waits for it instead of sending its rows again (a table of appended rows gets each row once).
- After ``close`` nothing is accepted (StorageUnavailable) and nothing more is committed: what is
  journaled then stays for the next load's replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Generic, TypeVar

import pyarrow as pa

from actors.chores import Background
from actors.group_commit import GroupCommitter
from actors.write_journal import WriteJournal
from mesh.errors import StorageUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_PENDING = 10_000  # journaled records waiting for their table, past which writes are refused
RETRY_S = (0.5, 30.0)  # the first and the longest pause between tries of a failed commit


class CommitBehind(Generic[T]):
    def __init__(
        self,
        journal: WriteJournal,
        commit: GroupCommitter[T],
        background: Background,
        owner: str,
        delay_s: float = 0.02,
        max_pending: int = MAX_PENDING,
        key: str = "id",
        window_s: float = 0.2,
    ) -> None:
        self._journal = journal
        self._key = key  # the column that names a journaled row (a cell's id, a delivery's id)
        self._commit = commit
        self._background = background
        self._owner = owner
        self._delay_s = delay_s
        self._window_s = window_s
        self._last_start = float("-inf")  # when the last background commit began (loop time)
        self._due: list[int] = []  # accepted records no background commit has taken yet
        self._ticking = False  # a background commit loop is running (it takes every due record)
        self._max_pending = max_pending
        self._pending: dict[int, tuple[list[str], Sequence[T]]] = {}  # record -> (its rows' keys, what its commit writes)
        self._journaled: set[str] = set()  # keys of the rows of the pending records
        self._failed: set[int] = set()  # records whose commit failed: the retry's
        self._retry: asyncio.Task[None] | None = None
        self._committing: dict[int, asyncio.Future[bool]] = {}  # record -> its commit under way (True: it landed)
        self._closed = False

    @property
    def journal(self) -> WriteJournal:
        return self._journal

    @property
    def outstanding(self) -> int:
        """Journaled records not yet committed to their tables."""
        return len(self._pending)

    def holds(self, key: str) -> bool:
        """True while the row of ``key`` (a cell's id) is acknowledged on the journal and not yet committed."""
        return key in self._journaled

    def check_room(self) -> None:
        """Raise StorageUnavailable while ``max_pending`` journaled writes wait for their table."""
        if len(self._pending) >= self._max_pending:
            raise StorageUnavailable(f"{self._owner}: {len(self._pending)} writes are waiting for storage; retry shortly")

    def accept(self, rows: pa.Table, changes: Sequence[T]) -> None:
        """Journal ``rows`` (the created cells or deliveries), then commit ``changes`` in the background."""
        if self._closed:
            raise StorageUnavailable(f"{self._owner} is closed")
        self.check_room()
        number = self._journal.append(rows)
        ids = rows.column(self._key).to_pylist()
        self._pending[number] = (ids, changes)
        self._journaled.update(ids)
        self._due.append(number)
        if not self._ticking:
            self._ticking = True
            self._background.spawn(self._commit_behind())

    async def _commit_behind(self) -> None:
        """Commit what is due, batch after batch, until nothing is: each batch ``delay_s`` after the first
        record it holds was accepted, and no sooner than ``window_s`` after the previous batch began."""
        try:
            await self._commit_due()
        finally:
            self._ticking = False

    async def _commit_due(self) -> None:
        loop = asyncio.get_running_loop()
        while self._due and not self._closed:
            await asyncio.sleep(max(self._delay_s, self._last_start + self._window_s - loop.time()))
            if self._closed:
                return
            numbers, self._due = self._due, []
            self._last_start = loop.time()
            try:
                await self._committed(numbers)
            except Exception as exc:  # noqa: BLE001 - the rows stay journaled; the retry commits them
                self._failed.update(n for n in numbers if n in self._pending)
                log.warning("%s: %d journaled writes not committed yet (%s)", self._owner, len(numbers), exc)
                if self._retry is None or self._retry.done():
                    self._retry = loop.create_task(self._retrying())

    async def _retrying(self) -> None:
        delay = RETRY_S[0]
        while self._failed and not self._closed:
            await asyncio.sleep(delay)
            numbers, self._failed = sorted(self._failed), set()
            try:
                await self._committed(numbers)
            except Exception as exc:  # noqa: BLE001 - logged; tried again after a longer pause
                self._failed.update(n for n in numbers if n in self._pending)
                delay = min(RETRY_S[1], 2 * delay)
                log.warning(
                    "%s: %d journaled writes still not committed (%s); next try in %.1f s", self._owner, len(numbers), exc, delay
                )
            else:
                delay = RETRY_S[0]

    async def _committed(self, numbers: list[int]) -> None:
        """Commit these records; a record another caller is committing is waited for, not sent again.
        Raises when a commit of any of them failed (they stay pending)."""
        numbers = [n for n in numbers if n in self._pending]
        others = {id(f): f for n in numbers if (f := self._committing.get(n)) is not None}
        mine = [n for n in numbers if n not in self._committing]
        if mine:
            landed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._committing.update(dict.fromkeys(mine, landed))
            try:
                await self._commit.submit([change for n in mine for change in self._pending[n][1]])
                for n in mine:
                    if (done := self._pending.pop(n, None)) is not None:
                        self._journaled.difference_update(done[0])
                        self._journal.release(n)
            finally:
                for n in mine:
                    self._committing.pop(n, None)
                landed.set_result(all(n not in self._pending for n in mine))
        for future in others.values():
            if not await asyncio.shield(future):
                raise StorageUnavailable(f"{self._owner}: a commit of journaled writes failed")

    async def settle(self, purge: bool = False) -> None:
        """Commit everything accepted so far (what failed included) and drop it from the journal. When it
        returns, no commit of those records is still queued (a background one that woke meanwhile
        included). With ``purge`` (an erase) it also raises while a damaged segment is kept aside."""
        with contextlib.suppress(StorageUnavailable):  # the final rotate below says whether files are left
            self._journal.rotate()  # what is accepted from now on goes to a segment of its own
        numbers = list(self._pending)
        try:
            await self._committed(numbers)
        except Exception:
            self._failed.update(n for n in numbers if n in self._pending)
            raise
        finally:
            await self._commit.flush()  # a commit of the same records queued behind ours lands before we return
        self._journal.rotate()  # raises when a segment that held them cannot be removed
        if purge and (damaged := self._journal.damaged_files()):
            names = ", ".join(p.name for p in damaged)
            raise StorageUnavailable(
                f"{self._owner}: damaged journal segments ({names}) may hold the rows; an operator must remove them"
            )

    def close(self) -> None:
        """Stop retrying and close the journal's file (what is pending stays journaled for the next load);
        nothing is accepted or committed after this."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self._journal.close()

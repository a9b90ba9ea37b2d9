"""The synchronous client: ``Memesh(base_url, key)``, one method per ``/v1`` operation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypeVar, Unpack

import httpx

from memesh_client import _ops
from memesh_client._ops import Call, SearchOptions
from memesh_client._transport import RetryPolicy, headers, next_cursor, no_answer, read, request_args, wait_before_retry
from memesh_client.errors import MemeshError
from memesh_client.models import CellPage, CellType, Consolidation, Node, PullPage, Scene, ScenePage

T = TypeVar("T")


class Memesh:
    """A memesh client for one agent key. Thread-safe as ``httpx.Client`` is; close it (or use ``with``).

    Every failure is a :class:`memesh_client.errors.MemeshError` subclass named after the service's code;
    429 answers are retried after their ``Retry-After`` (see :class:`RetryPolicy`)."""

    def __init__(
        self, base_url: str, key: str, timeout_s: float = 30.0, retry: RetryPolicy | None = None, http: httpx.Client | None = None
    ) -> None:
        """``http``: a client of your own (its base URL and timeout are used, and it stays open after ``close``)."""
        self.retry = retry or RetryPolicy()
        self._owned = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._headers = headers(key)

    def __enter__(self) -> Memesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, headers=self._headers, **request_args(call))
                return read(call, response)
            except httpx.TransportError as exc:
                raise no_answer(exc) from exc
            except MemeshError as error:
                wait = wait_before_retry(error, attempt, self.retry)
                if wait is None:
                    raise
                time.sleep(wait)
                attempt += 1

    # ------------------------------------------------------------------ cells
    def write(self, content: str, cell_type: CellType, **fields: Any) -> Node:
        """Write one cell (``salience``, ``layer``, ``project_id``, ``session_id``, ``scene_id``, ``embedding``)."""
        return self._send(_ops.write(_ops.cell(content, cell_type, **fields)))

    def write_many(self, cells: list[dict[str, Any]]) -> list[Node]:
        """Write cells in order (each made with :func:`memesh_client.cell`)."""
        return self._send(_ops.write_many(cells))

    def get_cell(self, cell_id: str) -> Node:
        return self._send(_ops.get_cell(cell_id))

    def list_cells(self, **filters: Any) -> CellPage:
        """One page (``project_id``, ``cell_types``, ``layer``, ``scene_id``, ``source_agent``,
        ``include_superseded``, ``cursor``, ``limit``)."""
        return self._send(_ops.list_cells(**filters))

    def iter_cells(self, **filters: Any) -> Iterator[Node]:
        """Every cell the filters select, page after page (UnreadableAnswer if a page hands back its own cursor)."""
        cursor = None
        while True:
            page = self.list_cells(**filters, cursor=cursor)
            yield from page.cells
            if page.next_cursor is None:
                return
            cursor = next_cursor(cursor, page.next_cursor)

    def delete_cell(self, cell_id: str) -> None:
        self._send(_ops.delete_cell(cell_id))

    # -------------------------------------------------------------- retrieval
    def query(self, text: str | None = None, k: int = 10, **options: Unpack[SearchOptions]) -> list[Node]:
        """Cells most relevant to ``text``, in rank order (hybrid by default; ``ranking="dense"`` for similarity alone)."""
        return self._send(_ops.search("/v1/query", text, k, **options))

    def recall(self, text: str | None = None, k: int = 10, **options: Unpack[SearchOptions]) -> list[Node]:
        """Cells that matter for ``text``: relevance blended with salience and recency."""
        return self._send(_ops.search("/v1/recall", text, k, **options))

    # ------------------------------------------------- sessions, beacons, scenes
    def open_session(self, project_id: str) -> str:
        return self._send(_ops.open_session(project_id))

    def close_session(self, session_id: str) -> None:
        self._send(_ops.close_session(session_id))

    def place_beacon(self, interest: str, ttl_s: float | None = None, expires_at: datetime | None = None) -> str:
        return self._send(_ops.place_beacon(interest, ttl_s, expires_at))

    def remove_beacon(self, beacon_id: str) -> None:
        self._send(_ops.remove_beacon(beacon_id))

    def get_scene(self, scene_id: str) -> Scene:
        return self._send(_ops.get_scene(scene_id))

    def list_scenes(self, project_id: str | None = None, cursor: str | None = None, limit: int = 50) -> ScenePage:
        return self._send(_ops.list_scenes(project_id, cursor, limit))

    def consolidate(self, scene_id: str) -> Consolidation:
        return self._send(_ops.consolidate(scene_id))

    # ------------------------------------------------------------------ inbox
    def pull(self, since: int | None = None, ack: int | None = None, limit: int | None = None) -> PullPage:
        """The acknowledged pull: deliveries after the cursor; ``ack`` the largest sequence you handled."""
        return self._send(_ops.pull(since, ack, limit))

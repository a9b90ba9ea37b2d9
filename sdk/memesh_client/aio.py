"""The asynchronous client: ``AsyncMemesh(base_url, key)``, the same operations awaited, and the inbox as an
async iterator over the WebSocket stream (:class:`InboxStream`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, TypeVar, Unpack

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from memesh_client import _ops
from memesh_client._ops import Call, SearchOptions
from memesh_client._transport import RetryPolicy, headers, next_cursor, no_answer, read, request_args, wait_before_retry
from memesh_client.errors import ConnectionFailed, MemeshError, TimedOut, UnreadableAnswer, ValidationFailed, error_of
from memesh_client.models import CellPage, CellType, Consolidation, InboxItem, Node, PullPage, Scene, ScenePage

T = TypeVar("T")


class AsyncMemesh:
    """The async twin of :class:`memesh_client.Memesh` (same methods, awaited), plus :meth:`inbox`."""

    def __init__(
        self,
        base_url: str,
        key: str,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        """``http``: a client of your own (its base URL and timeout are used for requests, ``base_url`` for the
        inbox stream, and it stays open after ``aclose``)."""
        self.retry = retry or RetryPolicy()
        self._base_url = base_url.rstrip("/")
        self._key = key
        self._timeout_s = timeout_s
        self._owned = http is None
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
        self._headers = headers(key)

    async def __aenter__(self) -> AsyncMemesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, headers=self._headers, **request_args(call))
                return read(call, response)
            except httpx.TransportError as exc:
                raise no_answer(exc) from exc
            except MemeshError as error:
                wait = wait_before_retry(error, attempt, self.retry)
                if wait is None:
                    raise
                await asyncio.sleep(wait)
                attempt += 1

    # ------------------------------------------------------------------ cells
    async def write(self, content: str, cell_type: CellType, **fields: Any) -> Node:
        return await self._send(_ops.write(_ops.cell(content, cell_type, **fields)))

    async def write_many(self, cells: list[dict[str, Any]]) -> list[Node]:
        return await self._send(_ops.write_many(cells))

    async def get_cell(self, cell_id: str) -> Node:
        return await self._send(_ops.get_cell(cell_id))

    async def list_cells(self, **filters: Any) -> CellPage:
        return await self._send(_ops.list_cells(**filters))

    async def iter_cells(self, **filters: Any) -> AsyncIterator[Node]:
        cursor = None
        while True:
            page = await self.list_cells(**filters, cursor=cursor)
            for cell in page.cells:
                yield cell
            if page.next_cursor is None:
                return
            cursor = next_cursor(cursor, page.next_cursor)

    async def delete_cell(self, cell_id: str) -> None:
        await self._send(_ops.delete_cell(cell_id))

    # -------------------------------------------------------------- retrieval
    async def query(self, text: str | None = None, k: int = 10, **options: Unpack[SearchOptions]) -> list[Node]:
        """Cells most relevant to ``text``, in rank order (hybrid by default; ``ranking="dense"`` for similarity alone)."""
        return await self._send(_ops.search("/v1/query", text, k, **options))

    async def recall(self, text: str | None = None, k: int = 10, **options: Unpack[SearchOptions]) -> list[Node]:
        """Cells that matter for ``text``: relevance blended with salience and recency."""
        return await self._send(_ops.search("/v1/recall", text, k, **options))

    # ------------------------------------------------- sessions, beacons, scenes
    async def open_session(self, project_id: str) -> str:
        return await self._send(_ops.open_session(project_id))

    async def close_session(self, session_id: str) -> None:
        await self._send(_ops.close_session(session_id))

    async def place_beacon(self, interest: str, ttl_s: float | None = None, expires_at: datetime | None = None) -> str:
        return await self._send(_ops.place_beacon(interest, ttl_s, expires_at))

    async def remove_beacon(self, beacon_id: str) -> None:
        await self._send(_ops.remove_beacon(beacon_id))

    async def get_scene(self, scene_id: str) -> Scene:
        return await self._send(_ops.get_scene(scene_id))

    async def list_scenes(self, project_id: str | None = None, cursor: str | None = None, limit: int = 50) -> ScenePage:
        return await self._send(_ops.list_scenes(project_id, cursor, limit))

    async def consolidate(self, scene_id: str) -> Consolidation:
        return await self._send(_ops.consolidate(scene_id))

    # ------------------------------------------------------------------ inbox
    async def pull(self, since: int | None = None, ack: int | None = None, limit: int | None = None) -> PullPage:
        return await self._send(_ops.pull(since, ack, limit))

    @contextlib.asynccontextmanager
    async def inbox(self) -> AsyncIterator[InboxStream]:
        """The WebSocket inbox stream: ``async with client.inbox() as inbox: async for item in inbox: ...``.

        Items arrive after the acknowledged cursor, in ``delivery_seq`` order; ``await inbox.ack(seq)`` moves
        the cursor. A reconnect resumes after the last acknowledged item (at-least-once). A refusal before
        the upgrade (401, 429) raises its typed error; a stream the service closes raises the error it sent,
        and one that ends without saying why (a restart, a dropped connection) ConnectionFailed: the stream
        never ends by itself, so iterating ends only in an error or when you leave the block."""
        url = self._base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/v1/inbox"
        try:
            ws = await connect(url, additional_headers={"x-service-key": self._key}, open_timeout=self._timeout_s)
        except InvalidStatus as exc:
            response = exc.response
            try:
                body = json.loads(response.body or b"")
            except ValueError:
                body = None
            wait = response.headers.get("retry-after")
            raise error_of(response.status_code, body, float(wait) if wait else None) from None
        except (OSError, TimeoutError) as exc:
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from exc
        stream = InboxStream(ws, self._timeout_s)
        try:
            yield stream
        finally:
            await stream.close()


class InboxStream:
    """One open inbox stream: iterate for items, :meth:`ack` to acknowledge. Answers to acks and items share
    the socket; a reader task tells them apart, so iterating and acknowledging may run concurrently."""

    def __init__(self, ws: ClientConnection, timeout_s: float = 30.0) -> None:
        self._ws = ws
        self._timeout_s = timeout_s
        self._closing = False
        self._items: asyncio.Queue[InboxItem | MemeshError | None] = asyncio.Queue()
        self._acks: asyncio.Queue[asyncio.Future[int]] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def __aiter__(self) -> InboxStream:
        return self

    async def __anext__(self) -> InboxItem:
        item = await self._items.get()
        if item is None:
            self._items.put_nowait(None)  # stays ended
            raise StopAsyncIteration
        if isinstance(item, MemeshError):
            self._items.put_nowait(item)
            raise item
        return item

    async def ack(self, seq: int) -> int:
        """Acknowledge every item up to ``seq``; the cursor after it (RateLimited when the Inbox bucket is empty,
        TimedOut when no answer comes within the client's ``timeout_s``, ValidationFailed for a ``seq`` that is
        no sequence number, before anything is sent)."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValidationFailed(f"ack takes a delivery_seq (an integer >= 0), not {seq!r}")
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._acks.put_nowait(answer)  # answers come in the order the frames were sent
        try:
            await self._ws.send(json.dumps({"ack": seq}))
        except ConnectionClosed as exc:
            raise ConnectionFailed("the inbox stream is closed") from exc
        try:
            async with asyncio.timeout(self._timeout_s):
                return await asyncio.shield(answer)  # a late answer still resolves it, in order
        except TimeoutError:
            raise TimedOut(f"no answer to the ack within {self._timeout_s} s") from None

    async def close(self) -> None:
        self._closing = True
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._ws.close()

    async def _read(self) -> None:
        ended: MemeshError | None = None
        try:
            async for frame in self._ws:
                try:
                    message = json.loads(frame)
                    item = InboxItem.model_validate(message) if "delivery_seq" in message else None
                except (ValueError, TypeError) as exc:  # not JSON, or an item of another shape
                    ended = UnreadableAnswer(f"an inbox frame this client cannot read: {exc}")
                    await self._ws.close()
                    break
                if item is not None:
                    self._items.put_nowait(item)
                elif "cursor" in message and not self._acks.empty():
                    self._acks.get_nowait().set_result(int(message["cursor"]))
                elif "error" in message:
                    error = error_of(0, message, None)
                    if error.code == "rate_limited" and not self._acks.empty():  # a refused ack; the stream stays
                        self._acks.get_nowait().set_exception(error)
                    else:
                        ended = error  # sent before the service closes the stream
        except ConnectionClosed:
            pass
        finally:
            if ended is None and not self._closing:  # the service went, or the network: say so
                received = self._ws.close_code
                ended = ConnectionFailed(f"the inbox stream ended without an error frame (close code {received})")
            closed = ended or ConnectionFailed("the inbox stream closed")
            while not self._acks.empty():
                pending = self._acks.get_nowait()
                if not pending.done():
                    pending.set_exception(closed)
            self._items.put_nowait(ended)

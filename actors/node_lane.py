"""Node lanes: a same-node side channel to an actor's hot methods, beside its Ray calls.

A call through Ray costs a caller 1 to 4 ms on this machine whatever the work
(task submission, the core worker's queues, and an object-store round trip for
an answer over 100 KB), where a scene shard's search of 10,000 cells takes
0.4 to 1.4 ms (docs/benchmarks.md, "Node lanes"). A lane is a Unix socket that
the actor serves on its own event loop: a caller on the same node sends
pickled calls and reads pickled answers, many in flight on one connection.
Ray still creates, finds, restarts and places every actor, and carries every
call a lane does not (another node, a method not named, a lane not open yet).

Guarantees:
- A lane serves only the methods its actor's kind names (:data:`LANE_METHODS`)
  and runs each exactly as the Ray call would: the same method of the same
  object, on the same event loop, so an actor's transitions stay free of
  interleaving as they are under Ray. A :class:`~mesh.errors.MemeshError`
  raised there is raised to the caller as is; any other failure becomes
  ``InternalError``, as Ray's mapping does (``actors.ray_directory.memesh_errors``).
- Only a caller that got the lane's address through Ray can use it: the
  socket sits in a directory only this user may enter (mode 0700, checked,
  never followed through a link), and a connection must first present the
  lane's 32 random bytes, handed out only by ``lane_address`` through Ray.
- A lane that breaks (its actor died or restarted) fails the calls in flight
  with :class:`LaneBroken`; what the caller does then is the method's
  :class:`LaneRetry` (repeat it through Ray, which waits out a restart, or
  answer ``Unavailable`` as Ray does for a call it does not retry).
- Bounded: a frame is at most ``MAX_FRAME_BYTES``, and a lane runs at most
  ``MAX_CONCURRENT_CALLS`` calls at a time (Ray's ``max_concurrency`` for the
  same actors); more wait for a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hmac
import logging
import os
import pickle
import secrets
import stat
import struct
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mesh.errors import InternalError, MemeshError

log = logging.getLogger(__name__)

TOKEN_BYTES = 32
MAX_FRAME_BYTES = 1 << 30
MAX_CONCURRENT_CALLS = 1000
_FRAME = struct.Struct("!IQB")  # payload length, call id, frame kind
JOIN_BYTES = 1 << 16  # a payload smaller than this is sent in one write with its header (one syscall)
_CALL, _ANSWER, _REFUSAL, _FAILURE = range(4)


class LaneRetry(enum.Enum):
    """What a caller does with a call whose lane broke before the answer came."""

    RAY = "ray"  # idempotent: the same call again through Ray (which waits for a restarting actor)
    NONE = "none"  # not idempotent (its caller retries knowingly): Unavailable, as Ray does with no task retry


# The methods each actor kind serves on its lane: the calls on the paths of a request and of a walk.
LANE_METHODS: dict[str, dict[str, LaneRetry]] = {
    "scene_shard": {
        "search_batch": LaneRetry.RAY,  # reads
        "neighbours_many": LaneRetry.RAY,
        "touch": LaneRetry.RAY,  # access times: idempotent
        "write": LaneRetry.RAY,  # idempotent by cell id (a retried write returns the stored cells)
        "get_cell": LaneRetry.RAY,
    },
    "beacon_set": {"neighbours_many": LaneRetry.NONE},  # may carry agent-node moves: the walk queue retries without
    "inbox_shard": {  # deliveries are idempotent by delivery id; cursors only move forward
        "deliver": LaneRetry.RAY,
        "pull": LaneRetry.RAY,
        "next_page": LaneRetry.RAY,  # the stream's long poll
        "wait": LaneRetry.RAY,
        "ack": LaneRetry.RAY,
        "cursor": LaneRetry.RAY,
    },
    "embedder": {"encode": LaneRetry.RAY},
    "observatory": {"record_walks": LaneRetry.NONE},  # a repeat would keep the events twice; a loss is logged
    "walker": {"walk": LaneRetry.NONE},  # Ray does not retry it either: its caller does, without the moves
}


class LaneBroken(Exception):
    """The lane closed before this call's answer came (its actor died, restarted or closed it)."""


class LaneUnfit(Exception):
    """This call's arguments do not pickle without Ray's serializer: nothing was sent, Ray carries it."""


@dataclass(frozen=True, slots=True)
class LaneAddress:
    """Where a lane listens and the token it wants first; ``node`` names the node it is on (Ray's node id)."""

    node: str
    path: str
    token: bytes

    def __repr__(self) -> str:  # the token stays out of logs
        return f"LaneAddress(node={self.node!r}, path={self.path!r})"


def lane_directory() -> Path | None:
    """This user's directory of lane sockets on this node (made with mode 0700), or None when the one there
    is not safe to use (a link, another owner, open to others): then no lane is offered, and Ray serves."""
    path = Path(tempfile.gettempdir()) / f"memesh-lanes-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        log.warning("%s is not a private directory of this user: actors are called through Ray only", path)
        return None
    return path


def _sweep(directory: Path) -> None:
    """Remove the sockets of lanes whose process is gone (killed actors leave theirs behind)."""
    for entry in directory.glob("*.sock"):
        pid = entry.name.split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                entry.unlink()
        except PermissionError:  # alive, someone else's
            continue


def _send(writer: asyncio.StreamWriter, kind: int, call_id: int, payload: bytes) -> None:
    """Write one frame. A large payload follows its header as a write of its own instead of being copied
    into one frame with it (a wave's answer can be megabytes); both writes happen in the same turn, so
    no other frame comes between them."""
    header = _FRAME.pack(len(payload), call_id, kind)
    if len(payload) < JOIN_BYTES:
        writer.write(header + payload)
    else:
        writer.write(header)
        writer.write(payload)


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    size, call_id, kind = _FRAME.unpack(await reader.readexactly(_FRAME.size))
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"a lane frame of {size} bytes is over the bound")
    return kind, call_id, await reader.readexactly(size)


class LaneServer:
    """Serves ``methods`` of ``target`` on a Unix socket, on the event loop that calls :meth:`start`."""

    def __init__(self, target: object, methods: frozenset[str], node: str) -> None:
        self._target = target
        self._methods = methods
        self._node = node
        self._token = secrets.token_bytes(TOKEN_BYTES)
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_CALLS)
        self._server: asyncio.AbstractServer | None = None
        self._path: Path | None = None
        self.address: LaneAddress | None = None  # once started
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[asyncio.StreamWriter] = set()
        self.calls = 0  # calls answered (a count for tests and health)

    async def start(self, directory: Path) -> LaneAddress:
        _sweep(directory)
        self._path = directory / f"{os.getpid()}-{secrets.token_hex(8)}.sock"
        self._server = await asyncio.start_unix_server(self._connection, path=str(self._path))
        os.chmod(self._path, 0o600)
        self.address = LaneAddress(self._node, str(self._path), self._token)
        return self.address

    async def close(self) -> None:
        """Stop listening and close every connection (their calls in flight fail as broken)."""
        for writer in list(self._connections):
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            async with asyncio.timeout(5.0):
                token = await reader.readexactly(TOKEN_BYTES)
            if not hmac.compare_digest(token, self._token):
                log.warning("a lane connection without its token was refused")
                return
            while True:
                kind, call_id, payload = await _read_frame(reader)
                if kind != _CALL:
                    return
                await self._slots.acquire()
                task = asyncio.get_running_loop().create_task(self._call(call_id, payload, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, ValueError):
            return  # the caller went away, or sent what a lane does not speak
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _call(self, call_id: int, payload: bytes, writer: asyncio.StreamWriter) -> None:
        method = "?"
        try:
            method, args, kwargs = pickle.loads(payload)
            if method not in self._methods:
                raise InternalError(f"no {method!r} on this lane")
            result = await getattr(self._target, method)(*args, **kwargs)
            kind, body = _ANSWER, pickle.dumps(result, protocol=5)
        except MemeshError as exc:
            kind, body = _REFUSAL, pickle.dumps(exc, protocol=5)
        except Exception:
            log.exception("%s failed on a lane", method)
            kind, body = _FAILURE, pickle.dumps(method, protocol=5)
        finally:
            self._slots.release()
        self.calls += 1
        if writer.is_closing():
            return
        _send(writer, kind, call_id, body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()


class LaneClient:
    """One connection to one actor's lane; many calls in flight, answered in any order."""

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.name = name
        self._reader = reader
        self._writer = writer
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._next_id = 0
        self._broken = False
        self._reading = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, name: str, address: LaneAddress, timeout_s: float = 5.0) -> LaneClient:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_unix_connection(address.path)
        writer.write(address.token)
        return cls(name, reader, writer)

    @property
    def broken(self) -> bool:
        return self._broken

    async def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The method's answer; its MemeshError raised as is; LaneBroken when the lane closes first;
        LaneUnfit (nothing sent) when the arguments need more than the standard pickler."""
        if self._broken:
            raise LaneBroken(self.name)
        try:
            payload = pickle.dumps((method, args, kwargs), protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise LaneUnfit(f"{self.name}.{method}") from exc
        self._next_id += 1
        call_id = self._next_id
        answer: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = answer
        try:
            _send(self._writer, _CALL, call_id, payload)
            await self._writer.drain()
            kind, body = await answer
        except ConnectionError as exc:
            self._break()
            raise LaneBroken(self.name) from exc
        finally:
            self._pending.pop(call_id, None)
        if kind == _ANSWER:
            return pickle.loads(body)
        if kind == _REFUSAL:
            refusal: MemeshError = pickle.loads(body)
            raise refusal
        raise InternalError(f"{self.name}.{method} failed")

    async def _read(self) -> None:
        try:
            while True:
                kind, call_id, body = await _read_frame(self._reader)
                answer = self._pending.get(call_id)
                if answer is not None and not answer.done():
                    answer.set_result((kind, body))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
            pass
        finally:
            self._break()

    def _break(self) -> None:
        if self._broken:
            return
        self._broken = True
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(LaneBroken(self.name))
        self._pending.clear()
        self._writer.close()

    def close(self) -> None:
        self._break()
        self._reading.cancel()


Discover = Callable[[], Awaitable[LaneAddress | None]]


class Lanes:
    """A process's lanes to the actors of its node, by actor name. A lane is looked for in the background the
    first time an actor is called (that call goes through Ray), and looked for again ``retry_s`` after it
    broke or could not be had; an actor on another node is asked again every ``remote_retry_s`` (Ray may
    restart it on this one)."""

    def __init__(self, node: str, retry_s: float = 1.0, remote_retry_s: float = 30.0) -> None:
        self._node = node
        self._loop: asyncio.AbstractEventLoop | None = None  # lanes belong to the loop that opened the first
        self._retry_s = retry_s
        self._remote_retry_s = remote_retry_s
        self._open: dict[str, LaneClient] = {}
        self._next_try: dict[str, float] = {}
        self._finding: dict[str, asyncio.Task[None]] = {}
        self.answered = 0  # calls answered through a lane
        self.fell_back = 0  # calls whose lane broke before the answer, repeated through Ray

    def lane(self, name: str, discover: Discover) -> LaneClient | None:
        """The open lane to actor ``name``, or None (then the call goes through Ray; a search may start)."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:  # a caller on another event loop (a thread of its own): Ray serves it
            return None
        client = self._open.get(name)
        if client is not None and not client.broken:
            return client
        if client is not None:
            del self._open[name]
            self._next_try[name] = loop.time() + self._retry_s
        if name not in self._finding and loop.time() >= self._next_try.get(name, 0.0):
            task = loop.create_task(self._find(name, discover))
            self._finding[name] = task
            task.add_done_callback(lambda _: self._finding.pop(name, None))
        return None

    async def _find(self, name: str, discover: Discover) -> None:
        loop = asyncio.get_running_loop()
        wait = self._retry_s
        try:
            address = await discover()
            if address is None or address.node != self._node:
                wait = self._remote_retry_s
                return
            self._open[name] = await LaneClient.open(name, address)
        except (MemeshError, OSError, TimeoutError) as exc:  # the actor restarting, or its socket gone: Ray serves
            log.debug("no lane to %s yet: %r", name, exc)
        finally:
            self._next_try[name] = loop.time() + wait

    def forget(self, name: str) -> None:
        """Close the lane to ``name`` (the actor was retired or killed on purpose)."""
        client = self._open.pop(name, None)
        if client is not None:
            client.close()
        self._next_try.pop(name, None)

    def close(self) -> None:
        for task in self._finding.values():
            task.cancel()
        for client in self._open.values():
            client.close()
        self._open.clear()

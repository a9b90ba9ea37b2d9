"""Embedder: one copy of the model in its own process, batching the texts of every head that calls it.

Guarantees:
- ``encode`` answers one vector per text, in order, exactly what the engine
  gives for those texts (batching changes no vector of the fp32 engines, and
  ``minilm-bf16``'s only by bfloat16 rounding: ``head.bf16_engine``).
- Calls that arrive while a batch is encoding are encoded together in the
  next batch, up to ``max_batch`` texts (a call larger than that is one batch
  of its own), whichever head they come from: that is how the pool reaches the
  model's batched rate with many heads sending small batches.
- The model loads once, on the first call, off the event loop; ``health``
  answers while it loads.
- An engine failure fails the calls of that batch only (EmbeddingFailed).
- A call marked ``wide`` (its head has been alone on the pool for a few batches:
  ``head.pooled_engine``) that forms a batch alone runs on ``make_wide``'s engine: the same weights with
  every usable CPU's threads, so a lone request is not held to this copy's
  share of the CPUs. The vectors are the engine's (threads do not change them
  beyond float rounding).
- A call that names another engine (``engine``, as a corpus records it: a deployment whose stored
  vectors another engine of the same width made serves with that one until a reembed) is encoded by
  that engine, built once in this actor with this copy's threads (``make_named``), and batched only
  with calls for the same engine; never wide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mesh.errors import EmbeddingFailed

log = logging.getLogger(__name__)
Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class EmbedderConfig:
    make_engine: Callable[[], Any]  # picklable (a partial of head.embedding.make_engine): built in the actor
    max_batch: int = 64
    make_wide: Callable[[], Any] | None = None  # the same engine on every usable CPU, for a lone call (None: never wide)
    make_named: Callable[[str], Any] | None = None  # an engine by the name a corpus records (head.embedding.engine_named)


class EmbedderWorker:
    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self._engine: Any = None
        self._wide: Any = None
        self._named: dict[str, Any] = {}  # engines named by calls, other than this copy's own
        self._pending: deque[tuple[list[str], bool, str | None, asyncio.Future[Matrix]]] = deque()
        self._worker: asyncio.Task[None] | None = None
        # One thread runs the model: torch's OpenMP keeps a thread team per calling thread, and teams of
        # several callers slow each other (a 2-thread encode took twice as long from a second thread).
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self.batches = 0
        self.texts = 0
        self.wide_batches = 0

    async def health(self) -> dict[str, int]:
        return {
            "embed_batches": self.batches,
            "embed_texts": self.texts,
            "embed_pending": len(self._pending),
            "embed_wide_batches": self.wide_batches,
            "model_threads": getattr(self._engine, "threads_used", 0),  # a model engine's intra-op threads
            "pid": os.getpid(),
        }

    async def close(self) -> None:
        if self._worker is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
        self._thread.shutdown(wait=False)

    async def encode(self, texts: list[str], wide: bool = False, engine: str | None = None) -> Matrix:
        """One vector per text, by this copy's engine, or by the engine called ``engine`` when it is another."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        future: asyncio.Future[Matrix] = asyncio.get_running_loop().create_future()
        self._pending.append((texts, wide, engine, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._drain())
        return await future

    def _encode(self, texts: list[str], wide: bool, engine: str | None = None) -> Matrix:
        """In a worker thread: the texts through this copy's engine, the wide one, or the one named."""
        if self._engine is None:
            self._engine = self.config.make_engine()
        if engine is not None and engine != self._engine.name:
            if self.config.make_named is None:
                raise ValueError(f"this embedder serves {self._engine.name} only, not {engine}")
            if engine not in self._named:
                self._named[engine] = self.config.make_named(engine)
            return np.asarray(self._named[engine].encode(texts), dtype=np.float32)
        if wide and self.config.make_wide is not None:
            if self._wide is None:
                self._wide = self.config.make_wide()
            self.wide_batches += 1
            return np.asarray(self._wide.encode(texts), dtype=np.float32)
        return np.asarray(self._engine.encode(texts), dtype=np.float32)

    async def _drain(self) -> None:
        while self._pending:
            batch = [self._pending.popleft()]
            size, engine = len(batch[0][0]), batch[0][2]
            while self._pending and size + len(self._pending[0][0]) <= self.config.max_batch and self._pending[0][2] == engine:
                batch.append(self._pending.popleft())
                size += len(batch[-1][0])
            texts = [t for request, _, _, _ in batch for t in request]
            try:
                wide = len(batch) == 1 and batch[0][1]
                vectors = await asyncio.get_running_loop().run_in_executor(self._thread, self._encode, texts, wide, engine)
            except Exception:
                log.exception("embedding failed")
                for _, _, _, future in batch:
                    if not future.done():
                        future.set_exception(EmbeddingFailed("the embedding engine failed"))
                continue
            self.batches += 1
            self.texts += len(texts)
            offset = 0
            for request, _, _, future in batch:
                if not future.done():
                    future.set_result(vectors[offset : offset + len(request)])
                offset += len(request)

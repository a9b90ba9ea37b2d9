"""Embedder: one copy of the model in its own process, batching the texts of every head that calls it.

Guarantees:
- ``encode`` answers one vector per text, in order, exactly what the engine
  gives for those texts (batching does not change a vector).
- Calls that arrive while a batch is encoding are encoded together in the
  next batch, up to ``max_batch`` texts (a call larger than that is one batch
  of its own), whichever head they come from: that is how the pool reaches the
  model's batched rate with many heads sending small batches.
- The model loads once, on the first call, off the event loop; ``health``
  answers while it loads.
- An engine failure fails the calls of that batch only (EmbeddingFailed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable
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


class EmbedderWorker:
    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self._engine: Any = None
        self._pending: deque[tuple[list[str], asyncio.Future[Matrix]]] = deque()
        self._worker: asyncio.Task[None] | None = None
        self.batches = 0
        self.texts = 0

    async def health(self) -> dict[str, int]:
        return {
            "embed_batches": self.batches,
            "embed_texts": self.texts,
            "embed_pending": len(self._pending),
            "model_threads": getattr(self._engine, "threads_used", 0),  # a model engine's intra-op threads
            "pid": os.getpid(),
        }

    async def close(self) -> None:
        if self._worker is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker

    async def encode(self, texts: list[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        future: asyncio.Future[Matrix] = asyncio.get_running_loop().create_future()
        self._pending.append((texts, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            batch = [self._pending.popleft()]
            size = len(batch[0][0])
            while self._pending and size + len(self._pending[0][0]) <= self.config.max_batch:
                batch.append(self._pending.popleft())
                size += len(batch[-1][0])
            texts = [t for request, _ in batch for t in request]
            try:
                if self._engine is None:
                    self._engine = await asyncio.to_thread(self.config.make_engine)
                vectors = await asyncio.to_thread(self._engine.encode, texts)
            except Exception:
                log.exception("embedding failed")
                for _, future in batch:
                    if not future.done():
                        future.set_exception(EmbeddingFailed("the embedding engine failed"))
                continue
            self.batches += 1
            self.texts += len(texts)
            offset = 0
            for request, future in batch:
                if not future.done():
                    future.set_result(vectors[offset : offset + len(request)])
                offset += len(request)

"""The deployment's embedder actors as a head's engine: which actor gets a batch, and when a batch runs wide."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import numpy.typing as npt

from mesh.errors import EmbeddingFailed, MemeshError, TimedOut, Unavailable
from mesh.seam import Directory

Matrix = npt.NDArray[np.float32]
log = logging.getLogger(__name__)

LONE_STREAK = 3  # batches a head sends alone in a row before the next may run wide (PooledEngine)


class PooledEngine:
    """The deployment's embedder actors (``embedding.pool``) as this head's engine: each batch goes to the
    actor with the fewest of this head's batches in flight (ties in turn), and to another when an actor
    does not answer; the actors batch across heads. Vectors are the same as the engine the actors run
    (they build it from the same settings). A batch is ``wide`` (its actor may run it on every CPU's
    threads, so a lone request is not held to one share) when it and the ``LONE_STREAK - 1`` batches
    before it were each sent with none of this head's in flight: one that meets concurrent batches would
    share the CPUs with them and hold them all up, so wide is only for a head that has been alone a while.

    ``parallel``: the batches a head keeps in flight, one per actor, so every actor works at once. Not
    two: a second batch waiting in the actor would save it one round trip (a millisecond or two) but
    halve every batch, and a model's cost per text falls steeply with the batch up to about 8 texts."""

    def __init__(self, directory: Directory, name: str, dims: int, size: int, named: bool = False, widens: bool = True) -> None:
        if size < 1:
            raise ValueError("an embedder pool holds at least one actor")
        self._dir = directory
        self.name = name
        self.dims = dims
        self.size = size
        self._ask = name if named else None  # the engine each call names (None: the actors' own)
        self._widens = widens and not named  # whether the actors run a lone batch wide (``cluster.compose.wide_engine``)
        self.parallel = size
        self._next = 0
        self._inflight = [0] * size
        self._lone = 0  # batches sent in a row with nothing else of this head's in flight

    def serving(self, name: str) -> PooledEngine:
        """The same actors encoding with the engine called ``name`` (another of the same width: what a stored
        corpus records, served until a reembed moves it to the actors' own engine)."""
        return PooledEngine(self._dir, name, self.dims, self.size, named=True, widens=False)

    def encode(self, texts: list[str]) -> Matrix:
        raise RuntimeError("a pooled engine encodes asynchronously (encode_async)")

    def _pick(self, tried: set[int]) -> int:
        untried = [i for i in range(self.size) if i not in tried]
        index = min(untried, key=lambda i: (self._inflight[i], (i - self._next) % self.size))
        self._next = (index + 1) % self.size
        return index

    async def encode_async(self, texts: list[str]) -> Matrix:
        failure: MemeshError | None = None
        tried: set[int] = set()
        self._lone = 0 if any(self._inflight) else self._lone + 1  # once a batch, whichever actor takes it
        wide = self._widens and self._lone >= LONE_STREAK
        while len(tried) < self.size:
            index = self._pick(tried)
            tried.add(index)
            self._inflight[index] += 1
            try:
                return np.asarray(await self._encode(index, texts, wide), dtype=np.float32)
            except (Unavailable, TimedOut) as exc:
                failure = exc
            finally:
                self._inflight[index] -= 1
        raise EmbeddingFailed("no embedder actor answered") from failure

    async def _encode(self, index: int, texts: list[str], wide: bool) -> Matrix:
        actor = self._dir.embedder(index)
        if self._ask is None:
            return await actor.encode(texts, wide)
        return await actor.encode(texts, wide, self._ask)

    async def warm_up(self) -> None:
        """Load the model in every actor now (each loads on its first call: seconds a request would wait).
        An actor that fails is logged and left to load on its first batch (the others serve meanwhile);
        only a pool where every actor fails raises. The wide engine is warmed too when the actors have one
        (it is built on its first batch)."""
        calls = (self._encode(i, ["warm up"], False) for i in range(self.size))
        answers = await asyncio.gather(*calls, return_exceptions=True)
        failed = [(i, a) for i, a in enumerate(answers) if isinstance(a, BaseException)]
        live = [i for i in range(self.size) if i not in dict(failed)]
        if self._widens:
            await asyncio.gather(*(self._encode(i, ["warm up"], True) for i in live), return_exceptions=True)
        for i, failure in failed:
            log.warning("embedder:%d did not warm up (%s); it loads on its first batch", i, failure)
        if len(failed) == self.size:
            raise EmbeddingFailed("no embedder actor warmed up") from failed[0][1]

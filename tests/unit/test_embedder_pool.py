"""The embedder pool (``embedding.pool``): the model in embedder actors that batch across callers.

In process (the same actor class Ray runs; ``tests/e2e/test_heads.py`` runs it on Ray): the vectors are the
engine's own, concurrent callers share batches, and the whole write/query path works through the pool."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from actors.embedder import EmbedderConfig, EmbedderWorker
from head.cpus import cgroup_cpus, usable_cpus
from head.embedding import Embedder, HashEngine, make_engine
from head.facade import Memesh
from head.pooled_engine import LONE_STREAK, PooledEngine
from mesh.errors import EmbeddingFailed, Unavailable
from mesh.model import CellType, NewCell
from tests.unit.test_propagation import agent


async def test_the_pool_gives_the_engines_own_vectors_through_the_whole_path(make_core: Callable[..., Memesh]) -> None:
    core = make_core(embedding={"pool": 2})
    assert isinstance(core.embedder.engine, PooledEngine)
    texts = [f"kafka consumer lag report {n}" for n in range(10)]
    vectors = await core.embedder.embed(texts)
    assert np.array_equal(vectors, HashEngine(384).encode(texts))
    writer, _ = await agent(core)
    (cell,) = await core.memory.write_cells(writer, [NewCell(content="the ledger closed late", cell_type=CellType.FACT)])
    assert np.array_equal(cell.embedding, HashEngine(384).encode(["the ledger closed late"])[0])
    health = [await core.directory.embedder(i).health() for i in range(2)]
    assert sum(h["embed_texts"] for h in health) >= 11, "the texts were not embedded by the pool"
    assert all(h["embed_texts"] for h in health), "batches go to every actor in turn"
    await core.close()


async def test_concurrent_callers_share_batches() -> None:
    worker = EmbedderWorker(EmbedderConfig(partial(make_engine, "hash", 64), max_batch=64))
    texts = [[f"text {caller}.{n}" for n in range(3)] for caller in range(20)]
    answers = await asyncio.gather(*(worker.encode(t) for t in texts))
    engine = HashEngine(64)
    assert all(np.array_equal(a, engine.encode(t)) for a, t in zip(answers, texts, strict=True))
    assert worker.texts == 60 and worker.batches < 20, f"{worker.batches} batches for 20 callers"


def test_a_cgroup_cpu_quota_caps_the_models_threads(tmp_path: Path) -> None:
    """A pod limited to 2.5 CPUs gets 3 threads whatever the node's core count; no quota or no cgroup v2: none."""
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("250000 100000\n")
    assert cgroup_cpus(cpu_max) == 3
    cpu_max.write_text("max 100000\n")
    assert cgroup_cpus(cpu_max) is None
    assert cgroup_cpus(tmp_path / "absent") is None
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


class _TimedHash(HashEngine):
    """The hash engine, holding each encode 0.2 s and noting when: a model's encode takes time, and
    whether two actors encode at once is what this test observes (no real model needed for that)."""

    spans: ClassVar[list[tuple[float, float]]] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        started = time.monotonic()
        time.sleep(0.2)
        _TimedHash.spans.append((started, time.monotonic()))
        return super().encode(texts)


class _Actors:
    def __init__(self, workers: list[EmbedderWorker]) -> None:
        self.workers = workers

    def embedder(self, index: int) -> EmbedderWorker:
        return self.workers[index]


async def test_one_head_keeps_every_actor_of_its_pool_busy() -> None:
    """A head with a pool of two sends batches to both at once (before, it waited for each batch, so a
    second actor never encoded beside the first); every caller still gets its own texts' vectors."""
    _TimedHash.spans = []
    workers = [EmbedderWorker(EmbedderConfig(partial(_TimedHash, 64), max_batch=64)) for _ in range(2)]
    embedder = Embedder(PooledEngine(_Actors(workers), "hash-64", 64, 2), max_batch=4)  # type: ignore[arg-type]
    texts = [[f"invoice {caller}.{n}" for n in range(2)] for caller in range(12)]
    answers = await asyncio.gather(*(embedder.embed(t, owner=f"tenant-{i % 3}") for i, t in enumerate(texts)))
    engine = HashEngine(64)
    assert all(np.array_equal(a, engine.encode(t)) for a, t in zip(answers, texts, strict=True))
    assert all(w.texts for w in workers), [w.texts for w in workers]
    overlapping = [(a, b) for a in _TimedHash.spans for b in _TimedHash.spans if a < b and b[0] < a[1]]
    assert overlapping, f"the two actors never encoded at the same time: {_TimedHash.spans}"
    assert embedder.queued == 0
    embedder.close()


async def test_a_lone_request_starts_at_once_and_a_failed_batch_fails_only_its_callers() -> None:
    """No batch slot waits for company; an engine failure reaches its batch's callers, and the next
    request is served (the slot was given back)."""

    class Flaky(HashEngine):
        fail = True

        def encode(self, texts: list[str]) -> np.ndarray:
            if Flaky.fail:
                Flaky.fail = False
                raise RuntimeError("model fell over")
            return super().encode(texts)

    embedder = Embedder(Flaky(32))
    with pytest.raises(EmbeddingFailed):
        await embedder.embed(["first"])
    started = time.monotonic()
    (vector,) = await asyncio.wait_for(embedder.embed(["second"]), 5)
    assert time.monotonic() - started < 1.0
    assert np.array_equal(vector, HashEngine(32).encode(["second"])[0])
    embedder.close()


async def test_requests_made_in_one_turn_share_a_batch_on_a_local_engine() -> None:
    """Eight texts asked for in one ``gather`` are one model call, as when a drain task started on the next
    turn (dispatching inside ``embed`` gave calls of [1, 7])."""
    sizes: list[int] = []

    class Counting(HashEngine):
        def encode(self, texts: list[str]) -> np.ndarray:
            sizes.append(len(texts))
            return super().encode(texts)

    embedder = Embedder(Counting(32))
    answers = await asyncio.gather(*(embedder.embed([f"text {n}"]) for n in range(8)))
    assert sizes == [8]
    assert all(np.array_equal(a[0], HashEngine(32).encode([f"text {n}"])[0]) for n, a in enumerate(answers))
    embedder.close()


class _DeadActor:
    async def encode(self, texts: list[str], wide: bool = False) -> np.ndarray:
        raise Unavailable("embedder:1 is not running")


async def test_one_dead_actor_does_not_stop_the_warm_up() -> None:
    """An actor that fails to load is logged and skipped (its batches go to the others); a pool where every
    actor fails still refuses to warm up."""
    live = EmbedderWorker(EmbedderConfig(partial(make_engine, "hash", 64), max_batch=64))
    embedder = Embedder(PooledEngine(_Actors([live, _DeadActor()]), "hash-64", 64, 2))  # type: ignore[list-item,arg-type]
    await embedder.warm_up()
    assert live.texts >= 1
    (vector,) = await embedder.embed(["after the warm-up"])
    assert np.array_equal(vector, HashEngine(64).encode(["after the warm-up"])[0])
    dead = Embedder(PooledEngine(_Actors([_DeadActor(), _DeadActor()]), "hash-64", 64, 2))  # type: ignore[list-item,arg-type]
    with pytest.raises(EmbeddingFailed):
        await dead.warm_up()
    embedder.close()
    dead.close()


class _Tagged(HashEngine):
    """The hash engine, noting which copy (``tag``) encoded each batch and how many texts it held."""

    calls: ClassVar[list[tuple[str, int]]] = []

    def __init__(self, tag: str, dims: int = 64) -> None:
        super().__init__(dims)
        self.tag = tag

    def encode(self, texts: list[str]) -> np.ndarray:
        _Tagged.calls.append((self.tag, len(texts)))
        return super().encode(texts)


async def test_a_head_alone_a_while_runs_wide_and_concurrent_batches_on_each_copys_share() -> None:
    """A head whose last ``LONE_STREAK`` batches were each sent with nothing else in flight asks for a
    wide batch, which the actor runs on its wide engine (every CPU's threads); a batch sent beside another
    resets the streak, and a wide call batched with others in the actor runs on the copy's own engine.
    The vectors are the same either way."""
    _Tagged.calls = []
    config = EmbedderConfig(partial(_Tagged, "narrow"), max_batch=64, make_wide=partial(_Tagged, "wide"))
    workers = [EmbedderWorker(config) for _ in range(2)]
    embedder = Embedder(PooledEngine(_Actors(workers), "hash-64", 64, 2), max_batch=4)  # type: ignore[arg-type]
    alone = [(await embedder.embed([f"a lone question {n}"]))[0] for n in range(LONE_STREAK + 1)]
    assert [tag for tag, _ in _Tagged.calls] == ["narrow"] * (LONE_STREAK - 1) + ["wide", "wide"]
    assert np.array_equal(np.stack(alone), HashEngine(64).encode([f"a lone question {n}" for n in range(LONE_STREAK + 1)]))
    _Tagged.calls = []
    await asyncio.gather(*(embedder.embed([f"busy {n}"]) for n in range(12)))
    assert sorted(_Tagged.calls) == [("narrow", 4), ("narrow", 4), ("wide", 4)]  # the first still alone, then beside it
    _Tagged.calls = []
    await embedder.embed(["alone again"])
    assert _Tagged.calls == [("narrow", 1)]  # the streak starts over after concurrent batches
    worker = EmbedderWorker(config)
    _Tagged.calls = []
    await asyncio.gather(worker.encode(["one"], wide=True), worker.encode(["two"], wide=True))
    assert _Tagged.calls == [("narrow", 2)]  # two wide calls that met in the actor: one batch, on the copy's share
    embedder.close()


@pytest.mark.parametrize(
    ("embedding", "wide"),
    [
        ({"engine": "minilm", "pool": 2}, True),
        ({"engine": "minilm-onnx", "pool": 2}, False),  # ONNX Runtime's spin after a run costs more than two threads save
        ({"engine": "minilm-bf16", "pool": 2}, False),  # one text on two threads: 8.8 ms for 17 ms of CPU, against 10.3
        ({"engine": "minilm", "pool": 1}, False),  # one copy has every CPU already
        ({"engine": "minilm", "pool": 2, "wide_lone": False}, False),
    ],
)
def test_lone_batches_run_wide_only_on_an_engine_they_speed_up(
    embedding: dict[str, object], wide: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cluster.compose import wide_engine
    from cluster.settings import Settings

    monkeypatch.chdir(tmp_path)
    found = wide_engine(Settings(embedding=embedding))
    assert (found is not None) is wide
    if found is not None:
        assert found.keywords == {} and found.args == ("minilm", 384, None)  # every usable CPU: threads unset


async def test_a_call_naming_another_engine_is_encoded_by_it_and_batched_apart() -> None:
    """A corpus's engine, by its recorded name: built once in the actor, batched only with its own calls."""
    from head.embedding import engine_named

    worker = EmbedderWorker(EmbedderConfig(partial(make_engine, "hash", 64), max_batch=64, make_named=engine_named))
    texts = [f"ledger close {n}" for n in range(6)]
    own, named, again = await asyncio.gather(
        worker.encode(texts[:3]), worker.encode(texts[3:], engine="hash-32"), worker.encode(texts[:2], engine="hash-64")
    )
    assert np.array_equal(own, HashEngine(64).encode(texts[:3]))
    assert np.array_equal(named, HashEngine(32).encode(texts[3:]))
    assert np.array_equal(again, HashEngine(64).encode(texts[:2]))  # its own name is its own engine
    bare = EmbedderWorker(EmbedderConfig(partial(make_engine, "hash", 64), max_batch=64))
    with pytest.raises(EmbeddingFailed):  # no way to build another engine: refused, not answered with its own
        await bare.encode(["x"], engine="hash-32")


async def test_a_pool_serves_a_stored_corpus_with_the_engine_that_made_it(tmp_path: Path) -> None:
    """A deployment whose corpus another engine of the same width embedded (``minilm`` before ``minilm-onnx``
    became the default) keeps embedding in its pool, with the corpus's engine, until a reembed."""
    from cluster.compose import build_memesh, start_core
    from tests.unit.conftest import in_process_settings

    first_settings = in_process_settings(tmp_path / "data", embedding={"pool": 2})
    first = build_memesh(first_settings)
    await start_core(first, first_settings)
    writer, _ = await agent(first)
    await first.memory.write_cells(writer, [NewCell(content="the ledger closed late", cell_type=CellType.FACT)])
    await first.close()

    settings = in_process_settings(tmp_path / "data", embedding={"engine": "minilm-onnx", "pool": 2})
    second = build_memesh(settings)
    await start_core(second, settings)
    assert isinstance(second.embedder.engine, PooledEngine) and second.embedder.name == "hash-384"
    await second.embedder.warm_up()
    (cell,) = await second.memory.write_cells(writer, [NewCell(content="the ledger reopened", cell_type=CellType.FACT)])
    assert cell.engine == "hash-384"
    assert np.array_equal(cell.embedding, HashEngine(384).encode(["the ledger reopened"])[0])
    health = [await second.directory.embedder(i).health() for i in range(2)]
    assert sum(h["embed_texts"] for h in health) >= 3, "the head embedded on its own: the pool was not used"
    await second.close()

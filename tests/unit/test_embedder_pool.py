"""The embedder pool (``embedding.pool``): the model in embedder actors that batch across callers.

In process (the same actor class Ray runs; ``tests/e2e/test_heads.py`` runs it on Ray): the vectors are the
engine's own, concurrent callers share batches, and the whole write/query path works through the pool."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from actors.embedder import EmbedderConfig, EmbedderWorker
from head.embedding import HashEngine, PooledEngine, cgroup_cpus, make_engine, usable_cpus
from head.facade import Memesh
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

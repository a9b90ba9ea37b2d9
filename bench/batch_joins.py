"""A write batch in a scene shard's partition, in process: its cells' scene joins scored per batch against per cell.

A :class:`~mesh.partition.MemoryPartition` is filled with ``--cells`` cells of
one tenant over seven projects (generated sentences, ``hash`` vectors: the
cost of a join does not depend on the model). Then, per figure, the same
``--batches`` batches of ``--batch`` fresh cells are written into two copies
of it:

- the baseline: every cell looks for a scene to join with a search of its
  own (``JoinScores`` with no scores taken: what a lone cell still does);
- one matrix product per project for the batch (``SceneCentroidIndex.joins``,
  the default), the rows the batch changed scored again per cell.

Both copies must end with the same number of scenes (a check, printed).

Run: ``.venv/bin/python -m bench.batch_joins [--cells 10000,40000] [--batch 64]``.
"""

from __future__ import annotations

import argparse
import copy
import time
import uuid
from datetime import UTC, datetime

from bench.common import Report, SentenceGen, banner
from bench.search_parts import TENANT, build
from head.embedding import HashEngine
from mesh.model import Cell, CellType, Layer
from mesh.partition import MemoryPartition
from mesh.partition_index import JoinScores

SECTION = "batch joins"
PROJECTS = 7


def batches(gen: SentenceGen, count: int, size: int) -> list[list[Cell]]:
    engine, at = HashEngine(384), datetime.now(UTC)
    out = []
    for _ in range(count):
        texts = gen.many(size)
        vectors = engine.encode(texts)
        project = [f"p{i % PROJECTS}" for i in range(size)]
        out.append(
            [
                Cell(str(uuid.uuid4()), TENANT, project[i], CellType.FACT, t, 0.5, "a", at, at, Layer.L0, v, "hash")
                for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
            ]
        )
    return out


def write_ms(partition: MemoryPartition, work: list[list[Cell]]) -> float:
    """Mean ms per batch written into ``partition`` (its own copies of the cells)."""
    started = time.perf_counter()
    for batch in work:
        partition.write([copy.copy(c) for c in batch], [str(uuid.uuid4()) for _ in batch])
    return (time.perf_counter() - started) / len(work) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="10000,40000", help="comma-separated partition sizes")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    banner(f"{SECTION}: batches of {args.batch} into one tenant's partition, {PROJECTS} projects")
    report = Report()
    gen = SentenceGen(5)
    for size in (int(s) for s in args.cells.split(",")):
        base = build(size, PROJECTS, gen)
        work = batches(gen, args.batches, args.batch)
        per_cell, per_batch = copy.deepcopy(base), copy.deepcopy(base)
        per_cell.scene_index.joins = lambda cells, index=per_cell.scene_index: JoinScores(index, {})  # type: ignore[method-assign]
        alone = write_ms(per_cell, work)
        batched = write_ms(per_batch, work)
        tag = f"{size // 1000}k cells"
        report.add(SECTION, f"{tag}: batch of {args.batch}, a search per cell", alone, "ms")
        report.add(SECTION, f"{tag}: batch of {args.batch}, one product per project", batched, "ms", "a search per cell", alone)
        print(f"    scenes after: {len(per_cell.scenes)} (per cell) and {len(per_batch.scenes)} (per batch)")
    report.print_table()


if __name__ == "__main__":
    main()

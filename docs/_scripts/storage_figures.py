"""Figures quoted in docs/storage.md: many small LanceDB appends vs one batched append,
and the GroupCommitter under concurrent submits.

Run from the repository root:

    .venv/bin/python docs/_scripts/storage_figures.py

Uses the real engine on a temporary local directory, the cell schema of
``actors.codecs`` (384-dim float32 embeddings) and the async API of
``actors.storage``. Prints one line per figure (median of ``REPEATS`` runs,
each on a fresh table). Every figure includes the conversion of the records
to Arrow (``cells_to_arrow``), as on the real write path.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.codecs import agents_to_arrow, cells_to_arrow
from actors.group_commit import GroupCommitter
from actors.schemas import AGENT_SCHEMA, cell_schema
from actors.storage import LanceStore, RowTable
from mesh.identity import Agent, AgentStatus, Role
from mesh.model import Cell, CellType, Layer

DIMS = 384
ROWS = 200
REPEATS = 5
WINDOW_S = 0.002  # storage.commit_window_ms default
MAX_ROWS = 1024  # storage.commit_max_rows default
OPTIMIZE_EVERY = 64  # storage.optimize_every default
UPSERTS = 50


def make_cells(n: int, seed: int) -> list[Cell]:
    rng = np.random.default_rng(seed)
    now = datetime.now(UTC)
    cells = []
    for i in range(n):
        v = rng.standard_normal(DIMS).astype(np.float32)
        cells.append(
            Cell(
                id=f"{seed:04d}-{i:06d}",
                tenant_id="t",
                project_id="p",
                cell_type=CellType.FACT,
                content=f"cell {i}",
                salience=0.5,
                source_agent="a",
                created_at=now,
                last_accessed=now,
                layer=Layer.L0,
                embedding=v / np.linalg.norm(v),
                engine="bench",
            )
        )
    return cells


async def fresh_table(store: LanceStore, name: str) -> RowTable:
    return await store.table(name, cell_schema(DIMS))


async def versions(table: RowTable) -> int:
    """The table's current version number (each commit adds one)."""
    return int(await table._table.version())


async def single_row_appends(store: LanceStore, run: int) -> tuple[float, int]:
    table = await fresh_table(store, f"single_{run}")
    cells = make_cells(ROWS, run)
    start = time.perf_counter()
    for cell in cells:
        await table.append(cells_to_arrow([cell], DIMS))
    elapsed = time.perf_counter() - start
    assert await table.count() == ROWS
    return elapsed, await versions(table)


async def one_batched_append(store: LanceStore, run: int) -> tuple[float, int]:
    table = await fresh_table(store, f"batch_{run}")
    cells = make_cells(ROWS, run)
    start = time.perf_counter()
    await table.append(cells_to_arrow(cells, DIMS))
    elapsed = time.perf_counter() - start
    assert await table.count() == ROWS
    return elapsed, await versions(table)


async def group_commit(store: LanceStore, run: int) -> tuple[float, int, list[float]]:
    table = await fresh_table(store, f"group_{run}")
    flushes = 0

    async def flush(items: list[Cell]) -> None:
        # As SceneShard._flush does: records in, one Arrow table, one append.
        nonlocal flushes
        flushes += 1
        await table.append(cells_to_arrow(items, DIMS))

    committer: GroupCommitter[Cell] = GroupCommitter(flush, WINDOW_S, MAX_ROWS)
    cells = make_cells(ROWS, run)
    latencies: list[float] = []

    async def submit(cell: Cell) -> None:
        t0 = time.perf_counter()
        await committer.submit([cell])
        latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(submit(c) for c in cells))
    elapsed = time.perf_counter() - start
    assert await table.count() == ROWS
    await committer.close()
    return elapsed, flushes, latencies


async def optimize_after_commits(store: LanceStore, run: int) -> float:
    """Time of the compaction a shard runs inline once ``optimize_every`` (64) commits have accumulated."""
    table = await fresh_table(store, f"optimize_{run}")
    for cell in make_cells(OPTIMIZE_EVERY, 300 + run):
        await table.append(cells_to_arrow([cell], DIMS))
    start = time.perf_counter()
    assert await table.optimize_if_due(OPTIMIZE_EVERY)
    return time.perf_counter() - start


async def registry_upserts(store: LanceStore, run: int) -> float:
    """Median time of one single-row upsert (merge_insert by id) into a table of the registry_agents schema."""
    table = await store.table(f"agents_{run}", AGENT_SCHEMA)
    now = datetime.now(UTC)
    times = []
    for i in range(UPSERTS):
        agent = Agent(
            id=f"agent-{i % 10}",  # ten agents, each updated several times, as lifecycle changes do
            tenant_id="t",
            display_name="a",
            roles=frozenset({Role.WRITER}),
            status=AgentStatus.ACTIVE,
            key_hash=f"{i:064x}",
            created_at=now,
            updated_at=now,
        )
        start = time.perf_counter()
        await table.upsert(agents_to_arrow([agent]))
        times.append(time.perf_counter() - start)
    assert await table.count() == 10
    return statistics.median(times)


async def main() -> None:
    import lancedb

    with tempfile.TemporaryDirectory(prefix="memesh-storage-figures-") as tmp:
        store = await LanceStore.open(str(Path(tmp) / "lance"))
        # Warm the engine (first table creation pays one-off costs).
        await one_batched_append(store, 999)

        single = [await single_row_appends(store, r) for r in range(REPEATS)]
        batched = [await one_batched_append(store, 100 + r) for r in range(REPEATS)]
        grouped = [await group_commit(store, 200 + r) for r in range(REPEATS)]
        optimized = [await optimize_after_commits(store, r) for r in range(REPEATS)]
        upserts = [await registry_upserts(store, r) for r in range(REPEATS)]

    ms = 1000.0
    s_med = statistics.median(t for t, _ in single) * ms
    b_med = statistics.median(t for t, _ in batched) * ms
    g_med = statistics.median(t for t, _, _ in grouped) * ms
    g_flushes = statistics.median(f for _, f, _ in grouped)
    all_lat = sorted(x * ms for _, _, lat in grouped for x in lat)
    p50 = all_lat[len(all_lat) // 2]
    p99 = all_lat[min(len(all_lat) - 1, int(len(all_lat) * 0.99))]

    s_ver = max(v for _, v in single)
    b_ver = max(v for _, v in batched)
    print(f"lancedb {lancedb.__version__}, pyarrow {pa.__version__}; {ROWS} rows x {DIMS} float32; median of {REPEATS} runs")
    print(f"{ROWS} single-row appends: {s_med:7.1f} ms total, {s_med / ROWS:5.2f} ms per row; table version after: {s_ver}")
    print(f"one {ROWS}-row append:    {b_med:7.1f} ms total, {b_med / ROWS:5.3f} ms per row; table version after: {b_ver}")
    print(
        f"GroupCommitter ({WINDOW_S * 1000:g} ms window, {MAX_ROWS} max rows), {ROWS} concurrent 1-row submits: "
        f"{g_med:.1f} ms total in {g_flushes:g} flush(es); per-submit wait p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    print(f"optimize() of a table after {OPTIMIZE_EVERY} one-row commits: {statistics.median(optimized) * ms:.1f} ms")
    print(f"one-row upsert (merge_insert) into a registry_agents table: {statistics.median(upserts) * ms:.1f} ms median")
    print(f"single-row / one batched append: {s_med / b_med:.0f}x; single-row / group commit: {s_med / g_med:.0f}x")


if __name__ == "__main__":
    asyncio.run(main())

"""Partition move time against partition size: resizes of the scene shards (``actors.resize``), 2 -> 5 and 4 -> 5.

For each size, a fresh LanceDB under a temporary directory gets that many
cells (384-dim vectors, 8 tenants x 64 projects, each row in the table its
``(tenant, project)`` routes to under the old count, with its ``propagated``
row), written straight to the tables as the scene shards would have. Then, in
the same process:

- **baseline**: a cold load of the old shards' tables (``RowTable.load``),
  what every scene shard does when it starts;
- **resize**: ``settle_layout`` to the new count (the virtual partitions whose
  owner changes are copied to their new owners, the manifest switched, the
  old owners' moved rows removed by fragment rewrite).

Printed: virtual partitions moved, rows moved (of all rows), seconds, rows/s,
and the resize as a multiple of the cold load. Run:
``.venv/bin/python -m bench.resize [--sizes 1000,10000,50000] [--moves 2:5,4:5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from actors.manifest import DeploymentManifest
from actors.resize import settle_layout
from actors.schemas import MANIFEST_SCHEMA, PROPAGATED_SCHEMA, cell_schema
from actors.storage import LanceStore, StorageConfig
from bench.common import banner
from mesh.layout import Move
from mesh.sharding import VIRTUAL_PARTITIONS, partition_key, shard_for

DIMS = 384


def synthetic_cells(count: int, rng: np.random.Generator) -> pa.Table:
    tenants = [f"tenant-{i % 8}" for i in range(count)]
    projects = [f"project-{(i // 8) % 64}" for i in range(count)]
    vectors = rng.standard_normal((count, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = pa.scalar(int(time.time() * 1e6), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    columns = {
        "id": [str(uuid.UUID(int=int(rng.integers(1 << 62)) << 64 | i)) for i in range(count)],
        "tenant_id": tenants,
        "project_id": projects,
        "cell_type": ["Fact"] * count,
        "content": [f"synthetic cell {i} about a topic" for i in range(count)],
        "salience": np.full(count, 0.5, dtype=np.float32),
        "source_agent": [f"agent-{i % 16}" for i in range(count)],
        "created_at": pa.array([now.value] * count, pa.timestamp("us", tz="UTC")),
        "last_accessed": pa.array([now.value] * count, pa.timestamp("us", tz="UTC")),
        "layer": ["L0"] * count,
        "scene_id": [None] * count,
        "session_id": [None] * count,
        "superseded_by": [None] * count,
        "tombstone": [False] * count,
        "engine": ["hash-384"] * count,
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMS),
    }
    return pa.table(columns, schema=cell_schema(DIMS))


async def prepare(root: Path, count: int, old: int) -> StorageConfig:
    config = StorageConfig(str(root / "lance"))
    store = await LanceStore.open(config)
    manifest = DeploymentManifest(await store.keyed("deployment_manifest", MANIFEST_SCHEMA, "key"))
    await manifest.claim({"scene_shards": old, "beacon_sets": 2, "inbox_shards": 2, "embedding_engine": "hash-384", "dims": DIMS})
    cells = synthetic_cells(count, np.random.default_rng(count))
    keys = zip(cells["tenant_id"].to_pylist(), cells["project_id"].to_pylist(), strict=True)
    shard = [shard_for(partition_key(t, p), old) for t, p in keys]
    for index in range(old):
        rows = cells.take([i for i, s in enumerate(shard) if s == index])
        await (await store.table(f"scene_shard_{index}_cells", cell_schema(DIMS), "id")).append(rows)
        walked = pa.table({"cell_id": rows["id"]}, schema=PROPAGATED_SCHEMA)
        await (await store.table(f"scene_shard_{index}_propagated", PROPAGATED_SCHEMA)).append(walked)
    return config


async def cold_load(config: StorageConfig, old: int) -> float:
    store = await LanceStore.open(config)
    started = time.perf_counter()
    for index in range(old):
        await (await store.table(f"scene_shard_{index}_cells", cell_schema(DIMS), "id")).load()
        await (await store.table(f"scene_shard_{index}_propagated", PROPAGATED_SCHEMA)).load()
    return time.perf_counter() - started


async def measure(count: int, old: int, new: int) -> tuple[Move, float, float]:
    with tempfile.TemporaryDirectory(prefix="memesh-resize-") as tmp:
        config = await prepare(Path(tmp), count, old)
        baseline = await cold_load(config, old)
        started = time.perf_counter()
        settled = await settle_layout(config, {"scene_shard": new, "beacon_set": 2, "inbox_shard": 2}, DIMS, running=False)
        elapsed = time.perf_counter() - started
        (move,) = settled.moves
        return move, elapsed, baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000", help="cells per run, comma-separated")
    parser.add_argument("--moves", default="2:5,4:5", help="old:new scene shard counts, comma-separated")
    args = parser.parse_args()
    banner("resize: scene shards, against a cold load of the old shards (same process)")
    print(
        "| move | cells | partitions moved | rows moved (of all) | cold load (baseline) | resize | rows/s | resize / cold load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for old, new in (tuple(int(n) for n in m.split(":")) for m in args.moves.split(",")):
        for count in (int(s) for s in args.sizes.split(",")):
            move, elapsed, baseline = asyncio.run(measure(count, old, new))
            share = move.rows / (2 * count)
            print(
                f"| {old} -> {new} | {count:,} | {move.partitions:,} of {VIRTUAL_PARTITIONS:,} | {move.rows:,} ({share:.0%})"
                f" | {baseline * 1000:.0f} ms | {elapsed * 1000:.0f} ms | {move.rows / elapsed:,.0f}"
                f" | {elapsed / baseline:.1f}x |"
            )


if __name__ == "__main__":
    main()

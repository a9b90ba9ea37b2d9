"""CPU per written cell and its walk, against the model's CPU per text (issue 12's "walk CPU per cell").

In one process: the real actor classes in-process (real LanceDB under a
temporary directory, the ``hash`` engine, so no model time hides in the
figures), 4 tenants with 5 listeners each and 1,000 cells already written;
then single-cell writes one after another, each waited for until its walk has
delivered (``settle``). CPU is read per thread from ``/proc`` (the Python
thread against LanceDB's own threads) and divided by the cells written.

Runs, in this order:
- **writes only**: ``propagation.enabled`` off, so no walk starts;
- **write + walk, soft window 20 ms**: soft state (agent nodes, walk marks)
  committed about as often as before ``storage.soft_commit_window_ms`` existed
  (agent nodes every 20 ms, walk marks every 50 ms);
- **write + walk, soft window 1 s**: the default ``storage.soft_commit_window_ms``.

The walk's CPU per cell is the difference between a walking run and the
writes-only run. The baseline is the model's CPU per text: ``minilm`` encoding
batches of 64 in this process (CPU time of every thread, so torch's intra-op
threads count). Run: ``.venv/bin/python -m bench.walk_cost [--writes 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import SentenceGen, banner, print_table
from bench.walk_messages import TOPICS, _agent
from cluster.compose import build_memesh
from cluster.settings import Settings
from head.facade import Memesh
from mesh.model import CellType, NewCell


def thread_cpu() -> Counter[str]:
    """CPU seconds of this process's threads, summed per thread name."""
    out: Counter[str] = Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended between the listing and the read
            continue
        out["lancedb" if name.startswith("lance") else "python"] += (int(fields[11]) + int(fields[12])) / tick
    return out


async def _settle(core: Memesh, shards: int) -> None:
    for i in range(shards):
        await core.directory.scene_shard(i).settle(120.0)


async def run(data_dir: Path, writes: int, walks: bool, soft_ms: float) -> dict[str, float]:
    """Milliseconds of CPU per written cell (and its walk), per thread kind, and wall per cell."""
    settings = Settings(
        ray={"in_process": True, "scene_shards": 2, "beacon_sets": 2, "inbox_shards": 2},
        embedding={"engine": "hash"},
        storage={"data_dir": data_dir, "soft_commit_window_ms": soft_ms},
        propagation={"enabled": walks},
        observatory={"enabled": False},
    )
    core = build_memesh(settings)
    try:
        writers = []
        for t in range(4):
            for n in range(5):
                await core.inbox.place_beacon(await _agent(core, f"t{t}"), TOPICS[(t + n) % len(TOPICS)])
            writers.append(await _agent(core, f"t{t}"))
        for w, writer in enumerate(writers):
            texts = [f"{TOPICS[(i + w) % len(TOPICS)]} note {i} about item {i % 37}" for i in range(250)]
            for j in range(0, 250, 50):
                cells = [NewCell(content=t, cell_type=CellType.FACT, salience=0.6) for t in texts[j : j + 50]]
                await core.memory.write_cells(writer, cells)
        await _settle(core, 2)
        await asyncio.sleep(1.5)  # the warm-up's soft commits land before the timing
        before, started = thread_cpu(), time.perf_counter()
        for n in range(writes):
            text = f"{TOPICS[n % len(TOPICS)]} fresh {n} runbook"
            await core.memory.write_cells(writers[n % 4], [NewCell(content=text, cell_type=CellType.FACT, salience=0.8)])
            await _settle(core, 2)
        wall = time.perf_counter() - started
        after = thread_cpu()
        per = {kind: (after[kind] - before[kind]) * 1000 / writes for kind in after}
        per["wall"] = wall * 1000 / writes
        return per
    finally:
        await core.close()


def model_cost_per_text() -> tuple[float, float]:
    """(CPU ms, wall ms) per text of ``minilm`` in batches of 64 (CPU of every thread of this process)."""
    from head.embedding import make_engine

    engine = make_engine("minilm")
    gen = SentenceGen(7)
    for _ in range(3):
        engine.encode(gen.many(64))
    texts = gen.many(64 * 12)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(12):
        engine.encode(texts[i * 64 : (i + 1) * 64])
    return (time.process_time() - cpu) * 1000 / len(texts), (time.perf_counter() - wall) * 1000 / len(texts)


async def main_async(writes: int) -> None:
    banner(f"CPU per written cell and its walk ({writes} single-cell writes, each settled)")
    model, model_wall = model_cost_per_text()
    with tempfile.TemporaryDirectory(prefix="memesh-walk-cost-") as tmp:
        base = await run(Path(tmp) / "off", writes, False, 1000.0)
        runs = [
            ("writes only (no walks)", base),
            ("write + walk, soft window 20 ms", await run(Path(tmp) / "w20", writes, True, 20.0)),
            ("write + walk, soft window 1 s", await run(Path(tmp) / "w1000", writes, True, 1000.0)),
        ]
    rows = []
    for name, per in runs:
        total = per["python"] + per.get("lancedb", 0.0)
        walk = total - (base["python"] + base.get("lancedb", 0.0))
        walk_cell = "" if per is base else f"{walk:.1f} ms ({walk / model:.2f}x)"
        lance = per.get("lancedb", 0.0)
        rows.append([name, f"{per['wall']:.1f} ms", f"{per['python']:.1f}", f"{lance:.1f}", f"{total:.1f}", walk_cell])
    headers = ["run", "wall per cell", "CPU python", "CPU lancedb", "CPU total (ms/cell)", "walk CPU per cell (vs model)"]
    print_table(headers, rows)
    print(f"baseline: minilm in batches of 64, this process: {model:.1f} ms CPU per text ({model_wall:.1f} ms wall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main_async(args.writes))


if __name__ == "__main__":
    main()

"""What ``storage.fsync`` costs: acknowledged writes with and without syncing the file system.

Without it (the default) a 2xx means the rows are committed to the operating
system's page cache: they survive a crash of any memesh process (kill -9, OOM)
but not a machine crash or power loss. With ``storage.fsync = true`` every
commit also calls ``syncfs`` on the data dir's file system before the answer,
so a 2xx survives a power loss too (docs/storage.md).

Two ``hash``-engine servers (so the model does not hide the storage cost), one
after the other, each measured with the same writes:

- single-cell writes, 1 client (p50, p99, writes/s);
- single-cell writes, 8 concurrent clients (writes/s: group commit shares a sync);
- ``cells:batch`` of 64, 1 client (cells/s).

The baseline is the server with ``fsync = false`` in the same run. The raw
cost of one ``syncfs`` of the data dir's file system is measured in this
process as well (it depends on what else is dirty on that file system).

Run: ``.venv/bin/python -m bench.durability [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from actors.storage import sync_file_system
from bench.common import MemeshServer, Report, SentenceGen, Stats, banner, machine_info

SECTION = "durability"


@dataclass(frozen=True)
class Plan:
    single: int
    concurrent: int
    batches: int
    syncs: int


FULL = Plan(single=400, concurrent=1600, batches=40, syncs=200)
QUICK = Plan(single=60, concurrent=160, batches=6, syncs=20)


@dataclass
class Figures:
    single: Stats
    single_rate: float
    concurrent_rate: float
    batch_rate: float


def _write(http: httpx.Client, text: str) -> None:
    response = http.post("/v1/cells", json={"content": text, "cell_type": "Fact"})
    if response.status_code != 201:
        raise RuntimeError(f"write answered {response.status_code}: {response.text[:200]}")


async def _concurrent(server: MemeshServer, key: str, gen: SentenceGen, total: int, clients: int = 8) -> float:
    texts = [gen.sentence() for _ in range(total)]
    queue = list(texts)

    async def worker(http: httpx.AsyncClient) -> None:
        while queue:
            response = await http.post("/v1/cells", json={"content": queue.pop(), "cell_type": "Fact"})
            if response.status_code != 201:
                raise RuntimeError(f"write answered {response.status_code}")

    async with server.async_client(key, clients) as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(clients)))
        return total / (time.perf_counter() - started)


def measure(fsync: bool, plan: Plan) -> Figures:
    env = {"MEMESH_STORAGE__FSYNC": "true" if fsync else "false", "MEMESH_RATE_LIMITS__WRITE__RATE": "0"}
    gen = SentenceGen(7)
    with MemeshServer("hash", env=env) as server:
        key = server.issue_key()
        with server.client(key) as http:
            for _ in range(10):
                _write(http, gen.sentence())
            times = []
            started = time.perf_counter()
            for _ in range(plan.single):
                t0 = time.perf_counter()
                _write(http, gen.sentence())
                times.append(time.perf_counter() - t0)
            single_rate = plan.single / (time.perf_counter() - started)
            concurrent_rate = asyncio.run(_concurrent(server, key, gen, plan.concurrent))
            started = time.perf_counter()
            for _ in range(plan.batches):
                cells = [{"content": gen.sentence(), "cell_type": "Fact"} for _ in range(64)]
                if http.post("/v1/cells:batch", json={"cells": cells}).status_code != 201:
                    raise RuntimeError("a batch write failed")
            batch_rate = plan.batches * 64 / (time.perf_counter() - started)
        server.settle(120)
    return Figures(Stats.of(times), single_rate, concurrent_rate, batch_rate)


def syncfs_cost(plan: Plan) -> Stats:
    here = Path.cwd()
    times = []
    for _ in range(plan.syncs):
        t0 = time.perf_counter()
        sync_file_system(here)
        times.append(time.perf_counter() - t0)
    return Stats.of(times)


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.durability", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few writes: a smoke run")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    report = report or Report(info={"machine": machine_info()})
    banner("durability: storage.fsync off (baseline) and on")
    plain = measure(False, plan)
    synced = measure(True, plan)
    sync = syncfs_cost(plan)
    base = "fsync off, same run"
    report.add(SECTION, "single write p50, fsync on", synced.single.p50_ms, "ms", base, plain.single.p50_ms)
    report.add(SECTION, "single write p99, fsync on", synced.single.p99_ms, "ms", base, plain.single.p99_ms)
    report.add(SECTION, "single writes, 1 client, fsync on", synced.single_rate, "writes/s", base, plain.single_rate)
    report.add(SECTION, "single writes, 8 clients, fsync on", synced.concurrent_rate, "writes/s", base, plain.concurrent_rate)
    report.add(SECTION, "batched writes (64), fsync on", synced.batch_rate, "cells/s", base, plain.batch_rate)
    report.add(SECTION, "one syncfs of the data dir's file system, p50", sync.p50_ms, "ms")
    report.print_table(SECTION)
    return report


if __name__ == "__main__":
    main()

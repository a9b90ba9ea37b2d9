"""Recall during a write burst, beside recall on the idle server (issue 12: "recall p99 during a write burst
within 2x of idle").

One ``hash`` server (the engine costs next to nothing, so what a reader meets is the burst's walks and
commits, not the model), holding ``--cells`` cells over seven projects and a few listeners with beacons,
so the burst's walks deliver:

- **idle**: one client recalls ``--requests`` times (k 10, after 20 unreported warm-ups);
- **burst**: ``--writers`` clients post ``cells:batch`` of 64 fresh cells each into the same tenant for
  ``--burst-s`` seconds (a 429 waits its ``Retry-After``, or 0.2 s, and counts); one client recalls
  without pause from the burst's start until the last walk the burst started has drained
  (``memesh_walk_backlog`` 0);
- **idle after**: once the walks have drained, the same ``--requests`` recalls again. The burst adds
  several times the cells the server held (10k to about 56k by default), and a recall searches them all,
  so the recalls during the drain are held against idle at the size they searched as well;
- the figures: recall p50 and p99 idle and during the burst (the bar: p99 within 2x of idle's), the
  cells the burst wrote and their rate, the refusals, and how long the walks ran on after the last write;
  and the server's CPU by process role per written cell, during the burst and during the drain after it.

Run: ``.venv/bin/python -m bench.burst [--cells 10000] [--burst-s 20] [--writers 2] [--requests 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from bench.common import JSON_HEADERS, LoadClient, MemeshServer, Report, SentenceGen, Stats, banner, cpu_line
from bench.concurrency import concurrent_recalls
from bench.writes import BATCH

SECTION = "burst"
SEED = 4242
PROJECTS = [f"burst-{n}" for n in range(7)]
INTERESTS = ["replication lag on the primary", "certificate expiry", "queue consumer stalls", "disk pressure on nodes"]


async def backlog(client: LoadClient) -> float:
    text = (await client.get("/metrics")).text
    found = [line for line in text.splitlines() if line.startswith("memesh_walk_backlog ")]
    return float(found[0].split()[1]) if found else 0.0


async def load_corpus(server: MemeshServer, key: str, gen: SentenceGen, cells: int) -> None:
    async with server.load_client(key, 4) as client:
        for start in range(0, cells, BATCH):
            body = {"cells": [gen.cell(t, PROJECTS[(start // BATCH) % len(PROJECTS)]) for t in gen.many(BATCH)]}
            response = await client.post("/v1/cells:batch", content=json.dumps(body), headers=JSON_HEADERS)
            if response.status_code == 429:
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                continue  # a few cells fewer: the corpus's size is approximate
            response.raise_for_status()


async def burst(server: MemeshServer, key: str, gen: SentenceGen, writers: int, seconds: float) -> dict[str, float]:
    """Writers for ``seconds`` and one reader until their walks drain; the reader's latencies and the counts."""
    written = refused = 0
    latencies: list[float] = []
    draining: list[float] = []  # the reader's latencies after the last write (the walks alone)
    while_writing: list[float] = []  # those of recalls sent while the writers wrote
    writing = asyncio.Event()
    writing.set()
    questions = gen.many(2000)

    async def writer(client: LoadClient, n: int) -> None:
        nonlocal written, refused
        while writing.is_set():
            body = {"cells": [gen.cell(t, PROJECTS[(n + written) % len(PROJECTS)]) for t in gen.many(BATCH)]}
            response = await client.post("/v1/cells:batch", content=json.dumps(body), headers=JSON_HEADERS)
            if response.status_code == 429:
                refused += 1
                await asyncio.sleep(min(1.0, float(response.headers.get("retry-after", "0.2"))))
                continue
            response.raise_for_status()
            written += BATCH

    async def reader(client: LoadClient, done: asyncio.Event) -> None:
        i = 0
        while not done.is_set():
            t0 = time.perf_counter()
            after_writes = not writing.is_set()
            response = await client.post("/v1/recall", json={"text": questions[i % len(questions)], "k": 10})
            latencies.append(time.perf_counter() - t0)
            (draining if after_writes else while_writing).append(latencies[-1])
            response.raise_for_status()
            i += 1

    async with server.load_client(key, writers + 2) as client:
        done = asyncio.Event()
        read = asyncio.create_task(reader(client, done))
        started, at_start = time.perf_counter(), server.cpu()
        tasks = [asyncio.create_task(writer(client, n)) for n in range(writers)]
        await asyncio.sleep(seconds)
        writing.clear()
        await asyncio.gather(*tasks)
        wrote_s, at_last_write = time.perf_counter() - started, server.cpu()
        for _ in range(3000):  # bounded: 10 minutes of polls
            if await backlog(client) == 0:
                break
            await asyncio.sleep(0.2)
        drain_s = time.perf_counter() - started - wrote_s
        done.set()
        await read
    # where the CPU went, per cell the burst wrote: while writing, and while only its walks (and the reader) ran
    print(f"    burst, per written cell: {cpu_line(at_last_write.since(at_start), written)}", flush=True)
    print(f"    drain, per written cell: {cpu_line(server.cpu().since(at_last_write), written)}", flush=True)
    stats, drain, wrote = Stats.of(latencies), Stats.of(draining or [0.0]), Stats.of(while_writing or [0.0])
    phases = {"drain_p50_ms": drain.p50_ms, "drain_p99_ms": drain.p99_ms, "drain_n": len(draining)}
    phases |= {"writing_p50_ms": wrote.p50_ms, "writing_p99_ms": wrote.p99_ms, "writing_n": len(while_writing)}
    return {"written": written, "wrote_s": wrote_s, "drain_s": drain_s, "refused": refused, **phases, **vars(stats)}


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.burst", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--burst-s", type=float, default=20.0)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=300, help="recalls on the idle server")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server (repeatable)")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    banner(f"recall during a write burst (hash, {args.cells} cells, {args.writers} writers for {args.burst_s:.0f} s, env {env})")
    own, report = report is None, report or Report()
    gen = SentenceGen(SEED)
    with MemeshServer("hash", env=env) as server:
        key = server.issue_key(name="bench-burst")
        asyncio.run(load_corpus(server, key, gen, args.cells))
        with server.client(key) as http:  # listeners of the same tenant: the burst's walks deliver
            for n, interest in enumerate(INTERESTS):
                listener = server.issue_key(role="Reader", name=f"listener-{n}")
                http.post("/v1/beacons", json={"interest": interest}, headers={"x-service-key": listener}).raise_for_status()
        server.settle(600.0)
        asyncio.run(concurrent_recalls(server, key, gen.many(20), 1))  # warm-up
        idle = Stats.of(asyncio.run(concurrent_recalls(server, key, gen.many(args.requests), 1)).latencies)
        report.add(SECTION, "recall, idle, p50", idle.p50_ms, "ms")
        report.add(SECTION, "recall, idle, p99", idle.p99_ms, "ms")
        during = asyncio.run(burst(server, key, gen, args.writers, args.burst_s))
        name = f"recall during the burst, p50 (n={during['n']:.0f})"
        report.add(SECTION, name, during["p50_ms"], "ms", "idle p50", idle.p50_ms)
        report.add(SECTION, "recall during the burst, p99", during["p99_ms"], "ms", "idle p99", idle.p99_ms)
        name = f"recall while the writers wrote, p50 (n={during['writing_n']:.0f})"
        report.add(SECTION, name, during["writing_p50_ms"], "ms", "idle p50", idle.p50_ms)
        report.add(SECTION, "recall while the writers wrote, p99", during["writing_p99_ms"], "ms", "idle p99", idle.p99_ms)
        name = f"recall while only walks ran (after the last write), p50 (n={during['drain_n']:.0f})"
        report.add(SECTION, name, during["drain_p50_ms"], "ms", "idle p50", idle.p50_ms)
        report.add(SECTION, "recall while only walks ran, p99", during["drain_p99_ms"], "ms", "idle p99", idle.p99_ms)
        report.add(SECTION, "cells the burst wrote", during["written"], "cells")
        report.add(SECTION, "burst write rate", during["written"] / during["wrote_s"], "cells/s")
        report.add(SECTION, "batches refused (429) in the burst", during["refused"], "batches")
        report.add(SECTION, "walks running after the last write", during["drain_s"], "s")
        sustained = during["written"] / (during["wrote_s"] + during["drain_s"])
        report.add(SECTION, "sustained: cells / (burst + their walks' drain)", sustained, "cells/s")
        server.settle(600.0)
        asyncio.run(concurrent_recalls(server, key, gen.many(20), 1))  # warm-up
        after = Stats.of(asyncio.run(concurrent_recalls(server, key, gen.many(args.requests), 1)).latencies)
        held = f"idle after the drain ({args.cells + during['written']:,.0f} cells)"
        report.add(SECTION, f"recall, {held}, p50", after.p50_ms, "ms")
        report.add(SECTION, f"recall, {held}, p99", after.p99_ms, "ms")
        name = "recall during the burst, p99 (against idle after)"
        report.add(SECTION, name, during["p99_ms"], "ms", "idle after p99", after.p99_ms)
        name = "recall while only walks ran, p50 (against idle after)"
        report.add(SECTION, name, during["drain_p50_ms"], "ms", "idle after p50", after.p50_ms)
        name = "recall while only walks ran, p99 (against idle after)"
        report.add(SECTION, name, during["drain_p99_ms"], "ms", "idle after p99", after.p99_ms)
        name = "recall while the writers wrote, p99 (against idle after)"
        report.add(SECTION, name, during["writing_p99_ms"], "ms", "idle after p99", after.p99_ms)
    if own:
        report.print_table()
    return report


if __name__ == "__main__":
    main()

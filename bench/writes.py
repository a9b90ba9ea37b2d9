"""Cell writes per second through REST, beside the embedding model's own throughput.

One server (``--engine``, ``minilm`` unless given); the server embeds every text (no caller vectors). Modes:

- single, 1 client: sequential ``POST /v1/cells`` on one keep-alive connection;
- single, 16 clients: 16 concurrent ``POST /v1/cells`` loops (asyncio + aiohttp: `bench.http_clients`),
  so the server's micro-batching embedder can gather texts into one encode;
- batched, 1 client and 4 clients: ``POST /v1/cells:batch`` with 64 cells each.

The limit is measured in this process with the same engine, while the server
is idle, before and after the REST runs: ``engine.encode`` on batches of 64
(the model's throughput) and on one text at a time (the unbatched rate). The
ratios use the higher of the two batched measurements, so a slow moment of the
machine cannot flatter them. Every text is fresh (generated from a seeded
random); all cells go to one project.

Every acknowledged write also starts an energy walk in the background (default
settings). After each mode the benchmark waits (bounded) until the server is
idle again and prints the drain time, so each mode starts clean, and reports a
second rate: cells / (run time + drain time), the rate the server sustains
when the walks are counted.

Run: ``.venv/bin/python -m bench.writes [--quick] [--engine minilm|minilm-onnx|minilm-bf16] [--modes batched-1,batched-4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    JSON_HEADERS,
    LoadClient,
    MemeshServer,
    Report,
    SentenceGen,
    Stats,
    banner,
    cpu_line,
    loadavg,
    machine_info,
)
from bench.http_clients import Answer

SEED = 4242
PROJECT = "bench-writes"
BATCH = 64
SECTION = "writes"


@dataclass(frozen=True)
class Plan:
    model_batches: int  # timed encode batches of 64 (each measurement)
    model_singles: int  # timed one-text encodes
    single_1: int  # writes, one client
    single_16: int  # writes, 16 clients in all
    batched_1: int  # batches of 64, one client
    batched_4: int  # batches of 64, 4 clients in all
    warmup: int
    settle_s: float  # longest wait for the energy walks of a run to drain


FULL = Plan(
    model_batches=30, model_singles=150, single_1=300, single_16=1600, batched_1=32, batched_4=32, warmup=10, settle_s=240
)
QUICK = Plan(model_batches=4, model_singles=20, single_1=40, single_16=160, batched_1=4, batched_4=8, warmup=3, settle_s=60)


@dataclass
class ModelRate:
    batched: float  # texts/s, batches of 64
    single: float  # texts/s, one text per encode
    single_p50_ms: float
    idle_single_p50_ms: float  # one text after IDLE_S with the model idle: what a lone request's encode starts from


IDLE_S = 0.02  # about the gap a lone client's write leaves between two encodes (HTTP, the shard's write, the answer)


def batched_rate(engine: Any, gen: SentenceGen, batches: int) -> float:
    """Texts a second through ``engine.encode`` in ``batches`` back-to-back batches of 64 fresh sentences."""
    texts = gen.many(batches * BATCH)
    started = time.perf_counter()
    for i in range(batches):
        engine.encode(texts[i * BATCH : (i + 1) * BATCH])
    return len(texts) / (time.perf_counter() - started)


def model_rate(engine: Any, gen: SentenceGen, plan: Plan) -> ModelRate:
    """The engine's rate in batches of 64, one text at a time back to back (one encode), and one text after
    ``IDLE_S`` with the model idle: on this machine the last is 1.2 to 1.3x one encode, on one thread as on
    two (its threads and caches gone cold), and is where a lone request's encode starts."""
    for _ in range(3):  # warm-up: the first batches of new shapes are slow
        engine.encode(gen.many(BATCH))
    batched = batched_rate(engine, gen, plan.model_batches)
    singles = gen.many(plan.model_singles)
    times = []
    for text in singles:
        t0 = time.perf_counter()
        engine.encode([text])
        times.append(time.perf_counter() - t0)
    single = len(singles) / sum(times)
    idle = []
    for text in gen.many(max(10, plan.model_singles // 2)):
        time.sleep(IDLE_S)
        t0 = time.perf_counter()
        engine.encode([text])
        idle.append(time.perf_counter() - t0)
    return ModelRate(batched, single, Stats.of(times).p50_ms, Stats.of(idle).p50_ms)


# ------------------------------------------------------------------ REST runs
@dataclass
class Run:
    cells: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.cells / self.seconds


def _check(response: httpx.Response | Answer, expected: int) -> None:
    if response.status_code != 201:
        raise RuntimeError(f"write answered {response.status_code}: {response.text[:300]}")
    if expected > 1 and len(response.json()) != expected:
        raise RuntimeError("batch answer has the wrong number of nodes")


async def concurrent_writes(
    server: MemeshServer, key: str, gen: SentenceGen, clients: int, requests: int, batch: int, client_kind: str = "lean"
) -> Run:
    """``requests`` writes of ``batch`` cells each (``batch == 1``: ``POST /v1/cells``), from ``clients`` loops
    (``client_kind`` as ``MemeshServer.load_client``)."""
    path = "/v1/cells" if batch == 1 else "/v1/cells:batch"
    bodies = []
    for _ in range(requests):
        cells = [gen.cell(text, PROJECT) for text in gen.many(batch)]
        bodies.append(json.dumps(cells[0] if batch == 1 else {"cells": cells}))
    queue: asyncio.Queue[str] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    latencies: list[float] = []

    async def worker(client: LoadClient) -> None:
        while True:
            try:
                body = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.perf_counter()
            response = await client.post(path, content=body, headers=JSON_HEADERS)
            latencies.append(time.perf_counter() - t0)
            _check(response, batch)

    async with server.load_client(key, clients, client_kind) as client:
        # open the connections before the clock starts
        await asyncio.gather(*(client.get("/healthz") for _ in range(clients)))
        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker(client) for _ in range(clients))), timeout=1800)
        seconds = time.perf_counter() - started
    return Run(requests * batch, seconds, latencies)


def sequential_writes(server: MemeshServer, key: str, gen: SentenceGen, requests: int, batch: int, warmup: int) -> Run:
    path = "/v1/cells" if batch == 1 else "/v1/cells:batch"
    latencies: list[float] = []
    with server.lean_client(key) as client:
        total = 0.0
        for i in range(warmup + requests):
            cells = [gen.cell(text, PROJECT) for text in gen.many(batch)]
            body = json.dumps(cells[0] if batch == 1 else {"cells": cells})
            t0 = time.perf_counter()
            response = client.post(path, content=body, headers=JSON_HEADERS)
            elapsed = time.perf_counter() - t0
            _check(response, batch)
            if i >= warmup:
                latencies.append(elapsed)
                total += elapsed
    return Run(requests * batch, total, latencies)


MODES = ("single-1", "single-16", "batched-1", "batched-4")


def run(plan: Plan, report: Report, engine_name: str = "minilm", only: tuple[str, ...] = MODES) -> None:
    from head.embedding import make_engine

    banner(f"writes, engine={engine_name} (the server embeds every text), modes {', '.join(only)}")
    gen = SentenceGen(SEED)
    engine = make_engine(engine_name)
    engine.encode(["load the model"])
    with MemeshServer(engine_name) as server:
        print(f"    server up in {server.startup_s:.1f} s", flush=True)
        key = server.issue_key(name="bench-writes")
        before = model_rate(engine, gen, plan)
        print(
            f"    model in this process: {before.batched:.0f} texts/s in batches of {BATCH}; "
            f"{before.single:.0f} texts/s one at a time (p50 {before.single_p50_ms:.1f} ms)",
            flush=True,
        )
        # warm the server's path (model shapes, actors, LanceDB tables), then let its walks finish
        asyncio.run(concurrent_writes(server, key, gen, 4, 8, BATCH))
        server.settle(plan.settle_s)
        runs: dict[str, Run] = {}
        drains: dict[str, tuple[float, bool]] = {}
        cpu: dict[str, str] = {}
        load: dict[str, list[float]] = {}
        modes: list[tuple[str, Any]] = [
            ("single, 1 client", lambda: sequential_writes(server, key, gen, plan.single_1, 1, plan.warmup)),
            ("single, 16 clients", lambda: asyncio.run(concurrent_writes(server, key, gen, 16, plan.single_16, 1))),
            (f"batched {BATCH}, 1 client", lambda: sequential_writes(server, key, gen, plan.batched_1, BATCH, 1)),
            (f"batched {BATCH}, 4 clients", lambda: asyncio.run(concurrent_writes(server, key, gen, 4, plan.batched_4, BATCH))),
        ]
        modes = [mode for mode, flag in zip(modes, MODES, strict=True) if flag in only]
        for name, go in modes:
            l0 = loadavg()
            snap = server.cpu()
            result = go()
            delta = server.cpu().since(snap)
            runs[name] = result
            load[name] = [l0, loadavg()]
            requests = len(result.latencies)
            cpu[name] = cpu_line(delta, requests)
            stats = Stats.of(result.latencies)
            print(
                f"    {name}: {result.rate:.1f} cells/s over {result.cells:,} cells in {result.seconds:.1f} s; "
                f"request p50 {stats.p50_ms:.1f} ms, p99 {stats.p99_ms:.1f} ms",
                flush=True,
            )
            print(f"      {cpu[name]}", flush=True)
            drains[name] = server.settle(plan.settle_s)
            drain, settled = drains[name]
            print(
                f"      energy walks of these writes: {'drained' if settled else 'STILL RUNNING'} {drain:.1f} s after the last "
                f"acknowledgement -> {result.cells / (result.seconds + drain):.1f} cells/s end to end",
                flush=True,
            )
        after = model_rate(engine, gen, plan)
        print(f"    model again: {after.batched:.0f} texts/s in batches of {BATCH}; {after.single:.0f} texts/s one at a time")

    limit = max(before.batched, after.batched)
    single_limit = max(before.single, after.single)
    label = f"model, batches of {BATCH} (best of 2)"
    for name, result in runs.items():
        report.add(SECTION, f"REST {name}", result.rate, "cells/s", label, limit)
    for name, result in runs.items():
        drain, settled = drains[name]
        report.add(
            SECTION,
            f"REST {name}, until its walks drained",
            result.cells / (result.seconds + drain),
            "cells/s",
            label,
            limit,
            note="" if settled else "walks still running at the bound",
        )
    if "single, 1 client" in runs:
        report.add(SECTION, "REST single, 1 client vs unbatched model", runs["single, 1 client"].rate, "cells/s",
                   "model, one text per encode (best of 2)", single_limit)  # fmt: skip
    report.info["writes"] = {
        "engine": engine_name,
        "model_batched_texts_per_s": [round(before.batched, 1), round(after.batched, 1)],
        "model_single_texts_per_s": [round(before.single, 1), round(after.single, 1)],
        "model_single_p50_ms": [round(before.single_p50_ms, 2), round(after.single_p50_ms, 2)],
        "runs": {
            name: {
                "cells": r.cells,
                "seconds": round(r.seconds, 2),
                "cells_per_s": round(r.rate, 1),
                "request_p50_ms": round(Stats.of(r.latencies).p50_ms, 2),
                "request_p99_ms": round(Stats.of(r.latencies).p99_ms, 2),
                "server_cpu": cpu[name],
                "walk_drain_s": round(drains[name][0], 1),
                "walks_drained": drains[name][1],
                "loadavg": load[name],
            }
            for name, r in runs.items()
        },
    }


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.writes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few writes: a smoke run")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--engine", default="minilm", choices=["minilm", "minilm-onnx", "minilm-bf16"], help="the server engine")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    only = tuple(m for m in args.modes.split(",") if m)
    if unknown := set(only) - set(MODES):
        parser.error(f"unknown modes {sorted(unknown)}")
    own = report is None
    report = report or Report(info={"machine": machine_info()})
    started = time.perf_counter()
    run(QUICK if args.quick else FULL, report, args.engine, only)
    report.info["writes_wall_s"] = round(time.perf_counter() - started, 1)
    if own:
        banner("write figures")
        report.print_table(SECTION)
        if args.json:
            report.to_json(args.json)
    return report


if __name__ == "__main__":
    main()

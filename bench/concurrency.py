"""Recall and single-cell writes under 1, 8 and 32 concurrent clients, beside the model's own rate.

The measuring harness of issue 12 (cost per request), run before any of its
changes so each later step can be held against it:

- the limit, measured in this process with the same engine while the server
  is idle: ``engine.encode`` in batches of 64 (the model's rate), one text
  at a time (one encode), and one text after 20 ms with the model idle (where
  a lone request's encode starts; the single write at 1 client is held against
  both); and the batched rate again just before and just after every run,
  each run held against the mean of its two (``Beside``);
- one server with ``--engine`` (the service's default, ``minilm-onnx``) holding
  ``--cells`` cells (written in batches, walks drained before anything is timed);
- ``POST /v1/recall`` (k 10) with 1, 8 and 32 concurrent clients: requests/s
  as a ratio to the model's batched rate, p50 and p99;
- single-cell ``POST /v1/cells`` with 1, 8 and 32 clients: the same figures,
  then the time until the last walk those writes started is done
  (``memesh_walks_total`` reaching the cells written, polled every 50 ms on a
  server whose ``health_cache_s`` is 0.05), and the sustained rate
  (cells / (run + that time));
- for each run, the server's CPU per request by process role (head, scene
  shards, ...), to say where the time goes.

The clients are aiohttp's (``bench.http_clients``): they share the server's two cores, and ``httpx``'s
own CPU (about 1 ms a request, four times aiohttp's) was counted against the server until 2026-12-04;
``--client httpx`` runs them as before.

With ``--profile DIR``, the head process is sampled with py-spy (``record``,
speedscope format) during the 8-client recall run and the 8-client write run.

Run: ``.venv/bin/python -m bench.concurrency [--cells 2000] [--requests 400] [--profile DIR] [--client lean|httpx]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import JSON_HEADERS, LoadClient, MemeshServer, Report, SentenceGen, banner, cpu_line, loadavg, percentile
from bench.http_clients import CLIENTS as CLIENT_KINDS
from bench.writes import BATCH, QUICK, Run, batched_rate, concurrent_writes, model_rate

SEED = 1212
BESIDE = "model batched, beside the run"
BESIDE_BATCHES = 8  # batches of 64 in each measurement beside a run (about 2 s)


class Beside:
    """The model's batched rate measured in this process just before and just after each run (the server
    idle both times), a run held against the mean of the two: this machine's speed moves by a fifth within
    minutes, and a rate taken once at the start let a run that met the bar read 56% and the next 65%."""

    def __init__(self, engine: Any, gen: SentenceGen) -> None:
        self._engine, self._gen = engine, gen
        self._before = self._measure()

    def _measure(self) -> float:
        rate = batched_rate(self._engine, self._gen, BESIDE_BATCHES)
        time.sleep(0.2)  # the model's threads stop spinning before the server is timed
        return rate

    def after_run(self) -> float:
        """The mean of the rate before the run just done and the rate now (the next run's before)."""
        after = self._measure()
        mean, self._before = (self._before + after) / 2, after
        print(f"    model batched beside the run: {mean:.0f} texts/s (before and after: {2 * mean - after:.0f}, {after:.0f})")
        return mean


SECTION = "concurrency"
CLIENTS = (1, 8, 32)


async def concurrent_recalls(
    server: MemeshServer, key: str, questions: list[str], clients: int, ranking: str | None = None, client_kind: str = "lean"
) -> Run:
    """Every question once, from ``clients`` loops on keep-alive connections (``ranking`` sent when given;
    ``client_kind`` as ``MemeshServer.load_client``)."""
    body_extra = {} if ranking is None else {"ranking": ranking}
    queue: asyncio.Queue[str] = asyncio.Queue()
    for text in questions:
        queue.put_nowait(text)
    latencies: list[float] = []

    async def worker(client: LoadClient) -> None:
        while True:
            try:
                text = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.perf_counter()
            response = await client.post("/v1/recall", json={"text": text, "k": 10, **body_extra}, headers=JSON_HEADERS)
            latencies.append(time.perf_counter() - t0)
            if response.status_code != 200:
                raise RuntimeError(f"recall answered {response.status_code}: {response.text[:300]}")

    async with server.load_client(key, clients, client_kind) as client:
        await asyncio.gather(*(client.get("/healthz") for _ in range(clients)))  # connections open before the clock
        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker(client) for _ in range(clients))), timeout=1800)
        seconds = time.perf_counter() - started
    return Run(len(questions), seconds, latencies)


@contextlib.contextmanager
def profiled(server: MemeshServer, directory: Path | None, name: str) -> Iterator[None]:
    """py-spy samples the head process while the block runs (when ``directory`` is given)."""
    spy = shutil.which("py-spy") or str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "py-spy")
    if directory is None or server.proc is None or not Path(spy).exists():
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"head-{name}.speedscope.json"
    command = [spy, "record", "--pid", str(server.proc.pid), "--format", "speedscope", "--output", str(out), "--rate", "200"]
    sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached before the clock starts
    try:
        yield
    finally:
        sampler.send_signal(2)  # SIGINT: py-spy writes its file and exits
        try:
            sampler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sampler.kill()
        print(f"    profile: {out}", flush=True)


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=400, help="recalls and writes per run")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument(
        "--engine", default="minilm-onnx", choices=["minilm", "minilm-onnx", "minilm-bf16"], help="the server's default"
    )
    parser.add_argument("--rankings", default="hybrid,dense", help="recall rankings to run, in order (comma-separated)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server (repeatable)")
    parser.add_argument("--client", default="lean", choices=CLIENT_KINDS, help="the load's HTTP client (bench.http_clients)")
    args = parser.parse_args(argv)
    env = {"MEMESH_SERVER__HEALTH_CACHE_S": "0.05", **dict(item.split("=", 1) for item in args.env)}
    rankings = [r for r in args.rankings.split(",") if r]
    from head.embedding import make_engine

    banner(
        f"recall and single writes under concurrency ({args.engine}, {args.cells} cells, {args.requests} requests a run, "
        f"recall rankings {rankings}, server env {env}, {args.client} clients)"
    )
    own, report = report is None, report or Report()
    gen = SentenceGen(SEED)
    engine = make_engine(args.engine)
    engine.encode(["load the model"])
    with MemeshServer(args.engine, env=env) as server:
        key = server.issue_key(name="bench-concurrency")
        model = model_rate(engine, gen, replace(QUICK, model_batches=12, model_singles=60))
        report.add(SECTION, "model, batches of 64", model.batched, "texts/s")
        report.add(SECTION, "model, one encode p50", model.single_p50_ms, "ms")
        idle_ms = model.idle_single_p50_ms
        report.add(SECTION, "model, one encode after idle, p50", idle_ms, "ms", "one encode", model.single_p50_ms)
        asyncio.run(concurrent_writes(server, key, gen, 4, max(1, args.cells // BATCH), BATCH))  # the corpus
        server.settle(600.0)
        asyncio.run(concurrent_recalls(server, key, gen.many(20), 4))  # warm-up
        beside = Beside(engine, gen)
        for ranking in rankings:
            for clients in CLIENTS:
                snap, load = server.cpu(), loadavg()
                with profiled(server, args.profile if clients == 8 else None, f"recall-{ranking}-8"):
                    recall = asyncio.run(concurrent_recalls(server, key, gen.many(args.requests), clients, ranking, args.client))
                print(f"    {ranking}: {cpu_line(server.cpu().since(snap), args.requests)}; load {load:.1f}", flush=True)
                p50, p99 = (percentile(recall.latencies, p) * 1000 for p in (50, 99))
                name = f"recall {ranking}, {clients} clients"
                report.add(SECTION, name, recall.rate, "req/s", BESIDE, beside.after_run())
                report.add(SECTION, f"{name}, p50", p50, "ms")
                report.add(SECTION, f"{name}, p99", p99, "ms")
        for clients in CLIENTS:
            snap, walks_before = server.cpu(), server.walks_decided()
            with profiled(server, args.profile if clients == 8 else None, "write-8"):
                written = asyncio.run(concurrent_writes(server, key, gen, clients, args.requests, 1, args.client))
            acked = server.cpu()
            drain_s, drained = server.wait_walked(walks_before + written.cells, 600.0)
            server.settle(600.0)  # quiet again before the next run (commits behind, access times); not timed
            model_now = beside.after_run()
            print(f"    acknowledged: {cpu_line(acked.since(snap), args.requests)}", flush=True)
            print(f"    with walks:   {cpu_line(server.cpu().since(snap), args.requests)}", flush=True)
            p50, p99 = (percentile(written.latencies, p) * 1000 for p in (50, 99))
            report.add(SECTION, f"single write, {clients} clients", written.rate, "writes/s", BESIDE, model_now)
            report.add(SECTION, f"single write, {clients} clients, p50", p50, "ms", "one encode", model.single_p50_ms)
            if clients == 1:
                cold = "single write, 1 clients, p50 (cold encode)"
                report.add(SECTION, cold, p50, "ms", "one encode after idle", model.idle_single_p50_ms)
            report.add(SECTION, f"single write, {clients} clients, p99", p99, "ms")
            sustained = written.cells / (written.seconds + drain_s)
            note = "" if drained else "walks still running at the bound"
            name = f"single write, {clients} clients, walks drained"
            report.add(SECTION, name, sustained, "cells/s", BESIDE, model_now, note)
    if own:
        report.print_table()
    return report


if __name__ == "__main__":
    main()

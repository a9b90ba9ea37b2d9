"""Throughput with 1, 2 and 4 heads on this machine (``memesh serve --workers N``), per core.

For each N, one server with N heads sharing the REST port (the kernel spreads
the clients' keep-alive connections over the heads), the same corpus written
first and its walks drained, then:

- ``POST /v1/recall`` (k 10) from ``--clients`` concurrent clients;
- single-cell ``POST /v1/cells`` from the same number of clients (acknowledged
  rate; the walks they start drain before the next run).

Each figure is printed beside the 1-head run of the same process (the
baseline), and per core: the requests/s divided by the cores the server's
process tree kept busy during the run. On a 2-core machine more heads cannot
add cores; what they can show is whether one head's event loop (HTTP, Ray
submission) was the limit.

``--pools 0,1``: also each head count with an embedder pool of that size
(``embedding.pool``: the model in embedder actors instead of in each head);
``0`` is the head-local engine.

Run: ``.venv/bin/python -m bench.heads [--engine hash|minilm] [--heads 1,2,4] [--pools 0] [--clients 16] [--requests 400]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from bench.common import MemeshServer, Report, SentenceGen, banner, percentile
from bench.concurrency import concurrent_recalls
from bench.writes import BATCH, Run, concurrent_writes

SEED = 1414
SECTION = "heads"


def wait_for_heads(server: MemeshServer, heads: int, timeout_s: float = 120.0) -> None:
    """Every head has joined the roster (``/healthz`` reports them; any head answers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{server.base_url}/healthz", timeout=5, trust_env=False).json()["detail"].get("heads") == heads:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{heads} heads did not all join within {timeout_s:.0f} s")


def busy_cores(delta: dict[str, float]) -> float:
    wall = delta.get("wall", 0.0) or 1e-9
    return sum(secs for role, secs in delta.items() if role != "wall") / wall


def one_run(server: MemeshServer, key: str, gen: SentenceGen, name: str, clients: int, requests: int) -> Run:
    if name == "recall":
        return asyncio.run(concurrent_recalls(server, key, gen.many(requests), clients))
    return asyncio.run(concurrent_writes(server, key, gen, clients, requests, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="hash", choices=["hash", "minilm", "minilm-onnx", "minilm-bf16"])
    parser.add_argument("--heads", default="1,2,4")
    parser.add_argument("--pools", default="0", help="embedder pool sizes to run each head count with (0: head-local)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--cells", type=int, default=2000)
    args = parser.parse_args()
    counts = [int(n) for n in args.heads.split(",")]
    pools = [int(n) for n in args.pools.split(",")]
    banner(f"throughput with {counts} heads, pools {pools} ({args.engine}, {args.clients} clients, {args.requests} requests)")
    report = Report()
    baseline: dict[str, float] = {}
    for heads, pool in ((h, p) for h in counts for p in pools):
        gen = SentenceGen(SEED)  # the same corpus and requests for every N
        env = {"MEMESH_HEADS__WORKERS": str(heads), "MEMESH_EMBEDDING__POOL": str(pool)}
        with MemeshServer(args.engine, env=env) as server:
            wait_for_heads(server, heads)
            key = server.issue_key(name=f"bench-heads-{heads}")
            asyncio.run(concurrent_writes(server, key, gen, 4, max(1, args.cells // BATCH), BATCH))
            server.settle(600.0)
            asyncio.run(concurrent_recalls(server, key, gen.many(40), args.clients))  # warm every head
            for name in ("recall", "single write"):
                snap = server.cpu()
                result = one_run(server, key, gen, name, args.clients, args.requests)
                cores = busy_cores(server.cpu().since(snap))
                server.settle(600.0)
                label = f"{name}, {heads} head{'s' if heads > 1 else ''}" + (f", pool {pool}" if pool else "")
                baseline.setdefault(name, result.rate)
                report.add(SECTION, label, result.rate, "req/s", "first run", baseline[name])
                report.add(SECTION, f"{label}, per busy core", result.rate / max(cores, 1e-9), "req/s/core")
                report.add(SECTION, f"{label}, p99", percentile(result.latencies, 99) * 1000, "ms")
                print(f"    {label}: {result.rate:.1f} req/s, {cores:.2f} cores busy", flush=True)
    report.print_table()


if __name__ == "__main__":
    main()

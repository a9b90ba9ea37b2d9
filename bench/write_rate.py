"""Single-cell writes from concurrent clients with the ``hash`` engine: the server's own cost of a write.

With no model in the way, what bounds single writes is the server itself: the head, the scene shards'
writes and commits, the walks. One ``hash`` server; ``--clients`` loops on keep-alive connections write
one cell per request (``POST /v1/cells``, seven projects) for ``--seconds`` after a 5 s warm-up; then
the walks those writes started are waited for. Printed: writes/s, p50 and p99, the drain after the last
write and the sustained rate (writes / (run + drain)), and the server's CPU per write by process role
over the run and its drain.

Baseline, in the same run: the same writes against a server with ``--baseline-env`` (by default
``MEMESH_RAY__NODE_LANES=false``: every actor call through Ray), run first. ``--env KEY=VALUE`` sets a
variable for both servers.

Run: ``.venv/bin/python -m bench.write_rate [--clients 8] [--seconds 10] [--baseline-env K=V] [--env K=V ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass

import httpx
import numpy as np

from bench.common import JSON_HEADERS, MemeshServer, Report, SentenceGen, banner, cpu_line

SECTION = "write rate"


async def write_for(server: MemeshServer, key: str, texts: list[str], clients: int, seconds: float) -> list[float]:
    """Latencies of the single-cell writes ``clients`` loops made in ``seconds``."""
    latencies: list[float] = []
    made = 0
    headers = {"x-service-key": key, **JSON_HEADERS}
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, limits=limits, timeout=60, trust_env=False) as http:
        end = time.monotonic() + seconds

        async def loop() -> None:
            nonlocal made
            while time.monotonic() < end:
                n, made = made, made + 1
                body = json.dumps({"content": texts[n % len(texts)], "cell_type": "Fact", "project_id": f"p{n % 7}"})
                started = time.perf_counter()
                response = await http.post("/v1/cells", content=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 201:
                    raise RuntimeError(f"POST /v1/cells answered {response.status_code}: {response.text[:200]}")

        await asyncio.gather(*(loop() for _ in range(clients)))
    return latencies


@dataclass(frozen=True)
class Figures:
    rate: float
    p50: float
    p99: float
    drain: float
    sustained: float


def measure(env: dict[str, str], texts: list[str], clients: int, seconds: float) -> Figures:
    """One server with ``env``: a 5 s warm-up, then the timed writes and their walks' drain."""
    with MemeshServer("hash", env=env) as server:
        key = server.issue_key(name="write-rate")
        asyncio.run(write_for(server, key, texts, clients, 5.0))
        server.wait_walks(300)
        before = server.cpu()
        latencies = np.array(asyncio.run(write_for(server, key, texts, clients, seconds))) * 1000
        last = time.monotonic()
        drained = server.wait_walks(600)
        drain = time.monotonic() - last
        print(f"    env {env}: {cpu_line(server.cpu().since(before), len(latencies))} (run and drain, per write)")
        if not drained:
            print("    the walks did NOT drain in 600 s: the sustained rate is an upper bound")
    written = len(latencies)
    p50, p99 = (float(v) for v in np.percentile(latencies, [50, 99]))
    return Figures(written / seconds, p50, p99, drain, written / (seconds + drain))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--baseline-env", action="append", default=None, help="KEY=VALUE of the baseline server")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for both servers (repeatable)")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    baseline_env = {**env, **dict(item.split("=", 1) for item in (args.baseline_env or ["MEMESH_RAY__NODE_LANES=false"]))}
    banner(f"single-cell writes, hash engine, {args.clients} clients for {args.seconds:.0f} s; baseline env {baseline_env}")
    texts = SentenceGen(5).many(20_000)
    base = measure(baseline_env, texts, args.clients, args.seconds)
    now = measure(env, texts, args.clients, args.seconds)
    report = Report()
    label = "baseline (" + ", ".join(f"{k}={v}" for k, v in baseline_env.items() if env.get(k) != v) + ")"
    report.add(SECTION, f"single writes, {args.clients} clients", now.rate, "writes/s", label, base.rate)
    report.add(SECTION, "p50", now.p50, "ms", label, base.p50)
    report.add(SECTION, "p99", now.p99, "ms", label, base.p99)
    report.add(SECTION, "walks drained after the last write", now.drain, "s", label, base.drain)
    report.add(SECTION, "sustained: writes / (run + drain)", now.sustained, "writes/s", label, base.sustained)
    report.print_table(SECTION)


if __name__ == "__main__":
    main()

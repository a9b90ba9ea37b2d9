"""How fast a backlog of walks drains, and the server's CPU per walk by process role (issue 12).

One ``hash`` server with four listeners; 4,000 cells written at once in batches of 64 (their walks queue
far faster than they run); then, for ``--seconds``, how many walks finished (``memesh_walk_backlog``
before and after) and the CPU each process role spent per finished walk. Run it from two trees in turn
to compare them (``PYTHONPATH`` at the other checkout).

Run: ``.venv/bin/python -m bench.walk_drain [--cells 4000] [--seconds 25]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from bench.burst import INTERESTS, load_corpus
from bench.common import MemeshServer, Report, SentenceGen, banner, cpu_line

SECTION = "walk drain"


def backlog(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics", trust_env=False, timeout=10).text
    return float(next(line for line in text.splitlines() if line.startswith("memesh_walk_backlog ")).split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=25.0)
    args = parser.parse_args()
    banner(f"walk drain (hash, {args.cells} cells written at once, {args.seconds:.0f} s measured)")
    report = Report()
    with MemeshServer("hash") as server:
        key = server.issue_key(name="drain")
        with server.client(key) as http:
            for n, interest in enumerate(INTERESTS):
                listener = server.issue_key(role="Reader", name=f"listener-{n}")
                http.post("/v1/beacons", json={"interest": interest}, headers={"x-service-key": listener}).raise_for_status()
        asyncio.run(load_corpus(server, key, SentenceGen(5), args.cells))
        before, snap = backlog(server.base_url), server.cpu()
        time.sleep(args.seconds)
        walked = before - backlog(server.base_url)
        line = cpu_line(server.cpu().since(snap), int(walked))
        report.add(SECTION, "walks finished", walked / args.seconds, "walks/s", note=f"backlog {before:.0f} at the start")
        print(f"    {line}", flush=True)
    report.print_table()


if __name__ == "__main__":
    main()

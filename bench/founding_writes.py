"""Writes that found scenes: their latency and rate beside one bare LanceDB append (the baseline).

A write whose cell founds a new scene commits a scene row and a cell row. This
bench makes such writes common: one ``hash``-engine server, fresh varied
sentences (``SentenceGen``), so most cells found a scene of their own. It
prints, with the share of writes that founded a scene:

- 300 sequential single-cell writes on one keep-alive connection (p50, p99);
- 30 ``cells:batch`` of 64 (cells/s);

and, measured in this process before the server starts, one bare LanceDB
append of one row (p50): the ratio says how many commits a write waits for.

Run: ``.venv/bin/python -m bench.founding_writes [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import ray

from bench.common import MemeshServer, Report, SentenceGen, Stats, banner
from bench.propagation import lancedb_append_ms

SECTION = "founding writes"


def run(singles: int, batches: int, report: Report) -> None:
    append = lancedb_append_ms(100)
    report.add("baseline", "bare LanceDB append of one row p50", append, "ms")
    context = ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False)
    gen = SentenceGen(11)
    env = {"MEMESH_RAY__ADDRESS": context.address_info["gcs_address"]}
    try:
        with MemeshServer("hash", env=env) as server, server.client(server.issue_key()) as http:
            for _ in range(10):
                http.post("/v1/cells", json={"content": gen.sentence(), "cell_type": "Fact"}).raise_for_status()
            times, scenes = [], set()
            for _ in range(singles):
                t0 = time.perf_counter()
                answer = http.post("/v1/cells", json={"content": gen.sentence(), "cell_type": "Fact"})
                times.append(time.perf_counter() - t0)
                answer.raise_for_status()
                scenes.add(answer.json()["scene_id"])
            single = Stats.of(times)
            report.add(SECTION, "single writes that founded a scene", 100 * len(scenes) / singles, "%")
            report.add(SECTION, "single write p50", single.p50_ms, "ms", "bare append", append)
            report.add(SECTION, "single write p99", single.p99_ms, "ms")
            started = time.perf_counter()
            for _ in range(batches):
                cells = [{"content": gen.sentence(), "cell_type": "Fact"} for _ in range(64)]
                http.post("/v1/cells:batch", json={"cells": cells}).raise_for_status()
            report.add(SECTION, "cells:batch of 64", batches * 64 / (time.perf_counter() - started), "cells/s")
            server.settle(120)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.founding_writes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few writes: a smoke run")
    args = parser.parse_args(argv)
    report = Report()
    run(40 if args.quick else 300, 4 if args.quick else 30, report)
    banner("founding writes")
    report.print_table()
    return report


if __name__ == "__main__":
    main()

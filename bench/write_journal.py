"""The write journal (``storage.write_journal``): a write's answer and its way to an inbox, with the journal
and without it (the baseline, the same code with ``MEMESH_STORAGE__WRITE_JOURNAL=false``), in one process.

For each setting, alternating (off, on, off, on ...), one ``hash``-engine server:

- 200 sequential single-cell writes of fresh varied sentences (p50, p99);
- write-to-inbox (``bench.propagation.write_to_inbox``): a write, then its frame on a listener's stream;
- single-cell writes from 8 concurrent clients (writes/s).

Run: ``.venv/bin/python -m bench.write_journal [--rounds 2] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import ray

from bench.common import MemeshServer, Report, SentenceGen, Stats, banner
from bench.propagation import lancedb_append_ms, write_to_inbox

SECTION = "write journal"


def singles(server: MemeshServer, writes: int, gen: SentenceGen) -> Stats:
    with server.client(server.issue_key()) as http:
        for _ in range(10):
            http.post("/v1/cells", json={"content": gen.sentence(), "cell_type": "Fact"}).raise_for_status()
        times = []
        for _ in range(writes):
            t0 = time.perf_counter()
            http.post("/v1/cells", json={"content": gen.sentence(), "cell_type": "Fact"}).raise_for_status()
            times.append(time.perf_counter() - t0)
    return Stats.of(times)


def concurrent(server: MemeshServer, clients: int, writes: int, gen: SentenceGen) -> float:
    texts = [gen.sentence() for _ in range(writes)]
    key = server.issue_key()

    async def run() -> float:
        async with server.async_client(key, clients) as http:
            queue = iter(texts)

            async def client() -> None:
                for text in queue:
                    (await http.post("/v1/cells", json={"content": text, "cell_type": "Fact"})).raise_for_status()

            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(clients)))
            return writes / (time.perf_counter() - started)

    return asyncio.run(run())


def one_run(journal: bool, env: dict[str, str], sizes: tuple[int, int, int], gen: SentenceGen) -> Report:
    report = Report()
    setting = "on" if journal else "off"
    banner(f"write journal {setting}")
    with MemeshServer("hash", env={**env, "MEMESH_STORAGE__WRITE_JOURNAL": str(journal).lower()}) as server:
        single = singles(server, sizes[0], gen)
        report.add(SECTION, f"journal {setting}: single write p50", single.p50_ms, "ms")
        report.add(SECTION, f"journal {setting}: single write p99", single.p99_ms, "ms")
        write_to_inbox(server, report, sizes[1])
        report.add(SECTION, f"journal {setting}: 8 clients, single writes", concurrent(server, 8, sizes[2], gen), "writes/s")
        server.settle(120)
    return report


def main(argv: list[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.write_journal", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="pairs of runs, off then on")
    parser.add_argument("--quick", action="store_true", help="few writes: a smoke run")
    args = parser.parse_args(argv)
    sizes = (30, 30, 40) if args.quick else (200, 200, 400)
    report = Report()
    report.add("baseline", "bare LanceDB append of one row p50", lancedb_append_ms(100), "ms")
    context = ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False)
    env = {
        "MEMESH_RAY__ADDRESS": context.address_info["gcs_address"],
        "MEMESH_RATE_LIMITS__INBOX__RATE": "0",
        "MEMESH_PROPAGATION__NODE_BUDGET": "100000",  # how fast a push travels, not what a budget lets through
        "MEMESH_PROPAGATION__CLOSE_MATCH_BUDGET": "100000",
    }
    gen = SentenceGen(17)
    runs: dict[bool, list[Report]] = {False: [], True: []}
    try:
        one_run(False, env, (20, 20, 40), gen)  # a warm-up, not reported: the first server of a process starts cold
        for _ in range(args.rounds):
            for journal in (False, True):
                runs[journal].append(one_run(journal, env, sizes, gen))
    finally:
        ray.shutdown()
    for r, (off, on) in enumerate(zip(runs[False], runs[True], strict=True)):
        for a, b in zip(off.rows, on.rows, strict=True):
            metric = b.metric.removeprefix("journal on: ")
            report.add(SECTION, f"round {r + 1}: {metric}", b.value, b.unit, "journal off", a.value)
    banner("write journal: on against off (same process)")
    report.print_table()
    return report


if __name__ == "__main__":
    main()

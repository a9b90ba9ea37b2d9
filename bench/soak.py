"""A soak: ten minutes of mixed load on one server; are p99 and memory stable?

One ``memesh serve`` with the real model (``--engine hash`` to isolate memesh
from the model), loaded at a fixed pace by threads in this process:

- writers: single cells, and now and then a batch of 8, into a few projects;
- readers: ``recall`` and ``query`` in turn;
- a listener: a few beacons, ``inbox:pull`` with acknowledgements;
- churn: beacons placed and removed, sessions opened and closed, a scene
  consolidated now and then (the state that must not grow without bound).

Retention runs at a soak pace (acknowledged deliveries older than 60 s go,
sweeps every 10 s) so its effect shows within the run. Every minute the
figures of that minute are printed: write and recall p50/p99, requests that
were not 2xx, the resident memory of the server's whole process tree (head
and Ray actors), the size of the data dir, and the deliveries held. The
baseline is the run's own first minute: the ratios say whether latency and
memory stay flat (about 1.0x) or creep.

Run: ``.venv/bin/python -m bench.soak [--minutes 10] [--engine minilm|hash]``.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.common import MemeshServer, Report, SentenceGen, Stats, banner, machine_info, print_table

SECTION = "soak"
ENV = {
    "MEMESH_RETENTION__ACKED_DELIVERY_MAX_AGE_S": "60",
    "MEMESH_RETENTION__SWEEP_INTERVAL_S": "10",
    "MEMESH_RETENTION__CLOSED_SESSION_MAX_AGE_S": "60",
    "MEMESH_RATE_LIMITS__INBOX__RATE": "0",
}


@dataclass
class Minute:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: int = 0
    requests: int = 0


class Soak:
    def __init__(self, server: MemeshServer, minutes: int, pace: float) -> None:
        self.server = server
        self.minutes = minutes
        self.pace = pace  # seconds between one thread's requests
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.current = Minute()
        self.writer = server.issue_key("soak", "Writer", "writer")
        self.reader = server.issue_key("soak", "Reader", "reader")
        self.listener = server.issue_key("soak", "Reader", "listener")

    def record(self, kind: str, started: float, response: httpx.Response | None) -> None:
        with self.lock:
            self.current.requests += 1
            if response is None or response.status_code >= 300:
                self.current.failures += 1
            else:
                self.current.latencies[kind].append(time.perf_counter() - started)

    def call(self, http: httpx.Client, kind: str, method: str, path: str, body: object = None) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = http.request(method, path, json=body)
        except httpx.HTTPError:
            response = None
        self.record(kind, started, response)
        return response

    def writes(self, seed: int) -> None:
        gen, rng = SentenceGen(seed), random.Random(seed)
        with self.server.client(self.writer) as http:
            while not self.stop.is_set():
                project = f"project-{rng.randint(0, 3)}"
                if rng.random() < 0.1:
                    cells = [{"content": gen.sentence(), "cell_type": "Fact", "project_id": project} for _ in range(8)]
                    self.call(http, "batch", "POST", "/v1/cells:batch", {"cells": cells})
                else:
                    cell = {"content": gen.sentence(), "cell_type": "Fact", "project_id": project}
                    self.call(http, "write", "POST", "/v1/cells", cell)
                time.sleep(self.pace)

    def reads(self, seed: int) -> None:
        gen = SentenceGen(seed)
        with self.server.client(self.reader) as http:
            while not self.stop.is_set():
                self.call(http, "recall", "POST", "/v1/recall", {"text": gen.sentence(), "k": 10})
                self.call(http, "query", "POST", "/v1/query", {"text": gen.sentence(), "k": 10})
                time.sleep(self.pace)

    def listens(self) -> None:
        gen = SentenceGen(99)
        with self.server.client(self.listener) as http:
            for _ in range(8):
                self.call(http, "beacon", "POST", "/v1/beacons", {"interest": gen.sentence()})
            ack = None
            while not self.stop.is_set():
                body = {} if ack is None else {"ack": ack}
                page = self.call(http, "pull", "POST", "/v1/inbox:pull", body)
                if page is not None and page.status_code == 200:
                    ack = page.json()["window_high"]
                time.sleep(0.5)

    def churns(self) -> None:
        gen, rng = SentenceGen(7), random.Random(7)
        with self.server.client(self.writer) as http:
            while not self.stop.is_set():
                placed = self.call(http, "beacon", "POST", "/v1/beacons", {"interest": gen.sentence()})
                if placed is not None and placed.status_code == 200:
                    self.call(http, "beacon", "DELETE", f"/v1/beacons/{placed.json()['node_id']}")
                session = self.call(http, "session", "POST", "/v1/sessions", {"project_id": "project-0"})
                if session is not None and session.status_code == 200:
                    self.call(http, "session", "DELETE", f"/v1/sessions/{session.json()['session_id']}")
                if rng.random() < 0.05:
                    scenes = http.get("/v1/scenes", params={"limit": 5}).json().get("scenes", [])
                    if scenes:
                        self.call(http, "consolidate", "POST", f"/v1/scenes/{scenes[0]['id']}/consolidate")
                time.sleep(self.pace * 4)

    def run(self) -> list[dict[str, float]]:
        threads = [threading.Thread(target=self.writes, args=(s,)) for s in (1, 2)]
        threads += [threading.Thread(target=self.reads, args=(s,)) for s in (3, 4)]
        threads += [threading.Thread(target=self.listens), threading.Thread(target=self.churns)]
        for thread in threads:
            thread.start()
        rows = []
        try:
            for minute in range(1, self.minutes + 1):
                time.sleep(60)
                with self.lock:
                    done, self.current = self.current, Minute()
                rows.append(self.figures(minute, done))
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(60)
        return rows

    def figures(self, minute: int, done: Minute) -> dict[str, float]:
        writes = Stats.of(done.latencies["write"])
        recalls = Stats.of(done.latencies["recall"])
        row = {
            "minute": minute,
            "requests": done.requests,
            "not_2xx": done.failures,
            "write_p50_ms": writes.p50_ms,
            "write_p99_ms": writes.p99_ms,
            "recall_p50_ms": recalls.p50_ms,
            "recall_p99_ms": recalls.p99_ms,
            "rss_mb": rss_mb(self.server),
            "data_mb": data_mb(self.server.data_dir),
            "deliveries": metric(self.server, "memesh_inbox_deliveries"),
            "cells": metric(self.server, "memesh_cells"),
        }
        print(
            f"  minute {minute:2d}: {row['requests']:.0f} requests ({row['not_2xx']:.0f} not 2xx), "
            f"write p50/p99 {row['write_p50_ms']:.0f}/{row['write_p99_ms']:.0f} ms, "
            f"recall p50/p99 {row['recall_p50_ms']:.0f}/{row['recall_p99_ms']:.0f} ms, "
            f"RSS {row['rss_mb']:.0f} MB, data {row['data_mb']:.0f} MB, "
            f"{row['cells']:.0f} cells, {row['deliveries']:.0f} deliveries held",
            flush=True,
        )
        return row


def rss_mb(server: MemeshServer) -> float:
    import psutil

    if server.proc is None:
        return 0.0
    root = psutil.Process(server.proc.pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def data_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def metric(server: MemeshServer, name: str) -> float:
    try:
        text = httpx.get(f"{server.base_url}/metrics", timeout=10, trust_env=False).text
    except httpx.HTTPError:
        return float("nan")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--engine", default="minilm", choices=["minilm", "hash"])
    parser.add_argument("--pace", type=float, default=0.05, help="seconds between one thread's requests")
    args = parser.parse_args(argv)
    report = report or Report(info={"machine": machine_info()})
    banner(f"soak: {args.minutes} minutes of mixed load ({args.engine})")
    with MemeshServer(args.engine, env=ENV) as server:
        rows = Soak(server, args.minutes, args.pace).run()
    headers = list(rows[0])
    print_table(headers, [[f"{r[h]:.0f}" for h in headers] for r in rows])
    first, last = rows[0], rows[-1]
    base = "minute 1, same run"
    for name, unit in (("write_p99_ms", "ms"), ("recall_p99_ms", "ms"), ("rss_mb", "MB"), ("data_mb", "MB")):
        report.add(SECTION, f"{name} in minute {last['minute']:.0f}", last[name], unit, base, first[name])
    report.add(SECTION, "requests not 2xx, whole run", sum(r["not_2xx"] for r in rows), "requests")
    report.add(SECTION, "requests, whole run", sum(r["requests"] for r in rows), "requests")
    return report


if __name__ == "__main__":
    main()

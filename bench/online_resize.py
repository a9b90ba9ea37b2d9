"""An online resize under load: how long it holds requests, against the same requests just before it.

For each size, one ``hash`` server with 2 / 2 / 2 actors and that many cells
(``cells:batch`` over 64 projects, walks drained); then a thread of
sequential recalls and a thread of sequential single writes run while
``memesh admin partitions resize --scene-shards 5 --beacon-sets 3
--inbox-shards 4`` runs (``head.partition_resizer``). Printed, per size:

- the command's wall time, and the partitions and rows it moved;
- **the hold**: the longest a request waited during the resize (a request
  that arrives while heads hold waits for the move), against the baseline,
  the p50 of the same requests in the seconds before the resize;
- answers that were not 2xx during the whole run (the resize must refuse none).

Run: ``.venv/bin/python -m bench.online_resize [--sizes 2000,20000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import threading
import time
from dataclasses import dataclass, field

from bench.common import MEMESH, MemeshServer, SentenceGen, banner, percentile
from bench.writes import BATCH, concurrent_writes

SEED = 4096
BASELINE_S = 5.0


@dataclass
class Timeline:
    requests: list[tuple[float, float, int]] = field(default_factory=list)  # (sent, answered, status)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, sent: float, status: int) -> None:
        with self.lock:
            self.requests.append((sent, time.monotonic(), status))


def traffic(server: MemeshServer, key: str, timeline: Timeline, stop: threading.Event) -> list[threading.Thread]:
    def recalls() -> None:
        with server.client(key) as http:
            while not stop.is_set():
                sent = time.monotonic()
                timeline.record(sent, http.post("/v1/recall", json={"text": "storage migration plan", "k": 10}).status_code)

    def writes() -> None:
        with server.client(key) as http:
            i = 0
            while not stop.is_set():
                body = {"content": f"resize bench note {i}", "cell_type": "Fact", "project_id": f"project-{i % 64}"}
                i += 1
                sent = time.monotonic()
                timeline.record(sent, http.post("/v1/cells", json=body).status_code)

    threads = [threading.Thread(target=run, daemon=True) for run in (recalls, writes)]
    for thread in threads:
        thread.start()
    return threads


def resize(server: MemeshServer) -> tuple[float, dict[str, object]]:
    command = [
        str(MEMESH),
        "admin",
        "--address",
        f"127.0.0.1:{server.grpc_port}",
        "--key-file",
        str(server.data_dir / "bootstrap-admin.key"),
        "--timeout",
        "600",
        "partitions",
        "resize",
        "--scene-shards",
        "5",
        "--beacon-sets",
        "3",
        "--inbox-shards",
        "4",
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the resize failed: {done.stderr.strip()}")
    return time.monotonic() - started, json.loads(done.stdout)


def measure(cells: int) -> None:
    gen = SentenceGen(SEED)
    with MemeshServer("hash") as server:
        key = server.issue_key(name="bench-online-resize")
        asyncio.run(concurrent_writes(server, key, gen, 4, max(1, cells // BATCH), BATCH))
        server.settle(900.0)
        timeline, stop = Timeline(), threading.Event()
        threads = traffic(server, key, timeline, stop)
        time.sleep(BASELINE_S)
        began = time.monotonic()
        seconds, answer = resize(server)
        ended = time.monotonic()
        time.sleep(2.0)
        stop.set()
        for thread in threads:
            thread.join(60)
        log = server.log_path.read_text(errors="replace").splitlines()
    phases = [line for line in log if "after" in line and "online resize" in line]
    trouble = [line for line in log if " ERROR " in line or "WARNING" in line]
    before = [a - s for s, a, _ in timeline.requests if a < began]
    during = [a - s for s, a, _ in timeline.requests if s < ended and a > began]
    refused = [status for _, _, status in timeline.requests if status >= 300]
    moves = answer["moves"]
    assert isinstance(moves, list)
    moved = ", ".join(f"{m['kind']} {m['partitions']} partitions / {m['rows']} rows" for m in moves)
    print(
        f"| {cells:,} | {seconds * 1000:,.0f} ms | {moved} | {max(during) * 1000:,.0f} ms"
        f" | {percentile(before, 50) * 1000:.1f} ms | {len(during)} | {len(refused)} of {len(timeline.requests)} |",
        flush=True,
    )
    for line in phases:
        print(f"    {line.split('online resize: ', 1)[-1]}", flush=True)
    slowest = sorted(((a - s, s - began, status) for s, a, status in timeline.requests if s < ended and a > began), reverse=True)
    for line in trouble[:40]:
        print(f"    log: {line[:300]}", flush=True)
    for took, offset, status in slowest[:5]:
        print(f"    a request sent {offset:+.1f} s from the command took {took:.1f} s ({status})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000", help="cells per run, comma-separated")
    args = parser.parse_args()
    banner("online resize 2/2/2 -> 5/3/4 under a recall loop and a write loop (hash engine)")
    print(
        "| cells | resize command | moved | longest request during it (the hold) | p50 before (baseline) | requests | not 2xx |"
    )
    print("|---|---|---|---|---|---|---|")
    for cells in (int(s) for s in args.sizes.split(",")):
        measure(cells)


if __name__ == "__main__":
    main()

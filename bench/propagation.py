"""Propagation benchmarks: write-to-inbox latency, deliveries per second, inbox drain, memory per agent.

``.venv/bin/python -m bench.propagation [--quick]``

This process starts one local Ray; the server joins it (``MEMESH_RAY__ADDRESS``),
so the same-run baselines are measured on the same Ray and storage:
- an actor round trip (a trivial Ray actor called from this driver),
- a bare LanceDB append of one delivery-sized row (the storage floor of a commit).
All figures use the ``hash`` engine, so the model's time does not hide the mesh's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from websockets.sync.client import connect

from bench.common import MemeshServer, Report, banner, percentile

TOPIC = "payment gateway timeout incidents"


class _Echo:
    def ping(self) -> int:
        return 1


def actor_round_trip_ms(samples: int) -> float:
    import ray

    echo = ray.remote(_Echo).options(num_cpus=0).remote()
    ray.get(echo.ping.remote())
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        ray.get(echo.ping.remote())
        times.append(time.perf_counter() - t0)
    ray.kill(echo)
    return 1000 * percentile(times, 50)


def lancedb_append_ms(samples: int) -> float:
    from actors.codecs import deliveries_to_arrow
    from actors.schemas import DELIVERY_SCHEMA
    from actors.storage import LanceStore, StorageConfig
    from mesh.inbox import StoredDelivery

    async def run() -> float:
        store = await LanceStore.open(StorageConfig(tempfile.mkdtemp(prefix="memesh-bench-lance-")))
        table = await store.table("deliveries", DELIVERY_SCHEMA)
        row = StoredDelivery(1, "d", "x", "p", 0.5, '"diff":{},"delivery":{}')
        times = []
        for i in range(samples):
            batch = deliveries_to_arrow(
                [("agent", StoredDelivery(i + 1, f"d{i}", row.diff_id, row.project_id, 0.5, row.members))]
            )
            t0 = time.perf_counter()
            await table.append(batch)
            times.append(time.perf_counter() - t0)
        return 1000 * percentile(times, 50)

    return asyncio.run(run())


def issue_many(server: MemeshServer, count: int, tenant: str, role: str = "Reader") -> list[str]:
    """Keys for ``count`` agents, through the gRPC admin service directly (the CLI costs a process each)."""
    from memesh_proto import admin_pb2, admin_pb2_grpc

    admin_key = (server.data_dir / "bootstrap-admin.key").read_text().strip()
    keys = []
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        for i in range(count):
            issued = stub.IssueAgent(
                admin_pb2.IssueAgentRequest(tenant_id=tenant, display_name=f"a{i}", roles=[role]),
                metadata=(("x-service-key", admin_key),),
                timeout=30,
            )
            keys.append(issued.plaintext_secret)
    return keys


def process_tree_pss_mb(root_pid: int) -> float:
    """Proportional set size of this process's descendants (the server and Ray), in MB."""
    import psutil

    total = 0
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            rollup = Path(f"/proc/{proc.pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total / 1024


def write_to_inbox(server: MemeshServer, report: Report, writes: int) -> None:
    banner("write-to-inbox latency (hash engine, one listener on the stream)")
    listener, writer = server.issue_key("lat", "Reader", "listener"), server.issue_key("lat", "Writer", "writer")
    with server.client(listener) as http:
        http.post("/v1/beacons", json={"interest": TOPIC}).raise_for_status()
    url = server.base_url.replace("http://", "ws://") + "/v1/inbox"
    latencies, acks = [], []
    with connect(url, additional_headers={"x-service-key": listener}, open_timeout=30) as ws, server.client(writer) as http:
        for i in range(writes):
            t0 = time.perf_counter()
            cell = http.post("/v1/cells", json={"content": f"{TOPIC} number {i}", "cell_type": "Risk"}).json()
            acks.append(time.perf_counter() - t0)
            while True:
                frame = json.loads(ws.recv(timeout=30))
                if frame.get("diff", {}).get("cell_id") == cell["id"]:
                    break
            latencies.append(time.perf_counter() - t0)
            if i % 20 == 19:
                ws.send(json.dumps({"ack": frame["delivery_seq"]}))
    p50, p99 = 1000 * percentile(latencies, 50), 1000 * percentile(latencies, 99)
    report.add("propagation", f"write-to-inbox p50 (n={writes})", p50, "ms", "target", 50.0)
    report.add("propagation", f"write-to-inbox p99 (n={writes})", p99, "ms")
    # the same path split where the writer's answer arrives: the write itself, then its walk to the stream
    report.add("propagation", "of which the write's own answer p50", 1000 * percentile(acks, 50), "ms")
    walks = [total - ack for total, ack in zip(latencies, acks, strict=True)]
    report.add("propagation", "of which answer to frame p50", 1000 * percentile(walks, 50), "ms")
    report.add("propagation", "of which answer to frame p99", 1000 * percentile(walks, 99), "ms")


def deliveries_per_second(server: MemeshServer, report: Report, listeners: int, cells: int) -> None:
    banner(f"deliveries per second ({listeners} listeners on one topic, {cells} cells in batches of 64)")
    keys = issue_many(server, listeners, "fan")
    for key in keys:
        with server.client(key) as http:
            http.post("/v1/beacons", json={"interest": TOPIC}).raise_for_status()
    writer = server.issue_key("fan", "Writer", "writer")
    t0 = time.perf_counter()
    with server.client(writer) as http:
        for start in range(0, cells, 64):
            batch = [{"content": f"{TOPIC} batch item {start + j}", "cell_type": "Risk"} for j in range(min(64, cells - start))]
            http.post("/v1/cells:batch", json={"cells": batch}).raise_for_status()
    # Walks run after the writes are acknowledged: count committed deliveries (a pull with a floor
    # above everything reports the committed top as window_high) until the total stops growing.
    total, last_change, t_last = -1, time.perf_counter(), t0
    deadline = time.perf_counter() + 600
    clients = [server.client(k) for k in keys]
    try:
        while time.perf_counter() < deadline:
            now_total = sum(c.post("/v1/inbox:pull", json={"since": 2**62, "limit": 1}).json()["window_high"] for c in clients)
            if now_total != total:
                total, last_change, t_last = now_total, time.perf_counter(), time.perf_counter()
            elif time.perf_counter() - last_change > 3.0:
                break
            time.sleep(0.1)
    finally:
        for c in clients:
            c.close()
    elapsed = t_last - t0
    report.add(
        "propagation",
        f"deliveries/s ({total} deliveries of {cells} cells to {listeners} listeners)",
        total / elapsed,
        "deliveries/s",
        note="fan_out 8: each diff reaches the 8 nearest beacons of the node it is at",
    )


def drain_rate(server: MemeshServer, report: Report, items: int) -> None:
    banner(f"inbox drain through inbox:pull ({items} deliveries, pages of 256, acknowledging each page)")
    listener, writer = server.issue_key("drain", "Reader", "drainer"), server.issue_key("drain", "Writer", "feeder")
    with server.client(listener) as http:
        http.post("/v1/beacons", json={"interest": TOPIC}).raise_for_status()
    with server.client(writer) as http:
        for start in range(0, items, 256):
            batch = [{"content": f"{TOPIC} drain item {start + j}", "cell_type": "Risk"} for j in range(min(256, items - start))]
            http.post("/v1/cells:batch", json={"cells": batch}).raise_for_status()
    with server.client(listener) as http:
        deadline = time.perf_counter() + 900
        while time.perf_counter() < deadline:
            if http.post("/v1/inbox:pull", json={"since": items - 1, "limit": 1}).json()["window_high"] >= items:
                break
            time.sleep(0.2)
        drained, ack = 0, None
        t0 = time.perf_counter()
        for _ in range(items):
            page = http.post("/v1/inbox:pull", json={} if ack is None else {"ack": ack}).json()
            drained += len(page["items"])
            ack = page["window_high"]
            if not page["has_more"]:
                break
        elapsed = time.perf_counter() - t0
        # The same drain again (since=0 rewinds the floor for each page, not the cursor), without
        # parsing the pages: what the server sustains when the client does not spend its time in json.loads.
        raw_items, floor, raw_bytes = 0, 0, 0
        t1 = time.perf_counter()
        for _ in range(items):
            body = http.post("/v1/inbox:pull", json={"since": floor}).content
            raw_bytes += len(body)
            tail = body[body.rindex(b'"window_high":') :]
            high = int(tail.split(b":")[1].split(b",")[0])
            raw_items += high - floor
            floor = high
            if b'"has_more":false' in tail:
                break
        raw_elapsed = time.perf_counter() - t1
    report.add(
        "propagation",
        f"inbox drain, server side ({raw_items} items, {raw_bytes / max(raw_items, 1) / 1024:.1f} KiB each)",
        raw_items / raw_elapsed,
        "items/s",
        "target",
        20_000.0,
    )
    report.add(
        "propagation", f"inbox drain, parsed by the client with stdlib json ({drained} items)", drained / elapsed, "items/s"
    )


def memory_per_agent(server: MemeshServer, report: Report, agents: int) -> None:
    banner(f"memory with {agents} agents holding one beacon each (PSS of the server and Ray)")
    time.sleep(2)
    before = process_tree_pss_mb(os.getpid())
    keys = issue_many(server, agents, "crowd")
    rng = np.random.default_rng(5)
    words = ["latency", "kafka", "postgres", "billing", "auth", "search", "cache", "deploy", "gpu", "quota"]

    async def place() -> None:
        sem = asyncio.Semaphore(16)
        async with server.async_client(keys[0], 16) as http:

            async def one(key: str) -> None:
                async with sem:
                    interest = " ".join(rng.choice(words, 4))
                    response = await http.post("/v1/beacons", json={"interest": interest}, headers={"x-service-key": key})
                    response.raise_for_status()

            await asyncio.gather(*(one(k) for k in keys))

    asyncio.run(place())
    time.sleep(3)
    after = process_tree_pss_mb(os.getpid())
    report.add(
        "propagation",
        f"memory added by {agents} agents with a beacon",
        after - before,
        "MB",
        "target",
        500.0,
        note=f"{before:.0f} MB before",
    )


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.propagation")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated stages: latency, deliveries, drain, memory")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    quick = args.quick
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    context = ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False)
    own, report = report is None, report or Report()
    try:
        banner("baselines (same run)")
        rtt = actor_round_trip_ms(50 if quick else 500)
        report.add("baseline", "actor round trip p50", rtt, "ms")
        report.add("baseline", "bare LanceDB append of one row p50", lancedb_append_ms(20 if quick else 200), "ms")
        env = {
            "MEMESH_RAY__ADDRESS": context.address_info["gcs_address"],
            "MEMESH_RATE_LIMITS__INBOX__RATE": "0",
            "MEMESH_RATE_LIMITS__ADMIN__RATE": "0",
            # how fast a push travels, not what a node's budget lets through (bench.push_quality): with the
            # default 4 standouts and 32 close matches per node an hour, the 33rd write reached no inbox
            "MEMESH_PROPAGATION__NODE_BUDGET": "100000",
            "MEMESH_PROPAGATION__CLOSE_MATCH_BUDGET": "100000",
        }
        with MemeshServer("hash", env=env) as server:
            if not only or "latency" in only:
                write_to_inbox(server, report, 30 if quick else 300)
            if not only or "deliveries" in only:
                deliveries_per_second(server, report, 10 if quick else 50, 128 if quick else 1024)
            if not only or "drain" in only:
                drain_rate(server, report, 1000 if quick else 20_000)
            if not only or "memory" in only:
                memory_per_agent(server, report, 200 if quick else 10_000)
        if own:
            report.print_table()
    finally:
        ray.shutdown()
    return report


if __name__ == "__main__":
    main()

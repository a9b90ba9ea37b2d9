"""Control plane: a reembed of the whole corpus and a project erase, beside their floors.

One ``minilm`` server (the real model). Load: N cells through
``POST /v1/cells:batch`` (64 per request; the server embeds every text), every
other cell in project ``erase-me`` and the rest in ``keep``, after a second
agent has placed a few beacons so the walks make deliveries. Then the server is
left to go idle (its energy walks drained).

- **Reembed** (gRPC ``StartReembed``, then ``GetJob`` polled until it ends):
  nodes re-embedded per second, against the model's own throughput measured in
  this process with the same engine (``engine.encode`` on batches of 64 of the
  same kind of texts) while the server is idle, before the reembed and after
  it (the better of the two is the baseline, as in ``bench.writes``). While the
  job runs, sequential ``POST /v1/recall`` requests (one keep-alive connection)
  measure what a live agent sees; their p50/p99 are set against the same
  recalls measured just before the job, on the idle server.
- **Erase** (gRPC ``Erase`` of ``project:erase-me``): a dry run, then the real
  erase, each timed at the client, with the certificate's counts. The floor is
  a bare LanceDB table in this process with as many rows as the server holds
  cells (id string, project string, 384 float32), where the same share of rows
  is deleted and ``optimize(cleanup_older_than=timedelta(0))`` drops the old
  versions (what the server's purge does). The certificate's digest must verify
  against ``GET /.well-known/memesh-erasure-keys.json``, or the run fails.

Run: ``.venv/bin/python -m bench.control_plane [--quick]``. The figures go to
``bench/results/control_plane-<time>.json`` (or ``--json FILE``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np

from bench.common import (
    DIMS,
    JSON_HEADERS,
    REPO,
    MemeshServer,
    Report,
    SentenceGen,
    Stats,
    banner,
    cpu_line,
    loadavg,
    machine_info,
    normalize_rows,
)

SEED = 2718
QUERY_SEED = 3141
BATCH = 64
K = 10
ERASE_PROJECT = "erase-me"
KEEP_PROJECT = "keep"
TENANT = "bench"
SECTION = "control plane"
RESULTS = REPO / "bench" / "results"
BEACONS = [
    "payment worker double-charges customers",
    "auth gateway times out under peak load",
    "search indexer falls back to the slow path",
    "deploy pipeline drains connections before deploys",
    "rate limiter retries too aggressively",
    "backup agent fills the disk with temp files",
]


@dataclass(frozen=True)
class Plan:
    cells: int
    model_batches: int  # timed encode batches of 64 (each measurement)
    idle_recalls: int  # timed sequential recalls just before the job
    warmup: int
    settle_s: float  # longest wait for the server to go idle
    job_timeout_s: float
    erase_timeout_s: float
    floor_repeats: int  # bare LanceDB delete + purge, each on a fresh table


FULL = Plan(
    cells=4_000,
    model_batches=30,
    idle_recalls=150,
    warmup=10,
    settle_s=300,
    job_timeout_s=900,
    erase_timeout_s=600,
    floor_repeats=3,
)
QUICK = Plan(
    cells=1_000,
    model_batches=6,
    idle_recalls=40,
    warmup=5,
    settle_s=120,
    job_timeout_s=300,
    erase_timeout_s=300,
    floor_repeats=2,
)


# ---------------------------------------------------------------- baselines
def model_rate(engine: Any, gen: SentenceGen, batches: int) -> float:
    """Texts per second of ``engine.encode`` on fresh batches of 64 (after a short warm-up)."""
    for _ in range(2):
        engine.encode(gen.many(BATCH))
    texts = gen.many(batches * BATCH)
    started = time.perf_counter()
    for i in range(batches):
        engine.encode(texts[i * BATCH : (i + 1) * BATCH])
    return len(texts) / (time.perf_counter() - started)


@dataclass
class LanceFloor:
    delete_s: float
    purge_s: float

    @property
    def total_s(self) -> float:
        return self.delete_s + self.purge_s


def lance_erase_floor(rows: int, erase_share: float, directory: Path, seed: int) -> LanceFloor:
    """A bare LanceDB table of ``rows`` rows: delete ``erase_share`` of them, then drop old versions."""
    import warnings

    import lancedb
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    vectors = normalize_rows(rng.standard_normal((rows, DIMS)).astype(np.float32))
    erased = round(rows * erase_share)
    projects = [ERASE_PROJECT if i < erased else KEEP_PROJECT for i in range(rows)]
    order = rng.permutation(rows)  # interleave the two projects in the files, as the server's appends do
    table_data = pa.table(
        {
            "id": pa.array([f"{i:08d}-{seed}" for i in range(rows)], type=pa.string()),
            "project": pa.array([projects[i] for i in order], type=pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), type=pa.float32()), DIMS),
        }
    )
    db = lancedb.connect(str(directory))
    table = db.create_table("cells", table_data)  # a fresh directory each time
    t0 = time.perf_counter()
    table.delete(f"project = '{ERASE_PROJECT}'")
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="optimize.cleanup_older_than=0", category=UserWarning)
        table.optimize(cleanup_older_than=timedelta(0))
    t2 = time.perf_counter()
    left = table.count_rows()
    if left != rows - erased:
        raise RuntimeError(f"the LanceDB floor kept {left} rows, expected {rows - erased}")
    return LanceFloor(t1 - t0, t2 - t1)


# ------------------------------------------------------------------- server
class Admin:
    """The gRPC admin service, authenticated as the bootstrap ServiceAdmin."""

    def __init__(self, server: MemeshServer) -> None:
        from memesh_proto import admin_pb2_grpc

        self._metadata = (("x-service-key", (server.data_dir / "bootstrap-admin.key").read_text().strip()),)
        self._channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        self.stub = admin_pb2_grpc.AdminServiceStub(self._channel)

    def start_reembed(self) -> str:
        from memesh_proto import admin_pb2

        job_id: str = self.stub.StartReembed(admin_pb2.Empty(), metadata=self._metadata, timeout=60).job_id
        return job_id

    def job(self, job_id: str) -> Any:
        from memesh_proto import admin_pb2

        return self.stub.GetJob(admin_pb2.JobRef(job_id=job_id), metadata=self._metadata, timeout=30)

    def erase_project(self, project: str, dry_run: bool, timeout_s: float) -> Any:
        from memesh_proto import admin_pb2

        request = admin_pb2.EraseRequest(
            scope_kind="project", scope_id=project, scope_tenant_id=TENANT, confirm=f"project:{project}", dry_run=dry_run
        )
        return self.stub.Erase(request, metadata=self._metadata, timeout=timeout_s)

    def close(self) -> None:
        self._channel.close()


def load(server: MemeshServer, writer: str, gen: SentenceGen, cells: int) -> tuple[float, dict[str, int]]:
    """Write ``cells`` cells in batches of 64, alternating the two projects; returns (cells/s, per project)."""
    per_project = {ERASE_PROJECT: 0, KEEP_PROJECT: 0}
    started = time.perf_counter()
    with server.client(writer, timeout_s=300) as client:
        for offset in range(0, cells, BATCH):
            body = []
            for i in range(offset, min(offset + BATCH, cells)):
                project = ERASE_PROJECT if i % 2 == 0 else KEEP_PROJECT
                per_project[project] += 1
                body.append(gen.cell(gen.sentence(), project))
            response = client.post("/v1/cells:batch", content=json.dumps({"cells": body}), headers=JSON_HEADERS)
            if response.status_code != 201:
                raise RuntimeError(f"cells:batch answered {response.status_code}: {response.text[:300]}")
            done = min(offset + BATCH, cells)
            print(f"    loaded {done:,}/{cells:,} cells ({done / (time.perf_counter() - started):.0f} cells/s)", end="\r")
    print()
    return cells / (time.perf_counter() - started), per_project


def recall_once(client: httpx.Client, text: str) -> float:
    body = json.dumps({"text": text, "k": K})
    t0 = time.perf_counter()
    response = client.post("/v1/recall", content=body, headers=JSON_HEADERS)
    elapsed = time.perf_counter() - t0
    if response.status_code != 200:
        raise RuntimeError(f"/v1/recall answered {response.status_code}: {response.text[:300]}")
    return elapsed


def recalled_projects(server: MemeshServer, key: str, texts: list[str]) -> dict[str, int]:
    """How many cells of each project the answers to ``texts`` hold."""
    seen: dict[str, int] = {}
    with server.client(key) as client:
        for text in texts:
            response = client.post("/v1/recall", json={"text": text, "k": K})
            response.raise_for_status()
            for node in response.json():
                node_type = node.get("node_type")
                if isinstance(node_type, dict) and "Cell" in node_type:
                    project = node_type["Cell"]["project_id"]
                    seen[project] = seen.get(project, 0) + 1
    return seen


def deliveries_held(server: MemeshServer, key: str) -> int:
    """The listener's inbox high-water mark: how many deliveries it has been given."""
    with server.client(key) as client:
        page = client.post("/v1/inbox:pull", json={"since": 2**62, "limit": 1})
        page.raise_for_status()
        high: int = page.json()["window_high"]
        return high


@dataclass
class JobRun:
    job_id: str
    status: str
    nodes_processed: int
    nodes_total: int
    engine: str
    client_s: float  # StartReembed sent -> GetJob first saw the end
    server_s: float | None  # started_at -> finished_at as the job records them
    recalls: list[float]
    recall_errors: int
    polls: int
    cpu: str


def run_reembed(server: MemeshServer, admin: Admin, reader: str, queries: list[str], timeout_s: float) -> JobRun:
    """Start the reembed, poll it, and run sequential recalls until it has ended."""
    stop = threading.Event()
    recalls: list[float] = []
    errors: list[str] = []

    def recall_loop() -> None:
        with server.client(reader, timeout_s=120) as client:
            i = 0
            while not stop.is_set():
                try:
                    recalls.append(recall_once(client, queries[i % len(queries)]))
                except (RuntimeError, httpx.HTTPError) as exc:
                    errors.append(str(exc)[:200])
                    time.sleep(0.1)
                i += 1

    snap = server.cpu()
    started = time.perf_counter()
    job_id = admin.start_reembed()
    worker = threading.Thread(target=recall_loop, name="recalls-during-reembed", daemon=True)
    worker.start()
    polls = 0
    shown = -1
    job: Any = None
    try:
        while time.perf_counter() - started < timeout_s:
            job = admin.job(job_id)
            polls += 1
            if job.status != "running":
                break
            if job.nodes_processed != shown:
                shown = job.nodes_processed
                print(f"    reembed running: {shown:,}/{job.nodes_total:,} nodes staged", end="\r", flush=True)
            time.sleep(0.25)
    finally:
        client_s = time.perf_counter() - started
        stop.set()
        worker.join(timeout=150)
    print()
    delta = server.cpu().since(snap)
    if job is None or job.status == "running":
        raise RuntimeError(f"the reembed did not end within {timeout_s:.0f} s")
    if job.status != "succeeded":
        raise RuntimeError(f"the reembed ended {job.status}:\n{server.log_tail()}")
    server_s = None
    if job.started_at and job.finished_at:
        server_s = (datetime.fromisoformat(job.finished_at) - datetime.fromisoformat(job.started_at)).total_seconds()
    if errors:
        print(f"    ! {len(errors)} recalls failed during the job; first: {errors[0]}")
    return JobRun(
        job_id,
        job.status,
        job.nodes_processed,
        job.nodes_total,
        job.engine,
        client_s,
        server_s,
        recalls,
        len(errors),
        polls,
        cpu_line(delta, max(len(recalls), 1)),
    )


def certificate_counts(cert: Any) -> dict[str, int]:
    names = (
        "nodes_removed",
        "diffs_removed",
        "deliveries_removed",
        "sessions_removed",
        "aggregates_recomputed",
        "tombstones_propagated",
    )
    return {name: int(getattr(cert, name)) for name in names}


def verify_certificate(server: MemeshServer, cert: Any) -> dict[str, Any]:
    """The receipt's claims once the digest verifies against the published key set; raises otherwise."""
    from head.erasure_signing import verify_receipt

    if not cert.digest:
        raise RuntimeError("the erase answered without a digest")
    with httpx.Client(base_url=server.base_url, timeout=30, trust_env=False) as client:
        response = client.get("/.well-known/memesh-erasure-keys.json")
        response.raise_for_status()
        jwks = response.json()
    claims = verify_receipt(cert.digest, jwks)  # raises ValidationFailed when it does not verify
    if claims.get("label") != f"project:{ERASE_PROJECT}":
        raise RuntimeError(f"the receipt names {claims.get('label')!r}, not project:{ERASE_PROJECT}")
    if claims.get("counts") != certificate_counts(cert):
        raise RuntimeError(f"the receipt's counts {claims.get('counts')} differ from the certificate's")
    return claims


# ---------------------------------------------------------------------- run
def run(plan: Plan, report: Report) -> None:
    from head.embedding import make_engine

    banner(f"control plane, engine=minilm, {plan.cells:,} cells ({ERASE_PROJECT} / {KEEP_PROJECT} half each)")
    gen = SentenceGen(SEED)
    baseline_gen = SentenceGen(SEED + 1)
    queries = SentenceGen(QUERY_SEED).many(plan.warmup + plan.idle_recalls)
    engine = make_engine("minilm")
    engine.encode(["load the model"])
    info: dict[str, Any] = {"cells": plan.cells}
    with MemeshServer("minilm") as server:
        print(f"    server up in {server.startup_s:.1f} s", flush=True)
        writer = server.issue_key(tenant=TENANT, role="Writer", name="bench-cp-writer")
        listener = server.issue_key(tenant=TENANT, role="Reader", name="bench-cp-listener")
        with server.client(listener) as client:
            for interest in BEACONS:
                client.post("/v1/beacons", json={"interest": interest}).raise_for_status()
        rate, per_project = load(server, writer, gen, plan.cells)
        drain, settled = server.settle(plan.settle_s)
        deliveries = deliveries_held(server, listener)
        print(
            f"    load: {rate:.0f} cells/s ({per_project}); walks {'drained' if settled else 'STILL RUNNING'} "
            f"{drain:.0f} s after the last write; the listener holds {deliveries:,} deliveries",
            flush=True,
        )
        info["load"] = {
            "cells_per_s": round(rate, 1),
            "per_project": per_project,
            "beacons": len(BEACONS),
            "walk_drain_s": round(drain, 1),
            "walks_drained": settled,
            "listener_deliveries": deliveries,
        }

        # ---- reembed
        banner("reembed (gRPC StartReembed, GetJob polled every 0.25 s)")
        before = model_rate(engine, baseline_gen, plan.model_batches)
        print(f"    model in this process, server idle: {before:.0f} texts/s in batches of {BATCH}", flush=True)
        time.sleep(1.0)  # let this process's BLAS/OpenMP threads go quiet before timing the server
        l0 = loadavg()
        with server.client(listener) as client:
            for text in queries[: plan.warmup]:
                recall_once(client, text)
            idle = [recall_once(client, text) for text in queries[plan.warmup :]]
        idle_stats = Stats.of(idle)
        print(f"    idle recall: p50 {idle_stats.p50_ms:.1f} ms, p99 {idle_stats.p99_ms:.1f} ms (n={idle_stats.n})")
        admin = Admin(server)
        try:
            job = run_reembed(server, admin, listener, queries, plan.job_timeout_s)
            l1 = loadavg()
            during = Stats.of(job.recalls)
            seconds = job.server_s if job.server_s else job.client_s
            job_rate = job.nodes_processed / seconds
            print(
                f"    job {job.status}: {job.nodes_processed:,} nodes ({job.nodes_total:,} counted at the start) in "
                f"{seconds:.1f} s (server clock; {job.client_s:.1f} s at the client) -> {job_rate:.0f} nodes/s",
                flush=True,
            )
            print(f"    recall during the job: p50 {during.p50_ms:.1f} ms, p99 {during.p99_ms:.1f} ms (n={during.n})")
            print(f"    {job.cpu} (per recall served during the job)")
            drain_after, settled_after = server.settle(plan.settle_s)
            after = model_rate(engine, baseline_gen, plan.model_batches)
            print(f"    model again, server idle: {after:.0f} texts/s in batches of {BATCH}", flush=True)
            limit = max(before, after)
            report.add(SECTION, "reembed rate", job_rate, "nodes/s", f"model, batches of {BATCH} (best of 2)", limit)
            report.add(SECTION, "recall p50 during the reembed", during.p50_ms, "ms", "recall p50, idle", idle_stats.p50_ms)
            report.add(SECTION, "recall p99 during the reembed", during.p99_ms, "ms", "recall p99, idle", idle_stats.p99_ms)
            info["reembed"] = {
                "job_id": job.job_id,
                "engine": job.engine,
                "nodes_processed": job.nodes_processed,
                "nodes_total_at_start": job.nodes_total,
                "server_seconds": round(job.server_s, 2) if job.server_s else None,
                "client_seconds": round(job.client_s, 2),
                "nodes_per_s": round(job_rate, 1),
                "model_texts_per_s": [round(before, 1), round(after, 1)],
                "idle_recall_ms": {"n": idle_stats.n, "p50": round(idle_stats.p50_ms, 2), "p99": round(idle_stats.p99_ms, 2)},
                "recall_during_ms": {
                    "n": during.n,
                    "p50": round(during.p50_ms, 2),
                    "p99": round(during.p99_ms, 2),
                    "max": round(1000 * max(job.recalls), 1) if job.recalls else None,
                    "mean": round(during.mean_ms, 2),
                },
                "recall_errors": job.recall_errors,
                "server_cpu": job.cpu,
                "loadavg": [l0, l1],
                "settle_after_s": [round(drain_after, 1), settled_after],
            }

            # ---- erase
            banner(f"erase project:{ERASE_PROJECT} (gRPC Erase, tenant {TENANT})")
            l0 = loadavg()
            t0 = time.perf_counter()
            dry = admin.erase_project(ERASE_PROJECT, True, plan.erase_timeout_s)
            dry_s = time.perf_counter() - t0
            print(f"    dry run: {1000 * dry_s:.0f} ms; would remove {certificate_counts(dry)}", flush=True)
            snap = server.cpu()
            t0 = time.perf_counter()
            cert = admin.erase_project(ERASE_PROJECT, False, plan.erase_timeout_s)
            erase_s = time.perf_counter() - t0
            erase_cpu = server.cpu().since(snap)
            l1 = loadavg()
            counts = certificate_counts(cert)
            print(f"    erase: {1000 * erase_s:.0f} ms; certificate {counts}", flush=True)
            print(f"    {cpu_line(erase_cpu, 1)} (the one erase)")
            claims = verify_certificate(server, cert)
            print(f"    digest verifies against /.well-known/memesh-erasure-keys.json (erase_id {claims['erase_id']})")
            again = admin.erase_project(ERASE_PROJECT, True, plan.erase_timeout_s)
            left = certificate_counts(again)
            if left["nodes_removed"] or left["diffs_removed"] or left["deliveries_removed"]:
                raise RuntimeError(f"a dry run after the erase still finds {left}")
        finally:
            admin.close()
        projects_after = recalled_projects(server, listener, queries[: plan.warmup])
        print(f"    recall after the erase: projects in {plan.warmup} answers {projects_after}")
        if ERASE_PROJECT in projects_after:
            raise RuntimeError(f"recall still returns cells of {ERASE_PROJECT} after the erase")

    # ---- the LanceDB floor, in this process, with the server gone
    share = per_project[ERASE_PROJECT] / plan.cells
    floors: list[LanceFloor] = []
    with tempfile.TemporaryDirectory(prefix="memesh-bench-lance-erase-") as tmp:
        for i in range(plan.floor_repeats):
            floors.append(lance_erase_floor(plan.cells, share, Path(tmp) / f"t{i}", SEED + i))
    floor = sorted(floors, key=lambda f: f.total_s)[len(floors) // 2]  # the median run
    print(
        f"    LanceDB floor ({plan.cells:,} rows, delete {share:.0%}, then optimize(cleanup_older_than=0)), "
        f"median of {len(floors)}: delete {1000 * floor.delete_s:.0f} ms + purge {1000 * floor.purge_s:.0f} ms",
        flush=True,
    )
    label = f"bare LanceDB delete {share:.0%} + purge (median of {len(floors)})"
    report.add(SECTION, f"erase project:{ERASE_PROJECT}", 1000 * erase_s, "ms", label, 1000 * floor.total_s)
    report.add(SECTION, "erase dry run (counts only)", 1000 * dry_s, "ms")
    info["erase"] = {
        "dry_run_ms": round(1000 * dry_s, 1),
        "dry_run_counts": certificate_counts(dry),
        "erase_ms": round(1000 * erase_s, 1),
        "certificate": counts,
        "digest_verified": True,
        "receipt_scope": claims["scope"],
        "server_cpu": cpu_line(erase_cpu, 1),
        "loadavg": [l0, l1],
        "projects_recalled_after": projects_after,
        "lance_floor_ms": [
            {"delete": round(1000 * f.delete_s, 1), "purge": round(1000 * f.purge_s, 1), "total": round(1000 * f.total_s, 1)}
            for f in floors
        ],
    }
    report.info["control_plane"] = info


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    os.environ.setdefault("LANCE_LOG", "error")  # before anything in this process loads lance
    parser = argparse.ArgumentParser(prog="python -m bench.control_plane", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.cells:,} cells instead of {FULL.cells:,}: a smoke run")
    parser.add_argument("--json", type=Path, help="write the figures here (default: bench/results/control_plane-<time>.json)")
    args = parser.parse_args(argv)
    own = report is None
    report = report or Report(info={"machine": machine_info(), "quick": args.quick})
    started = time.perf_counter()
    run(QUICK if args.quick else FULL, report)
    report.info["control_plane_wall_s"] = round(time.perf_counter() - started, 1)
    report.info["loadavg_end"] = loadavg()
    if own:
        banner("control-plane figures")
        report.print_table(SECTION)
        path = args.json
        if path is None:
            RESULTS.mkdir(parents=True, exist_ok=True)
            path = RESULTS / f"control_plane{'-quick' if args.quick else ''}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        report.to_json(path)
        print(f"\nfigures written to {path}")
    return report


if __name__ == "__main__":
    main()

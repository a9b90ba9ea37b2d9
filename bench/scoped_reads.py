"""A recall by a key scoped to one project, beside the same recall by a whole-tenant key, on one server.

A scoped search asks only the scene shards that own the scope's projects
(``head/memory_service.py`` ``_fan_out``); a whole-tenant one asks every
shard its head does not know to hold nothing of the tenant
(``mesh.shard_absence``: here, after the first recall, the one that does).
One ``hash`` server with ``--shards`` scene shards holds ``--cells`` cells of
one tenant in one project; sequential recalls (k 10) alternate in blocks of
150 between a whole-tenant key (the baseline) and a Reader key scoped to that
project, so both see the same machine.

Run: ``.venv/bin/python -m bench.scoped_reads [--shards 8] [--cells 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time

from bench.common import JSON_HEADERS, MEMESH, MemeshServer, Report, SentenceGen, banner, percentile
from bench.writes import PROJECT, concurrent_writes

SECTION = "scoped reads"
BLOCK = 150


def scoped_key(server: MemeshServer, project: str) -> str:
    """A Reader key of the bench tenant that reads ``project`` only."""
    key_file = str(server.data_dir / "bootstrap-admin.key")
    admin = [str(MEMESH), "admin", "--address", f"127.0.0.1:{server.grpc_port}", "--key-file", key_file]
    issue = ["agents", "issue", "--tenant", "bench", "--role", "Reader", "--display-name", "scoped", "--read-scope", project]
    done = subprocess.run([*admin, *issue], capture_output=True, text=True, check=True)
    secret: str = json.loads(done.stdout)["plaintext_secret"]
    return secret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    banner(f"scoped and whole-tenant recalls ({args.shards} scene shards, {args.cells} cells in one project)")
    env = {"MEMESH_RAY__SCENE_SHARDS": str(args.shards), "MEMESH_PROPAGATION__MAX_HOPS": "1"}
    gen = SentenceGen(77)
    with MemeshServer("hash", env=env) as server:
        whole = server.issue_key(name="bench-scoped-reads")
        asyncio.run(concurrent_writes(server, whole, gen, 4, args.cells // 256, 256))
        server.settle(300.0)
        keys = {"whole tenant": whole, "scoped to its project": scoped_key(server, PROJECT)}
        times: dict[str, list[float]] = {name: [] for name in keys}
        questions = iter(gen.many(100 + 2 * args.rounds * BLOCK))
        with server.client(whole) as http:
            for _ in range(100):  # warm-up
                http.post("/v1/recall", json={"text": next(questions), "k": 10}, headers=JSON_HEADERS).raise_for_status()
            for _ in range(args.rounds):
                for name, key in keys.items():
                    headers = {**JSON_HEADERS, "x-service-key": key}
                    for _ in range(BLOCK):
                        started = time.perf_counter()
                        reply = http.post("/v1/recall", json={"text": next(questions), "k": 10}, headers=headers)
                        times[name].append(time.perf_counter() - started)
                        reply.raise_for_status()
        report = Report()
        base = percentile(times["whole tenant"], 50) * 1000
        report.add(SECTION, f"recall p50, whole tenant ({args.shards} shards, those holding nothing of it skipped)", base, "ms")
        scoped = percentile(times["scoped to its project"], 50) * 1000
        report.add(SECTION, "recall p50, scoped to its project (1 shard asked)", scoped, "ms", "whole tenant", base)
        report.print_table()


if __name__ == "__main__":
    main()

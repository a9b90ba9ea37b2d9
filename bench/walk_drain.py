"""How fast a backlog of walks drains, and the server's CPU per walk by process role (issue 12).

One ``hash`` server with four listeners; 4,000 cells written at once in batches of 64 (their walks queue
far faster than they run); then, for ``--seconds``, how many walks finished (``memesh_walk_backlog``
before and after) and the CPU each process role spent per finished walk. Run it from two trees in turn
to compare them (``PYTHONPATH`` at the other checkout).

The baseline, run first in the same process: the real model alone, in batches of 64 on every usable CPU,
its texts/s and CPU per text, through torch (``minilm``) and through ONNX Runtime (``minilm-onnx``); the
bar (issue 12: "walk CPU per cell below the model's cost per text"; a written cell starts one walk) is held
against the lower CPU per text of the two, the stricter. ``--no-model`` skips it.

Run: ``.venv/bin/python -m bench.walk_drain [--cells 4000] [--seconds 25] [--no-model]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from bench.burst import INTERESTS, load_corpus
from bench.common import MemeshServer, Report, SentenceGen, banner, cpu_line
from bench.model_threads import measure as model_measure

SECTION = "walk drain"


def metric(base_url: str, prefix: str) -> float:
    """The value of the first /metrics line that starts with ``prefix`` (0 when there is none)."""
    text = httpx.get(f"{base_url}/metrics", trust_env=False, timeout=10).text
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix)), 0.0)


def backlog(base_url: str) -> float:
    return metric(base_url, "memesh_walk_backlog ")


def searches(base_url: str) -> tuple[float, float]:
    """The waves' scene searches so far: answered from kept answers, and run."""
    kept = metric(base_url, 'memesh_walk_scene_searches_total{answer="kept"}')
    return kept, metric(base_url, 'memesh_walk_scene_searches_total{answer="run"}')


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.walk_drain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--no-model", action="store_true", help="skip the model's baseline")
    args = parser.parse_args(argv)
    banner(f"walk drain (hash, {args.cells} cells written at once, {args.seconds:.0f} s measured)")
    own, report = report is None, report or Report()
    model_cpu_ms = model_text_ms = None
    if not args.no_model:
        from head.cpus import usable_cpus
        from head.embedding import make_engine

        measured = {}
        for name in ("minilm", "minilm-onnx"):
            rate, cpu_ms = model_measure(make_engine(name, threads=usable_cpus()), SentenceGen(3), 64, 8.0)
            measured[name] = (rate, cpu_ms)
            report.add(SECTION, f"model alone ({name}), batches of 64", rate, "texts/s", note=f"{usable_cpus()} CPUs")
            report.add(SECTION, f"model alone ({name}), CPU per text", cpu_ms, "ms")
        rate, model_cpu_ms = min(measured.values(), key=lambda m: m[1])  # the stricter baseline
        model_text_ms = 1000 / rate
    with MemeshServer("hash") as server:
        key = server.issue_key(name="drain")
        with server.client(key) as http:
            for n, interest in enumerate(INTERESTS):
                listener = server.issue_key(role="Reader", name=f"listener-{n}")
                http.post("/v1/beacons", json={"interest": interest}, headers={"x-service-key": listener}).raise_for_status()
        asyncio.run(load_corpus(server, key, SentenceGen(5), args.cells))
        before, snap, searched = backlog(server.base_url), server.cpu(), searches(server.base_url)
        time.sleep(args.seconds)
        walked = before - backlog(server.base_url)
        kept, run = (now - then for now, then in zip(searches(server.base_url), searched, strict=True))
        spent = server.cpu().since(snap)
        line = cpu_line(spent, int(walked))
        report.add(SECTION, "walks finished", walked / args.seconds, "walks/s", note=f"backlog {before:.0f} at the start")
        walk_ms = 1000 * sum(secs for role, secs in spent.items() if role != "wall") / max(walked, 1)
        if model_cpu_ms is not None and model_text_ms is not None:
            report.add(SECTION, "server CPU per walk (every process)", walk_ms, "ms", "model CPU per text", model_cpu_ms)
            report.add(SECTION, "server CPU per walk (again)", walk_ms, "ms", "model wall ms per text", model_text_ms)
        else:
            report.add(SECTION, "server CPU per walk (every process)", walk_ms, "ms")
        print(f"    {line}", flush=True)
        print(f"    scene searches: {kept:.0f} answered from kept answers, {run:.0f} run ({kept / max(kept + run, 1):.0%} kept)")
    if own:
        report.print_table()
    return report


if __name__ == "__main__":
    main()

"""What a start costs: ``import lancedb`` in a storage actor's process, and ``memesh serve`` until healthy.

- the baseline, in fresh interpreters run from this process: the CPU of a plain
  ``import lancedb`` against :func:`actors.storage.import_lancedb` (the same
  import with pydantic's ``defer_build`` for the models it defines); every
  storage actor is a process of its own and pays one of them at start;
- ``memesh serve`` (hash engine, defaults otherwise: eleven actors, eight of them
  storage actors) joined to a local Ray this process starts, as the e2e tests
  start their servers: seconds until ``/healthz`` answers, over a few starts
  on fresh data.

Run: ``.venv/bin/python -m bench.startup [--starts 3] [--imports 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from bench.common import MemeshServer, banner, print_table

PLAIN = "import time; t = time.process_time(); import lancedb; print(time.process_time() - t)"
DEFERRED = (
    "import time; t = time.process_time(); from actors.storage import import_lancedb; import_lancedb(); "
    "print(time.process_time() - t)"
)


def import_cpu_s(code: str, runs: int) -> float:
    """Median CPU seconds of ``code``'s import, each run in a fresh interpreter."""
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup")
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--imports", type=int, default=3)
    args = parser.parse_args()
    banner("import lancedb, CPU per storage actor process")
    plain, deferred = import_cpu_s(PLAIN, args.imports), import_cpu_s(DEFERRED, args.imports)
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    context = ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False)
    starts = []
    try:
        banner("memesh serve until healthy (hash engine, joined to this process's Ray)")
        for _ in range(args.starts):
            with MemeshServer("hash", env={"MEMESH_RAY__ADDRESS": context.address_info["gcs_address"]}) as server:
                starts.append(server.startup_s)
            print(f"  start: {starts[-1]:.1f} s", flush=True)
    finally:
        ray.shutdown()
    print_table(
        ["figure", "value", "baseline (same run)", "ratio"],
        [
            ["import lancedb, plain", f"{plain:.2f} s CPU", "", ""],
            ["import lancedb, deferred builds", f"{deferred:.2f} s CPU", f"plain {plain:.2f} s", f"{deferred / plain:.2f}x"],
            ["memesh serve until healthy, median", f"{statistics.median(starts):.1f} s", "", ""],
        ],
    )


if __name__ == "__main__":
    main()

"""Run every benchmark and print one table of figures beside their baselines.

``.venv/bin/python -m bench.run_all [--quick] [--json FILE]``

A full run took about 13 minutes on the 2-core machine (three server starts,
100k cells loaded twice, the model measured in this process). ``--quick`` is a
smoke run of a couple of minutes with small sizes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench import retrieval, writes
from bench.common import Report, banner, loadavg, machine_info

TARGETS = """targets (docs/benchmarks.md):
  - REST recall p50 within 2x of the floor (one query embedding + exact numpy search), at 10k and 100k cells
  - batched REST writes at >= 70% of the embedding model's own throughput (batches of 64)"""


def main(argv: list[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--skip", default="", help="comma-separated benchmarks to skip (retrieval, writes)")
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    common = ["--quick"] if args.quick else []

    started = time.perf_counter()
    report = Report(info={"machine": machine_info(), "quick": args.quick})
    print(f"machine: {report.info['machine']}")
    if "retrieval" not in skip:
        retrieval.main(common, report)
    if "writes" not in skip:
        writes.main(common, report)
    report.info["wall_s"] = round(time.perf_counter() - started, 1)
    report.info["loadavg_end"] = loadavg()

    banner(f"all figures ({'quick' if args.quick else 'full'} run, {report.info['wall_s']:.0f} s)")
    report.print_table()
    print()
    print(TARGETS)
    _verdicts(report)
    if args.json:
        report.to_json(args.json)
        print(f"\nfigures written to {args.json}")
    return report


def _verdicts(report: Report) -> None:
    for row in report.rows:
        if row.section == "retrieval" and row.metric.endswith("recall p50") and row.ratio is not None:
            verdict = "met" if row.ratio <= 2.0 else "NOT met"
            print(f"  {row.metric}: {row.ratio:.2f}x the floor -> {verdict}")
        if row.section == "writes" and row.metric.startswith("REST batched") and row.ratio is not None:
            verdict = "met" if row.ratio >= 0.70 else "NOT met"
            print(f"  {row.metric}: {100 * row.ratio:.0f}% of the model -> {verdict}")


if __name__ == "__main__":
    main()

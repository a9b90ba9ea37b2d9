"""Every bar of issue 12 (cost per request) in one run: each figure beside its same-run baseline, and a verdict.

Runs these benchmarks one after the other in this process (each starts its own server and measures its own
baseline in the same run; nothing else runs beside them), then prints one table of the bars:

1. ``bench.concurrency --rankings hybrid``: the model's batched rate and one encode, measured here; recall and
   single-cell writes with 1, 8 and 32 clients; the sustained write rate with the walks drained;
2. ``bench.propagation --only latency``: write to inbox on a WebSocket listener;
3. ``bench.walk_drain --cells 30000 --seconds 40``: server CPU per walk against the model's CPU per text;
4. ``bench.burst``: recall while two writers burst, while only their walks run, and idle;
5. ``bench.retrieval --engines hash --no-lance --sizes 10000``: the ``hash`` engine's REST recall against its floor;
6. ``bench.hybrid_quality``: hybrid against dense-only on the labelled set of ``bench.convmem`` (with
   ``--locomo PATH``, on LoCoMo: ``bench.locomo``).

A full run takes about 35 minutes on the 2-core machine; ``--short`` (a 10 s burst, 20,000 walks queued for
25 s, 200 requests a concurrency run) about 25. Compare figures within one run: this machine's speed moves by
a third from hour to hour, which is why every figure is held against a baseline of the same run.

The model runs (1 and 6) use ``--engine`` (the service's default, ``minilm-onnx``, torch's ``minilm`` or ``minilm-bf16``);
the others use the ``hash`` engine, as each benchmark says why.

Run: ``.venv/bin/python -m bench.cost_bars [--short] [--engine minilm|minilm-onnx|minilm-bf16] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import burst, concurrency, hybrid_quality, propagation, retrieval, walk_drain
from bench.common import Report, Row, banner, loadavg, machine_info, print_table


@dataclass(frozen=True)
class Bar:
    """One bar of the issue: the figure it reads (``section``, the metric's start) and when it is met."""

    text: str
    section: str
    metric: str
    met: Callable[[Row], bool]
    shown: Callable[[Row], str]


def _share(row: Row) -> str:
    return f"{row.value:.1f} {row.unit} = {100 * (row.ratio or 0):.0f}% of {row.baseline_value or 0:.1f}"


def _times(row: Row) -> str:
    return f"{row.value:.1f} {row.unit} = {row.ratio or 0:.2f}x {row.baseline} {row.baseline_value or 0:.2f}"


def _over(row: Row) -> str:
    return f"{row.value:.2f} {row.unit}, floor {row.baseline_value or 0:.2f} (+{row.value - (row.baseline_value or 0):.2f})"


def _plain(row: Row) -> str:
    return f"{row.value:.1f} {row.unit}"


def _ratio(row: Row) -> float:
    return row.ratio if row.ratio is not None else float("inf")


def _at_least(share: float) -> Callable[[Row], bool]:
    return lambda row: row.ratio is not None and row.ratio >= share


def _at_most(ratio: float) -> Callable[[Row], bool]:
    return lambda row: _ratio(row) <= ratio


def _below(value: float) -> Callable[[Row], bool]:
    return lambda row: row.value < value


BARS = (
    Bar("recall, 8 clients: >= 70% of the model's rate", "concurrency", "recall hybrid, 8 clients", _at_least(0.7), _share),
    Bar("recall, 8 clients: p99 < 250 ms", "concurrency", "recall hybrid, 8 clients, p99", _below(250), _plain),
    Bar("single write, 8 clients: >= 70% of the model's rate", "concurrency", "single write, 8 clients", _at_least(0.7), _share),
    Bar("single write, 8 clients: p99 < 250 ms", "concurrency", "single write, 8 clients, p99", _below(250), _plain),
    Bar("single write, 1 client: p50 <= 1.5x one encode", "concurrency", "single write, 1 clients, p50", _at_most(1.5), _times),
    Bar("write to inbox: p50 <= 20 ms", "propagation", "write-to-inbox p50", lambda r: r.value <= 20, _plain),
    Bar("write to inbox: p99 <= 60 ms", "propagation", "write-to-inbox p99", lambda r: r.value <= 60, _plain),
    Bar(
        "sustained writes, walks drained (8 clients): >= 70% of the model's rate",
        "concurrency",
        "single write, 8 clients, walks drained",
        _at_least(0.7),
        _share,
    ),
    Bar(
        "walk CPU per cell below the model's CPU per text",
        "walk drain",
        "server CPU per walk (every process)",
        _at_most(1.0),
        _times,
    ),
    Bar(
        "recall p99 while a burst writes: within 2x of idle",
        "burst",
        "recall while the writers wrote, p99",
        _at_most(2.0),
        _times,
    ),
    Bar(
        "the same, against idle at the size the burst left",
        "burst",
        "recall while the writers wrote, p99 (against idle after)",
        _at_most(2.0),
        _times,
    ),
    Bar("recall p99 during burst and drain: within 2x of idle", "burst", "recall during the burst, p99", _at_most(2.0), _times),
    Bar(
        "the same, against idle at the size the burst left",
        "burst",
        "recall during the burst, p99 (against idle after)",
        _at_most(2.0),
        _times,
    ),
    Bar(
        "hash REST recall p50 at 10k: within 3 ms of its floor",
        "retrieval",
        "hash @ 10k recall p50",
        lambda r: r.value - (r.baseline_value or 0) <= 3.0,
        _over,
    ),
    Bar(
        "hybrid against dense on the labelled set, or LoCoMo (recall): not below",
        "hybrid quality",
        "REST recall, hybrid: evidence recall@10",
        _at_least(1.0),
        lambda r: f"{r.value:.3f} against dense {r.baseline_value or 0:.3f} ({r.ratio or 0:.3f}x)",
    ),
)


def find(report: Report, section: str, metric: str) -> Row | None:
    """The first figure of ``section`` whose name starts with ``metric``."""
    return next((r for r in report.rows if r.section == section and r.metric.startswith(metric)), None)


def verdicts(report: Report) -> list[list[str]]:
    """One row per bar: the bar, the figure read, and "yes", "no" or "not measured"."""
    rows = []
    for bar in BARS:
        row = find(report, bar.section, bar.metric)
        if row is None:
            rows.append([bar.text, "", "not measured"])
        else:
            rows.append([bar.text, bar.shown(row), "yes" if bar.met(row) else "no"])
    return rows


def main(argv: list[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.cost_bars", description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="a 10 s burst, a shorter walk drain, 200 requests a run")
    parser.add_argument(
        "--engine",
        default="minilm-onnx",
        choices=["minilm", "minilm-onnx", "minilm-bf16"],
        help="the model of the runs that use one",
    )
    parser.add_argument("--skip", default="", help="comma-separated: concurrency, propagation, walks, burst, retrieval, quality")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--locomo", type=Path, help="the quality bar on LoCoMo's release zip instead (bench.locomo)")
    args = parser.parse_args(argv)
    locomo = ["--locomo", str(args.locomo)] if args.locomo else []
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    started = time.perf_counter()
    report = Report(info={"machine": machine_info(), "short": args.short, "engine": args.engine})
    print(f"machine: {report.info['machine']}", flush=True)
    requests, drain, burst_s = (
        (["--requests", "200"], ["20000", "25"], "10") if args.short else (["--requests", "300"], ["30000", "40"], "20")
    )
    runs: list[tuple[str, Callable[[], object]]] = [
        ("concurrency", lambda: concurrency.main(["--engine", args.engine, "--rankings", "hybrid", *requests], report)),
        ("propagation", lambda: propagation.main(["--only", "latency"], report)),
        ("walks", lambda: walk_drain.main(["--cells", drain[0], "--seconds", drain[1]], report)),
        ("burst", lambda: burst.main(["--burst-s", burst_s], report)),
        ("retrieval", lambda: retrieval.main(["--engines", "hash", "--no-lance", "--sizes", "10000"], report)),
        ("quality", lambda: hybrid_quality.main(["--engine", args.engine, *locomo], report)),
    ]
    for name, run in runs:
        if name not in skip:
            run()
    report.info["wall_s"] = round(time.perf_counter() - started, 1)
    report.info["loadavg_end"] = loadavg()
    banner(f"every figure ({'short' if args.short else 'full'} run, {report.info['wall_s']:.0f} s)")
    report.print_table()
    banner("the bars of issue 12")
    print_table(["bar", "figure (same-run baseline)", "met?"], verdicts(report))
    if args.json:
        report.to_json(args.json)
        print(f"\nfigures written to {args.json}")
    return report


if __name__ == "__main__":
    main()

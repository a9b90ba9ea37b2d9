"""The model alone at the batch sizes a server sees, with one thread and with every usable CPU.

What sizes the embedder pool by default (``Settings.embedder_pool``, ``embedder_threads``): for each
batch size, texts/s and CPU per text with one intra-op thread, beside the same with every usable CPU
(the baseline, run in the same process). Short sentences, ``minilm`` (or ``--engine minilm-onnx``).

Run: ``.venv/bin/python -m bench.model_threads [--seconds 6]``.
"""

from __future__ import annotations

import argparse
import time

from bench.common import Report, SentenceGen, banner
from head.cpus import usable_cpus
from head.embedding import make_engine

SECTION = "model threads"
BATCHES = (1, 4, 8, 64)


def measure(engine: object, gen: SentenceGen, batch: int, seconds: float) -> tuple[float, float]:
    """(texts/s, CPU ms per text) of ``engine.encode`` in batches of ``batch`` for about ``seconds``."""
    encode = engine.encode  # type: ignore[attr-defined]
    for _ in range(3):  # warm-up: a new shape's first batches are slow
        encode(gen.many(batch))
    texts = gen.many(512)
    done = 0
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        start = done % len(texts)
        encode(texts[start : start + batch])
        done += batch
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return done / wall, cpu / done * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0, help="per batch size and thread count")
    parser.add_argument("--engine", default="minilm", choices=["minilm", "minilm-onnx", "minilm-bf16"])
    args = parser.parse_args()
    cpus = usable_cpus()
    banner(f"the model alone ({args.engine}): 1 thread against {cpus} (usable CPUs)")
    gen = SentenceGen(3)
    report = Report()
    for batch in BATCHES:
        base_rate, base_cpu = measure(make_engine(args.engine, threads=cpus), gen, batch, args.seconds)
        rate, cpu = measure(make_engine(args.engine, threads=1), gen, batch, args.seconds)
        report.add(SECTION, f"batch {batch}, {cpus} threads", base_rate, "texts/s")
        report.add(SECTION, f"batch {batch}, 1 thread", rate, "texts/s", f"{cpus} threads", base_rate)
        report.add(SECTION, f"batch {batch}, {cpus} threads, CPU per text", base_cpu, "ms")
        report.add(SECTION, f"batch {batch}, 1 thread, CPU per text", cpu, "ms", f"{cpus} threads", base_cpu)
    report.print_table()


if __name__ == "__main__":
    main()

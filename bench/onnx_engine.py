"""The embedding engines side by side, in one process: torch (``minilm``), ONNX fp32 (``minilm-onnx``),
torch with bfloat16 weights (``minilm-bf16``), and ONNX int8 (dynamic quantization of the same export;
measured here only, not an engine).

``.venv/bin/python -m bench.onnx_engine [--texts 512] [--threads N] [--no-starts]``

Figures per engine: texts/s encoding a realistic sentence mix in batches of 64,
the p50 and p90 of one encode of one text, and the min and mean cosine of its
vectors against the torch engine's (on the mix, and on the unit test's fixed
set of 200 varied texts). Unless ``--no-starts``, also the cold starts, each in
a fresh process: the first start of ``minilm-onnx`` (export included), a
start from its cache, and a start of ``minilm``, each to its first vector.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPO, SentenceGen, banner, machine_info, percentile, print_table
from head.bf16_engine import MiniLMBf16Engine
from head.embedding import EmbeddingEngine, MiniLMEngine
from head.onnx_engine import MiniLMOnnxEngine, exported_model, model_dir, session_options
from tests.unit.test_onnx_engine import fixed_sentences

BATCH = 64


class SessionEngine(MiniLMOnnxEngine):
    """The ONNX engine's tokenizer and pooling over another session (here: a quantized model)."""

    def __init__(self, name: str, session: Any, threads: int | None) -> None:
        super().__init__(threads)
        self.name = name
        self._session = session

    def _load(self) -> tuple[Any, Any]:
        tokenizer, _ = super()._load()
        return tokenizer, self._session


def int8_engine(path: Path, per_channel: bool, threads: int | None, scratch: Path) -> tuple[SessionEngine, float, int]:
    """``path`` quantized dynamically (weights int8, activations quantized per call), the seconds it took
    and the quantized file's size."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = scratch / f"int8-{'per-channel' if per_channel else 'per-tensor'}.onnx"
    started = time.perf_counter()
    quantize_dynamic(path, out, per_channel=per_channel, weight_type=QuantType.QInt8)
    took = time.perf_counter() - started
    session = ort.InferenceSession(str(out), session_options(threads), providers=["CPUExecutionProvider"])
    label = "onnx int8 per-channel" if per_channel else "onnx int8 per-tensor"
    return SessionEngine(label, session, threads), took, out.stat().st_size


def throughput(engine: EmbeddingEngine, texts: list[str], rounds: int) -> float:
    """Texts per second, batches of ``BATCH``, median of ``rounds`` passes over ``texts``."""
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for start in range(0, len(texts), BATCH):
            engine.encode(texts[start : start + BATCH])
        rates.append(len(texts) / (time.perf_counter() - started))
    return float(np.median(rates))


def one_encode_ms(engine: EmbeddingEngine, texts: list[str]) -> tuple[float, float]:
    times = []
    for text in texts:
        started = time.perf_counter()
        engine.encode([text])
        times.append(time.perf_counter() - started)
    return 1000 * percentile(times, 50), 1000 * percentile(times, 90)


def cold_start_s(code: str, cache: Path) -> float:
    """Wall seconds of ``code`` in a fresh interpreter whose ONNX cache is ``cache``."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.onnx_engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=512, help="sentences in the mix (default 512)")
    parser.add_argument("--singles", type=int, default=100, help="one-text encodes timed (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the mix per engine (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads of every engine (default: the library's)")
    parser.add_argument("--no-starts", action="store_true", help="skip the cold starts (about 20 s)")
    args = parser.parse_args(argv)

    print(f"machine: {machine_info()}")
    mix = SentenceGen(11).many(args.texts)
    fixed = fixed_sentences()
    singles = SentenceGen(12).many(args.singles)
    scratch = Path(tempfile.mkdtemp(prefix="memesh-bench-onnx-"))

    banner(f"embedding engines, {len(mix)} texts in batches of {BATCH}, threads={args.threads or 'default'}")
    torch_engine = MiniLMEngine(args.threads)
    onnx_engine = MiniLMOnnxEngine(args.threads)
    torch_engine.encode(mix[:BATCH])
    onnx_engine.encode(mix[:BATCH])  # exports into the cache when missing
    fp32_path = exported_model(model_dir())
    engines: list[tuple[str, EmbeddingEngine]] = [
        ("torch (minilm)", torch_engine),
        ("onnx fp32 (minilm-onnx)", onnx_engine),
        ("torch bf16 (minilm-bf16)", MiniLMBf16Engine(args.threads)),
    ]
    for per_channel in (True, False):
        int8, took, size = int8_engine(fp32_path, per_channel, args.threads, scratch)
        print(f"  {int8.name}: quantized in {took:.1f} s, {size / 1e6:.0f} MB (fp32: {fp32_path.stat().st_size / 1e6:.0f} MB)")
        engines.append((int8.name, int8))

    reference_mix = torch_engine.encode(mix)
    reference_fixed = torch_engine.encode(fixed)
    rows = []
    for label, engine in engines:
        engine.encode(mix[:BATCH])  # warm
        rate = throughput(engine, mix, args.rounds)
        p50, p90 = one_encode_ms(engine, singles)
        on_mix = np.sum(engine.encode(mix) * reference_mix, axis=1)
        on_fixed = np.sum(engine.encode(fixed) * reference_fixed, axis=1)
        worst = fixed[int(np.argmin(on_fixed))]
        rows.append(
            [
                label,
                f"{rate:.0f}",
                f"{p50:.1f}",
                f"{p90:.1f}",
                f"{on_mix.min():.6f} / {on_mix.mean():.6f}",
                f"{on_fixed.min():.6f} / {on_fixed.mean():.6f}",
                repr(worst[:24]),
            ]
        )
        print(f"  {label}: {rate:.0f} texts/s, one encode p50 {p50:.1f} ms, min cosine {on_fixed.min():.5f}", flush=True)
    print_table(
        ["engine", "texts/s (64)", "one p50 ms", "one p90 ms", "cos mix min/mean", "cos fixed min/mean", "worst fixed text"],
        rows,
    )

    if not args.no_starts:
        banner("cold starts to the first vector, each in a fresh process")
        cache = scratch / "cache"
        encode = "from head.embedding import make_engine; make_engine({!r}).encode(['warm up'])"
        starts = [
            ("minilm-onnx, first start (exports)", cold_start_s(encode.format("minilm-onnx"), cache)),
            ("minilm-onnx, from the cache", cold_start_s(encode.format("minilm-onnx"), cache)),
            ("minilm (torch)", cold_start_s(encode.format("minilm"), cache)),
            ("minilm-bf16 (torch)", cold_start_s(encode.format("minilm-bf16"), cache)),
        ]
        print_table(["start", "seconds"], [[label, f"{seconds:.1f}"] for label, seconds in starts])
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

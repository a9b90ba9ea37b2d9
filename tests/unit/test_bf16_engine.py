"""The ``minilm-bf16`` engine against the real fp32 engines: real weights, real torch, no stand-ins.

In an embedder actor on Ray it runs in the same pool as ``minilm`` with the same thread pinning
(``head.cpus.pin_torch_threads``), never wide; ``tests/e2e/test_heads.py::test_the_torch_engine_runs_in_the_pool_too``
covers that path for torch (a server start of its own for this engine would add half a minute to the suite).

On a CPU without bfloat16 instructions the engine refuses to load (emulated, it is 3 to 7 times slower than fp32):
there, only the refusal and the probe are tested.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cluster.settings import Settings
from head.bf16_engine import MiniLMBf16Engine, has_bf16_instructions
from head.embedding import engine_named, make_engine
from head.onnx_engine import MiniLMOnnxEngine
from mesh.errors import ConfigInvalid
from tests.unit.test_onnx_engine import FIXED, cosines

pytestmark = pytest.mark.slow
needs_bf16 = pytest.mark.skipif(not has_bf16_instructions(), reason="this CPU has no bfloat16 instructions (AMX, AVX512-BF16)")


@pytest.fixture(scope="module")
def bf16_engine() -> MiniLMBf16Engine:
    return MiniLMBf16Engine(threads=1)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """fp32 vectors of the same weights (ONNX Runtime's, equal to torch's to 0.99999)."""
    return MiniLMOnnxEngine().encode(FIXED)


@needs_bf16
def test_vectors_match_the_fp32_model_on_the_fixed_set(
    bf16_engine: MiniLMBf16Engine, reference: np.ndarray, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = bf16_engine.encode(FIXED)
    similarity = cosines(vectors, reference)
    worst = int(np.argmin(similarity))
    with capsys.disabled():
        print(f"\nminilm-bf16 vs fp32 on {len(FIXED)} texts: min cosine {similarity.min():.7f}, mean {similarity.mean():.7f}")
    assert similarity.min() >= 0.9995, f"cosine {similarity[worst]:.5f} on {FIXED[worst]!r}"  # int8 weights: 0.959


@needs_bf16
def test_rows_are_unit_norm_float32_of_384_dims(bf16_engine: MiniLMBf16Engine) -> None:
    vectors = bf16_engine.encode(FIXED)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(FIXED), 384) == (len(FIXED), bf16_engine.dims)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()


@needs_bf16
def test_a_text_keeps_its_place_and_its_vector_to_rounding_whatever_the_batch(bf16_engine: MiniLMBf16Engine) -> None:
    texts = FIXED[:100]  # more than one batch, of very different lengths
    together = bf16_engine.encode(texts)
    alone = np.concatenate([bf16_engine.encode([text]) for text in texts])
    reversed_ = bf16_engine.encode(texts[::-1])
    assert cosines(together, alone).min() > 0.9998
    assert cosines(together, reversed_[::-1]).min() > 0.9998
    assert len(set(texts)) == len(texts)
    nearest = np.argmax(together @ alone.T, axis=1)  # each text's own vector is the nearest of the hundred
    assert (nearest == np.arange(len(texts))).all()


@needs_bf16
def test_no_texts_give_no_rows(bf16_engine: MiniLMBf16Engine) -> None:
    assert bf16_engine.encode([]).shape == (0, 384)


@needs_bf16
def test_hostile_texts_give_finite_unit_vectors_near_fp32(bf16_engine: MiniLMBf16Engine) -> None:
    texts = ["", " ", "\x00", "😀" * 5000, "x" * 100_000, "\u202eevil\u202c", "a\u0000b\u0007c"]
    vectors = bf16_engine.encode(texts)
    assert np.isfinite(vectors).all()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosines(vectors, MiniLMOnnxEngine().encode(texts)).min() >= 0.9995


def test_chosen_by_name_with_a_name_of_its_own() -> None:
    engine = make_engine("minilm-bf16", threads=1)
    assert isinstance(engine, MiniLMBf16Engine)
    assert engine.name == "minilm-bf16-all-MiniLM-L6-v2"
    assert engine.name not in {MiniLMOnnxEngine.name, make_engine("minilm").name}  # a corpus records which made it
    assert isinstance(engine_named(engine.name), MiniLMBf16Engine)  # a stored corpus's engine, served by name


def test_settings_accept_it_in_every_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings(embedding={"engine": "minilm-bf16"}).embedding.engine == "minilm-bf16"
    assert Settings(profile="production", embedding={"engine": "minilm-bf16"}).embedding.engine == "minilm-bf16"
    monkeypatch.setenv("MEMESH_EMBEDDING__ENGINE", "minilm-bf16")
    assert Settings().embedding.engine == "minilm-bf16"


@needs_bf16
def test_threads_are_honoured(reference: np.ndarray) -> None:
    engine = MiniLMBf16Engine(threads=2)
    vectors = engine.encode(FIXED[:8])
    assert engine.threads_used == 2
    assert cosines(vectors, reference[:8]).min() >= 0.9995


def test_the_bfloat16_probe_reads_the_cpu_flags(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n")
    assert not has_bf16_instructions(cpuinfo)  # Ice Lake: AVX512, no bfloat16 multiply
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    assert has_bf16_instructions(cpuinfo)  # Cooper Lake
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n")
    assert has_bf16_instructions(cpuinfo)  # Sapphire Rapids
    assert has_bf16_instructions(tmp_path / "absent")  # unreadable: assumed, the engine runs


def test_a_cpu_without_bfloat16_instructions_is_refused_with_the_engine_to_choose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("head.bf16_engine.this_cpu_has_bf16", lambda: False)
    monkeypatch.setattr(MiniLMBf16Engine, "_loaded", None)  # a fresh process's engine
    with pytest.raises(ConfigInvalid, match="minilm-onnx"):
        MiniLMBf16Engine(threads=1).encode(["anything"])


def test_a_stored_bf16_corpus_is_still_served_on_such_a_cpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A deployment moved to a CPU without bfloat16 keeps answering until a reembed moves its corpus off."""
    monkeypatch.setattr("head.bf16_engine.this_cpu_has_bf16", lambda: False)
    monkeypatch.setattr(MiniLMBf16Engine, "_loaded", None)
    with caplog.at_level("WARNING", logger="head.bf16_engine"):
        vectors = engine_named(MiniLMBf16Engine.name, threads=1).encode(["the invoice batch was re-sent"])
    assert vectors.shape == (1, 384) and np.isfinite(vectors).all()
    assert "until a reembed" in caplog.text

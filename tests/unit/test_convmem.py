"""The labelled conversational-memory set of bench.convmem: deterministic, labelled, and not trivially lexical."""

from __future__ import annotations

import re

from bench.convmem import build

STOP = {"the", "a", "an", "of", "to", "and", "did", "what", "which", "who", "is", "in", "on", "up", "take", "speaker", "new"}


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


def test_the_set_is_deterministic_and_large_enough() -> None:
    data = build()
    again = build()
    assert [q.text for q in data.questions] == [q.text for q in again.questions]
    assert [t.text for c in data.conversations for t in c.turns] == [t.text for c in again.conversations for t in c.turns]
    assert [q.text for q in build(seed=8).questions] != [q.text for q in data.questions]
    assert len(data.questions) >= 300
    assert sum(len(c.turns) for c in data.conversations) >= 3000
    kinds = {q.kind for q in data.questions}
    assert kinds == {"entity", "paraphrase", "update", "multi"}
    assert all(sum(q.kind == kind for q in data.questions) >= 40 for kind in kinds)


def test_every_question_names_turns_of_its_own_conversation() -> None:
    data = build()
    turns = {c.id: {t.id: t for t in c.turns} for c in data.conversations}
    for q in data.questions:
        assert q.evidence and all(e in turns[q.conversation_id] for e in q.evidence)
        if q.kind == "multi":
            assert len(q.evidence) == 2


def test_entity_questions_share_a_rare_word_and_paraphrases_mostly_share_none() -> None:
    data = build()
    turns = {t.id: t for c in data.conversations for t in c.turns}
    for q in (q for q in data.questions if q.kind == "entity"):
        assert any(words(q.text) & words(turns[e].text) for e in q.evidence), q.text
    paraphrases = [q for q in data.questions if q.kind == "paraphrase"]
    disjoint = [q for q in paraphrases if not any(words(q.text) & words(turns[e].text) for e in q.evidence)]
    assert len(disjoint) >= 0.6 * len(paraphrases)

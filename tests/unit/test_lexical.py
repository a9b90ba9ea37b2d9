"""The lexical index (BM25, row-aligned with the vectors) and reciprocal rank fusion."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mesh import lexical
from mesh.fusion import fuse
from mesh.lexical import MAX_QUERY_TERMS, LexicalIndex, english_stop_words, query_terms, terms
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter, SearchRequest
from mesh.tuning import RetrievalTuning, SceneTuning
from tests.unit.helpers import cell, direction, uid

DIMS = 16
ROOT = Path(__file__).resolve().parents[2]
TUNING = RetrievalTuning()


def test_terms_fold_case_drop_stop_words_and_stem() -> None:
    assert terms("The Running dogs, and THEIR owners' meetings!") == ["run", "dog", "owner", "meet"]
    assert terms("Zürich café 2024 x_y") == ["zürich", "café", "2024", "x", "y"]
    assert terms("the of and") == []


def test_the_stop_words_are_scikit_learns_and_analysis_never_imports_its_package() -> None:
    """Importing scikit-learn's package took 0.8 s idle and 13 s on a loaded CI machine, inside the first
    write a scene shard took (a fuzzing run failed on it): analysis reads only the list's data module."""
    probe = (
        "import sys; from mesh.lexical import english_stop_words, terms; "
        "assert terms('the cats were running') == ['cat', 'run']; "
        "assert 'sklearn' not in sys.modules, sorted(m for m in sys.modules if m.startswith('sklearn')); "
        "print(len(english_stop_words()))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    assert english_stop_words() == ENGLISH_STOP_WORDS and run.stdout.strip() == str(len(ENGLISH_STOP_WORDS))


def test_bm25_matches_the_textbook_formula() -> None:
    index = LexicalIndex()
    docs = ["apple banana apple", "banana cherry", "cherry cherry date fig"]
    for row, text in enumerate(docs):
        index.add(row, 1, text)
    live = np.ones(3, dtype=np.bool_)
    scores = index.scores(["appl", "cherri"], live, live, k1=1.2, b=0.75)
    lengths = [3, 2, 4]
    average = sum(lengths) / 3

    def term(tf: int, df: int, length: int) -> float:
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / average))

    expected = [term(2, 1, 3), term(1, 2, 2), term(2, 2, 4)]
    assert np.allclose(scores, expected, rtol=1e-5)


def test_a_query_over_more_postings_than_a_pass_scores_as_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query's postings are scored a bounded number at a time (its working memory stays bounded whatever
    the corpus and the terms): the scores are those of a single pass over them all."""
    index = LexicalIndex()
    rng = np.random.default_rng(3)
    words = [f"word{i}" for i in range(40)]
    for row in range(3000):
        index.add(row, int(rng.integers(0, 3)), " ".join(rng.choice(words, size=12)))
    live = rng.random(3000) > 0.1
    allowed = live & (rng.random(3000) > 0.3)
    query = [terms(w)[0] for w in words[:30]] + [terms(words[0])[0]]
    whole = index.scores(query, live, allowed)
    monkeypatch.setattr(lexical, "POSTINGS_PER_PASS", 500)  # many passes of a few terms each
    assert np.allclose(index.scores(query, live, allowed), whole, rtol=1e-6)
    assert (whole > 0).sum() > 1000


def test_statistics_are_per_project_and_over_live_rows_only() -> None:
    index = LexicalIndex()
    index.add(0, 1, "alpha beta")
    index.add(1, 1, "alpha gamma")
    index.add(2, 2, "alpha beta")  # another project: its rows never change project 1's scores
    live = np.array([True, True, True])
    alone = LexicalIndex()
    alone.add(0, 1, "alpha beta")
    alone.add(1, 1, "alpha gamma")
    both = index.scores(["beta"], live, live)
    only = alone.scores(["beta"], np.array([True, True]), np.array([True, True]))
    assert math.isclose(both[0], only[0], rel_tol=1e-6)
    dead = np.array([True, False, True])  # a tombstoned row leaves the statistics at once
    assert not math.isclose(index.scores(["beta"], dead, dead)[0], both[0], rel_tol=1e-6)
    assert index.scores(["beta"], dead, dead)[1] == 0.0


def test_remove_is_the_inverse_of_add() -> None:
    index = LexicalIndex()
    index.add(0, 1, "secret plan zebra")
    index.add(1, 1, "plan b")
    live = np.ones(2, dtype=np.bool_)
    before = index.scores(["plan"], live, live).copy()
    index.remove(0, "secret plan zebra")
    assert 0 not in index
    assert "zebra" not in index._postings and "secret" not in index._postings  # nothing of its content is left
    index.add(0, 1, "secret plan zebra")
    assert np.allclose(index.scores(["plan"], live, live), before)


def test_kept_statistics_never_outlive_what_they_were_computed_from() -> None:
    """A query after a write, an erase, a tombstone or other ``k1``/``b`` scores as on an index built afresh."""
    texts = ["plan the zebra budget", "plan b", "zebra crossing plan", "budget review", "the plan for plans"]

    def fresh(rows: list[int]) -> LexicalIndex:
        built = LexicalIndex()
        for row in rows:
            built.add(row, 1 + row % 2, texts[row])
        return built

    index = fresh([0, 1, 2, 3])
    query = terms("plan zebra budget")
    live = np.array([True, True, True, True, False])
    first = index.scores(query, live, live)
    assert np.array_equal(index.scores(query, live, live), first)  # kept: the same answer
    index.add(4, 1, texts[4])  # a write
    live = np.ones(5, dtype=np.bool_)
    assert np.array_equal(index.scores(query, live, live), fresh([0, 1, 2, 3, 4]).scores(query, live, live))
    dead = np.array([True, False, True, True, True])  # a tombstone: the live rows differ
    assert np.array_equal(index.scores(query, dead, dead), fresh([0, 1, 2, 3, 4]).scores(query, dead, dead))
    other = fresh([0, 1, 2, 3, 4]).scores(query, live, live, k1=2.0, b=0.3)
    assert np.array_equal(index.scores(query, live, live, k1=2.0, b=0.3), other)
    assert np.array_equal(index.scores(query, live, live), fresh([0, 1, 2, 3, 4]).scores(query, live, live))
    index.remove(2, texts[2])  # an erase, asked about with the same live flags as the query before it
    assert np.array_equal(index.scores(query, live, live), fresh([0, 1, 3, 4]).scores(query, live, live))
    gone = np.array([True, True, False, True, True])
    assert np.array_equal(index.scores(query, gone, gone), fresh([0, 1, 3, 4]).scores(query, gone, gone))
    index.remove(3, texts[3])  # the same row indexed again from a longer text: the same live rows, other lengths
    index.add(3, 2, texts[3] + " and a longer review of it")
    again = fresh([0, 1, 4])
    again.add(3, 2, texts[3] + " and a longer review of it")
    assert np.array_equal(index.scores(query, gone, gone), again.scores(query, gone, gone))


@pytest.mark.parametrize("kept", [lexical.KEPT_POSTINGS, 3, 0])
def test_kept_gains_score_as_computed_ones_whatever_the_filter_or_weight(monkeypatch: pytest.MonkeyPatch, kept: int) -> None:
    """Gains kept from one query serve the next (another filter, a repeated term, fewer or more terms) exactly as
    computed afresh; while kept they never stop a write from growing the postings; a full store keeps no more."""
    monkeypatch.setattr(lexical, "KEPT_POSTINGS", kept)
    texts = ["plan the zebra budget plan", "plan b", "zebra crossing plan", "budget review", "the plan for plans", "zebra"]

    def fresh(rows: list[int]) -> LexicalIndex:
        built = LexicalIndex()
        for row in rows:
            built.add(row, row % 2, texts[row])
        return built

    index = fresh([0, 1, 2, 3, 4])
    live = np.array([True, True, True, False, True])
    some = np.array([True, False, True, False, True])
    for query in (terms("plan zebra"), terms("zebra plan plan budget"), terms("plan"), terms("budget zebra")):
        for allowed in (live, some, live & ~some):
            assert np.array_equal(index.scores(query, live, allowed), fresh([0, 1, 2, 3, 4]).scores(query, live, allowed))
    index.add(5, 1, texts[5])  # a term whose gains are kept gets a posting more
    live = np.ones(6, dtype=np.bool_)
    query = terms("zebra plan")
    assert np.array_equal(index.scores(query, live, live), fresh([0, 1, 2, 3, 4, 5]).scores(query, live, live))
    assert index.scores(query, live, live)[5] > 0


def test_fusion_rewards_agreement_and_keeps_dense_order_alone() -> None:
    a, b, c = (cell(direction(i, DIMS)) for i in range(3))
    dense = [(a, 0.9), (b, 0.8), (c, 0.7)]
    assert [x.id for x, _, _ in fuse(dense, [], TUNING)] == [a.id, b.id, c.id]
    textbook = RetrievalTuning(rrf_k=60, w_lexical=1.0)  # Cormack et al.'s constant, equal weights
    fused = fuse(dense, [(c, 0.7), (b, 0.8)], textbook)
    assert [x.id for x, _, _ in fused] == [c.id, b.id, a.id]  # found by both beats first in one list only
    assert fused[0][2] < 1.0 and fused[0][1] == 0.7  # relevance below the maximum; the cosine is carried along
    top = fuse([(a, 0.9)], [(a, 0.9)], TUNING)
    assert top[0][2] == 1.0
    light = fuse(dense, [(c, 0.7), (b, 0.8)], RetrievalTuning(w_lexical=0.25))  # a light lexical weight keeps dense order
    assert [x.id for x, _, _ in light] == [b.id, c.id, a.id]
    assert [x.id for x, _, _ in fuse(dense, [(c, 0.7), (b, 0.8)], TUNING)] == [c.id, b.id, a.id]  # the default: equal


def test_only_bm25s_first_candidates_join_the_fusion() -> None:
    """A shard sends at most ``lexical_candidates`` BM25 hits however large the dense pool, each with its cosine."""
    p = MemoryPartition(DIMS, SceneTuning())
    cells = [cell(direction(i, DIMS), content=f"zebra report number {i}") for i in range(12)]
    p.write(cells, [uid("5") for _ in cells])
    tuning = RetrievalTuning(lexical_candidates=3)
    dense, lexical = p.answer(SearchRequest("t1", direction(0, DIMS), 10, NodeFilter(), tuple(terms("zebra")), tuning))
    assert len(dense) == 10 and len(lexical) == 3
    assert all(abs(cos - float(c.embedding @ direction(0, DIMS))) < 1e-5 for c, _, cos in lexical)
    assert tuning.lexical_pool(2) == 2 and tuning.lexical_pool(40) == 3


def test_partition_lexical_search_honours_filters_tombstones_and_erase() -> None:
    p = MemoryPartition(DIMS, SceneTuning())
    kept = cell(direction(1, DIMS), content="the quarterly zebra budget")
    gone = cell(direction(2, DIMS), content="zebra crossing near the office")
    other = cell(direction(3, DIMS), content="zebra in another tenant", tenant="t2")
    p.write([kept, gone, other], [uid("5") for _ in range(3)])
    found = p.lexical_search("t1", terms("zebra"), 10, NodeFilter(), TUNING)
    assert {c.id for c, _ in found} == {kept.id, gone.id}
    p.tombstone(gone.id)
    assert [c.id for c, _ in p.lexical_search("t1", terms("zebra"), 10, NodeFilter(), TUNING)] == [kept.id]
    p.erase([kept.id])
    assert p.lexical_search("t1", terms("zebra budget"), 10, NodeFilter(), TUNING) == []
    assert p.lexical_search("t1", terms("zebra"), 10, NodeFilter(tenant_id="t2"), TUNING) == []


def test_a_query_scores_with_its_first_distinct_terms_only() -> None:
    words = [f"w{i}x" for i in range(5 * MAX_QUERY_TERMS)]
    asked = query_terms(" ".join(words + words[:3]))  # repeats of kept terms still count
    assert len(set(asked)) == MAX_QUERY_TERMS
    assert asked[:MAX_QUERY_TERMS] == terms(" ".join(words[:MAX_QUERY_TERMS]))
    assert asked[MAX_QUERY_TERMS:] == terms(" ".join(words[:3]))


def test_a_huge_word_is_cut_and_never_memoised_whole() -> None:
    from mesh.lexical import MAX_WORD, _stem

    before = _stem.cache_info().currsize
    huge = "q" * 50_000
    assert terms(f"{huge} dogs") == ["q" * MAX_WORD, "dog"]
    assert _stem.cache_info().currsize <= before + 1  # "dogs" at most; the huge word never enters the memo


def test_a_stop_word_file_that_fails_to_load_on_its_own_falls_back_to_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A release whose ``_stop_words.py`` imports from its package (or renames the constant) must not break
    tokenising: the loader falls back to the package import (here a stand-in module with the list)."""
    import importlib.util
    import types

    changed = tmp_path / "sklearn"
    (changed / "feature_extraction").mkdir(parents=True)
    (changed / "__init__.py").write_text("")
    (changed / "feature_extraction" / "_stop_words.py").write_text("from ._lists import WORDS as ENGLISH_STOP_WORDS\n")
    spec = importlib.util.spec_from_file_location("sklearn", changed / "__init__.py", submodule_search_locations=[str(changed)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "sklearn" else None)
    text = types.ModuleType("sklearn.feature_extraction.text")
    text.ENGLISH_STOP_WORDS = frozenset({"the", "a"})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sklearn.feature_extraction.text", text)
    assert english_stop_words() == frozenset({"the", "a"})

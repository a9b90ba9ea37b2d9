from __future__ import annotations

import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh.model import normalize
from mesh.vector_index import VectorIndex


def unit(*values: float) -> np.ndarray:
    return normalize(np.array(values, dtype=np.float32))


def test_search_returns_nearest_live_rows_best_first() -> None:
    index = VectorIndex(dims=3, capacity=1)
    index.upsert("a", unit(1, 0, 0))
    index.upsert("b", unit(0.9, 0.1, 0))
    index.upsert("c", unit(0, 1, 0))
    hits = index.search(unit(1, 0, 0), k=2)
    assert [h[0] for h in hits] == ["a", "b"]
    assert hits[0][1] == pytest.approx(1.0)
    index.set_live("a", False)
    assert [h[0] for h in index.search(unit(1, 0, 0), k=2)] == ["b", "c"]


def test_growth_keeps_rows_and_upsert_replaces_in_place() -> None:
    index = VectorIndex(dims=4, capacity=2)
    rng = np.random.default_rng(7)
    vectors = {f"n{i}": normalize(rng.normal(size=4)) for i in range(50)}
    for node_id, vector in vectors.items():
        index.upsert(node_id, vector)
    assert len(index) == 50
    for node_id, vector in vectors.items():
        assert index.search(vector, 1)[0][0] == node_id
    index.upsert("n3", unit(1, 1, 1, 1))
    assert len(index) == 50
    assert index.search(unit(1, 1, 1, 1), 1)[0][0] == "n3"


def test_mask_and_ties_are_deterministic() -> None:
    index = VectorIndex(dims=2)
    for node_id in ("x", "y", "z"):
        index.upsert(node_id, unit(1, 0))
    assert [h[0] for h in index.search(unit(1, 0), 3)] == ["x", "y", "z"]
    mask = np.array([False, True, True])
    assert [h[0] for h in index.search(unit(1, 0), 3, mask)] == ["y", "z"]


def test_wrong_width_is_refused() -> None:
    index = VectorIndex(dims=3)
    with pytest.raises(ValueError):
        index.upsert("a", unit(1, 0))


def test_search_many_answers_like_search_for_every_query() -> None:
    rng = np.random.default_rng(11)
    index = VectorIndex(dims=6)
    for i in range(60):
        index.upsert(f"n{i:02d}", normalize(rng.normal(size=6)), live=i % 7 != 0)
    queries = np.stack([normalize(rng.normal(size=6)) for _ in range(9)])
    mask = np.array([i % 3 != 1 for i in range(60)])
    for k in (1, 5, 100):
        many = index.search_many(queries, k, mask)
        for query, hits in zip(queries, many, strict=True):
            single = index.search(query, k, mask)
            assert [h[0] for h in hits] == [h[0] for h in single]
            assert np.allclose([h[1] for h in hits], [h[1] for h in single], atol=1e-6)


def test_scores_taken_once_answer_as_search_after_the_index_changed() -> None:
    """``search_from`` starts from scores taken before rows were added, moved, erased and hidden: it must
    answer what ``search`` answers now (it fails if a row changed since the scores is not scored again)."""
    rng = np.random.default_rng(5)
    index = VectorIndex(dims=8, capacity=4)
    for i in range(40):
        index.upsert(f"n{i:02d}", normalize(rng.normal(size=8)))
    queries = np.stack([normalize(rng.normal(size=8)) for _ in range(6)])
    version, taken = index.scores_since(queries)
    for i in range(40, 70):  # new rows (the matrix grows past its capacity)
        index.upsert(f"n{i:02d}", normalize(rng.normal(size=8)))
    for i in range(0, 40, 3):  # rows whose vector moved: now each query's nearest
        index.upsert(f"n{i:02d}", queries[i % len(queries)])
    index.erase("n01")
    index.set_live("n02", False)
    for query, scores in zip(queries, taken, strict=True):
        for k in (1, 8, 100):
            now, given = index.search(query, k), index.search_from(scores, version, query, k)
            assert [h[0] for h in given] == [h[0] for h in now]
            assert np.allclose([h[1] for h in given], [h[1] for h in now], atol=1e-6)
    assert index.search_from(taken[0], index.version, queries[0], 3) != index.search(queries[0], 3)  # stale scores


def test_a_nan_query_answers_in_search_many_as_in_search() -> None:
    """A NaN score equals nothing, so the batched pick cannot see its boundary: it must fall back like a tie."""
    index = VectorIndex(dims=2)
    for i in range(6):
        index.upsert(f"a{i}", unit(1, i / 10))
    queries = np.array([[np.nan, 0.0], [1.0, 0.0]], dtype=np.float32)
    many = index.search_many(queries, 2)
    assert [h[0] for h in many[0]] == [h[0] for h in index.search(queries[0], 2)]
    assert [h[0] for h in many[1]] == [h[0] for h in index.search(queries[1], 2)]


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(1, 8), st.integers(0, 2**32 - 1), st.booleans())
def test_the_batched_pick_is_the_single_pick_for_every_column_ties_included(
    size: int, k: int, levels: int, seed: int, subset: bool
) -> None:
    """Scores drawn from a few levels tie at every boundary: each query's row of the batched pick must hold
    the very positions, in the very order, that the one-query pick chooses for the same scores (ties by id)."""
    rng = np.random.default_rng(seed)
    index = VectorIndex(dims=2, capacity=4)
    for i in range(size):
        node_id = str(uuid.UUID(int=int(rng.integers(0, 2**62)))) if i % 2 else f"node-{rng.integers(0, 10**6)}-{i}"
        index.upsert(node_id, unit(1.0, 0.0))
    rows = np.flatnonzero(rng.integers(0, 2, size)) if subset else np.arange(size)
    if rows.size == 0:
        rows = np.arange(size)
    sims = (rng.integers(0, levels, (5, rows.size)) / levels).astype(np.float32)  # queries x rows
    batched, short = index._best_many(sims, rows, k)
    assert short == {}  # finite scores: every query has its k
    for j in range(sims.shape[0]):
        assert batched[j].tolist() == index._best(sims[j], rows, k).tolist()

from __future__ import annotations

import numpy as np
import pytest

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

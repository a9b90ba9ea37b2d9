"""The walks' scene searches are served from kept answers only while the tenant's scenes are unchanged:
after any mix of centroid moves, scenes founded, hidden and erased, in two tenants, every answer equals
the tenant's own search made then, with the centroids the index holds then."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import numpy as np

from mesh.model import Scene
from mesh.nearest_cache import NearestCache
from mesh.partition_index import SceneCentroidIndex
from tests.unit.helpers import direction, uid

DIMS = 16
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def scene(tenant: str, seed: int) -> Scene:
    return Scene(uid("5"), tenant, "p", NOW, direction(seed, DIMS).astype(np.float64), ["m"], live_count=1)


def moved(s: Scene, seed: int) -> None:
    s.vector_sum = s.vector_sum + direction(seed, DIMS).astype(np.float64)
    s.cached_centroid = None


def test_every_cached_answer_equals_a_fresh_search_through_changes() -> None:
    rng = random.Random(7)
    index = SceneCentroidIndex(DIMS)
    scenes: dict[str, list[Scene]] = {"a": [], "b": []}
    for tenant in scenes:
        for _ in range(30):
            scenes[tenant].append(scene(tenant, rng.randrange(10_000)))
            index.update(scenes[tenant][-1])
    checked = 0
    for step in range(400):
        tenant = rng.choice("ab")
        mine = scenes[tenant]
        action = rng.random()
        if action < 0.15:
            s = rng.choice(mine)
            moved(s, step)
            index.update(s)
        elif action < 0.2:
            mine.append(scene(tenant, 50_000 + step))
            index.update(mine[-1])
        elif action < 0.23:
            index.hide(rng.choice(mine))
        elif action < 0.25:
            s = rng.choice(mine)
            index.erase(s)
            mine.remove(s)
        else:  # a wave: frontier scenes' centroids (repeated across waves and within one) and fresh vectors
            queries = [rng.choice(mine).centroid for _ in range(6)] + [direction(rng.randrange(99), DIMS)]
            queries.append(queries[0])
            ks = [rng.choice((3, 9)) for _ in queries]
            ids, sims, centroids = index.nearest_many(tenant, np.stack(queries), ks)
            at = 0
            for query, k, got_ids, got_sims in zip(queries, ks, ids, sims, strict=True):
                fresh = index.nearest(tenant, query, k)  # one query alone: the same up to float32 rounding
                assert got_ids == [i for i, _ in fresh]
                assert np.allclose(got_sims, [sim for _, sim in fresh], rtol=0, atol=1e-6)
                for hit in got_ids:
                    live = next(s for s in mine if s.id == hit)
                    assert np.array_equal(centroids[at], live.centroid)
                    at += 1
                checked += 1
    assert checked > 1_000 and index.answers.hits > 300 and index.answers.misses > 300


def test_the_cache_is_bounded_and_drops_the_least_recent_tenant_first() -> None:
    cache = NearestCache(max_entries=4)
    for n in range(3):
        cache.put("a", (bytes([n]), 1), ([n], [1.0]))
    cache.put("b", (b"x", 1), ([0], [1.0]))
    assert len(cache) == 4
    assert cache.get("a", (b"\x00", 1)) is not None  # "a" is now the most recent tenant
    cache.put("c", (b"y", 1), ([0], [1.0]))  # five entries: "b", the least recent, goes
    assert len(cache) == 4 and cache.get("b", (b"x", 1)) is None and cache.get("c", (b"y", 1)) is not None
    for n in range(10):  # one tenant alone keeps at most max_entries, oldest first out
        cache.put("d", (bytes([n]), 1), ([n], [1.0]))
    assert len(cache) == 4 and cache.get("d", (bytes([9]), 1)) is not None and cache.get("d", (bytes([0]), 1)) is None
    cache.invalidate("d")
    assert len(cache) == 0


def test_the_cache_is_bounded_by_the_rows_its_answers_name_too() -> None:
    cache = NearestCache(max_entries=100, max_rows=10)
    cache.put("a", (b"1", 4), ([1, 2, 3, 4], [1.0] * 4))
    cache.put("b", (b"2", 4), ([1, 2, 3, 4], [1.0] * 4))
    cache.put("b", (b"3", 4), ([5, 6, 7, 8], [1.0] * 4))  # twelve rows: "a", the least recent tenant, goes
    assert len(cache) == 2 and cache.get("a", (b"1", 4)) is None
    cache.put("b", (b"3", 4), ([5, 6], [1.0] * 2))  # a replaced answer counts once, with its new rows
    cache.put("b", (b"4", 4), ([9, 10, 11, 12], [1.0] * 4))
    assert len(cache) == 3 and cache.get("b", (b"2", 4)) is not None
    cache.put("b", (b"5", 4), ([1], [1.0]))  # eleven rows, one tenant: its oldest answer goes
    assert len(cache) == 3 and cache.get("b", (b"2", 4)) is None and cache.get("b", (b"5", 4)) is not None


def test_answers_asked_once_are_given_exactly_and_not_kept() -> None:
    index = SceneCentroidIndex(DIMS)
    for n in range(20):
        index.update(scene("a", n))
    queries = np.stack([direction(100 + n, DIMS) for n in range(4)])
    once = index.nearest_many("a", queries, [5] * 4, [False, True, False, True])
    assert len(index.answers) == 2 and index.answers.misses == 4
    again = index.nearest_many("a", queries, [5] * 4)  # the two kept are served, the two others searched again
    assert index.answers.hits == 2 and index.answers.misses == 6 and len(index.answers) == 4
    assert once[0] == again[0] and once[1] == again[1] and np.array_equal(once[2], again[2])
    for query, got in zip(queries, again[0], strict=True):
        assert got == [i for i, _ in index.nearest("a", query, 5)]

"""Answers of a tenant's scene-centroid search, kept until that tenant's scenes next change.

A walk's frontier is mostly scenes, searched around their centroids, and the
same popular scenes are frontier nodes of walk after walk: while a backlog of
walks drains, the scene index does not change at all. So an answer is kept,
keyed by a digest of the query vector's bytes and ``k``, and reused. A walk's
first wave searches around the written cell's own vector, which no later walk
asks: its answers are not kept (``SceneCentroidIndex.nearest_many``), so they
never push out the centroids' answers.

Guarantees:
- Exact: an answer is served only while the tenant's index is unchanged since it
  was computed; every change of a tenant's scene centroids (``invalidate``)
  drops all of that tenant's answers. What is kept is the index's rows, so the
  centroids served are the index's current ones. Keys are 128-bit BLAKE2b
  digests of the query's float32 bytes: two distinct queries share one with a
  probability below 2^-64 even with billions kept.
- Bounded: at most ``max_entries`` answers and ``max_rows`` answer rows over all
  tenants; past either the tenant used least recently loses all its answers (and
  one tenant alone keeps at most that many, oldest dropped first).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

Key = tuple[bytes, int]  # the digest of the query vector's bytes, k
Answer = tuple[list[int], list[float]]  # rows, similarities: best first

MAX_ENTRIES = 32_768  # a kept answer of the default k (9) takes about 0.8 KB
MAX_ROWS = 1 << 18  # the rows all kept answers name at most (a walk's k may reach 257)


def query_key(vector: npt.NDArray[np.floating], k: int) -> Key:
    """The key of a search for the ``k`` nearest to ``vector`` (its float32 bytes' digest and ``k``)."""
    data = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    return hashlib.blake2b(data, digest_size=16).digest(), k


class NearestCache:
    def __init__(self, max_entries: int = MAX_ENTRIES, max_rows: int = MAX_ROWS) -> None:
        self.max_entries, self.max_rows = max_entries, max_rows
        self._tenants: OrderedDict[str, dict[Key, Answer]] = OrderedDict()
        self._size = 0
        self._rows = 0
        self.hits = 0
        self.misses = 0

    def get(self, tenant_id: str, key: Key) -> Answer | None:
        answers = self._tenants.get(tenant_id)
        answer = None if answers is None else answers.get(key)
        if answer is None:
            self.misses += 1
            return None
        self._tenants.move_to_end(tenant_id)
        self.hits += 1
        return answer

    def put(self, tenant_id: str, key: Key, answer: Answer) -> None:
        answers = self._tenants.get(tenant_id)
        if answers is None:
            answers = self._tenants[tenant_id] = {}
        self._tenants.move_to_end(tenant_id)
        replaced = answers.pop(key, None)
        if replaced is not None:
            self._forget(replaced)
        answers[key] = answer
        self._size += 1
        self._rows += len(answer[0])
        while self._over():
            if len(self._tenants) > 1:  # the tenant used least recently (never this one) loses all its answers
                _, dropped = self._tenants.popitem(last=False)
                for gone in dropped.values():
                    self._forget(gone)
            elif len(answers) > 1:  # this tenant alone: its oldest answers go
                self._forget(answers.pop(next(iter(answers))))
            else:
                break

    def invalidate(self, tenant_id: str) -> None:
        """The tenant's scene centroids changed: none of its answers stands."""
        dropped = self._tenants.pop(tenant_id, None)
        if dropped is not None:
            for gone in dropped.values():
                self._forget(gone)

    def _over(self) -> bool:
        return self._size > self.max_entries or self._rows > self.max_rows

    def _forget(self, answer: Answer) -> None:
        self._size -= 1
        self._rows -= len(answer[0])

    def count_on_from(self, other: NearestCache) -> None:
        """Take over ``other``'s counts (a rebuilt partition's cache replaces it: the totals go on)."""
        self.hits += other.hits
        self.misses += other.misses

    def __len__(self) -> int:
        return self._size

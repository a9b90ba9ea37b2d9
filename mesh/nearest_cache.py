"""Answers of a tenant's scene-centroid search, kept until that tenant's scenes next change.

A walk's frontier is mostly scenes, searched around their centroids, and the
same popular scenes are frontier nodes of walk after walk: while a backlog of
walks drains, the scene index does not change at all. So an answer is kept,
keyed by the query vector's bytes and ``k``, and reused.

Guarantees:
- Exact: an answer is served only while the tenant's index is unchanged since it
  was computed; every change of a tenant's scene centroids (``invalidate``)
  drops all of that tenant's answers. What is kept is the index's rows, so the
  centroids served are the index's current ones.
- Bounded: at most ``max_entries`` answers over all tenants; past it the tenant
  used least recently loses all its answers (and one tenant alone keeps at most
  ``max_entries``, oldest dropped first).
"""

from __future__ import annotations

from collections import OrderedDict

Key = tuple[bytes, int]  # the query vector's bytes, k
Answer = tuple[list[int], list[float]]  # rows, similarities: best first

MAX_ENTRIES = 8_192  # about 1.7 KB each at 384 dimensions (the key holds the query's float32)
MAX_BYTES = 16 << 20  # what the keys may hold at most, whatever the engine's dimension (hash engines reach 4096)


def entries_for(dims: int) -> int:
    """How many answers a cache keeps for queries of ``dims`` float32: ``MAX_ENTRIES``, fewer for wide vectors."""
    return max(64, min(MAX_ENTRIES, MAX_BYTES // (4 * dims + 256)))


class NearestCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._tenants: OrderedDict[str, dict[Key, Answer]] = OrderedDict()
        self._size = 0
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
        if key not in answers:
            if len(answers) >= self.max_entries:
                del answers[next(iter(answers))]
                self._size -= 1
            self._size += 1
        answers[key] = answer
        while self._size > self.max_entries and len(self._tenants) > 1:
            _, dropped = self._tenants.popitem(last=False)
            self._size -= len(dropped)

    def invalidate(self, tenant_id: str) -> None:
        """The tenant's scene centroids changed: none of its answers stands."""
        dropped = self._tenants.pop(tenant_id, None)
        if dropped is not None:
            self._size -= len(dropped)

    def count_on_from(self, other: NearestCache) -> None:
        """Take over ``other``'s counts (a rebuilt partition's cache replaces it: the totals go on)."""
        self.hits += other.hits
        self.misses += other.misses

    def __len__(self) -> int:
        return self._size

"""Which actor holds a key: virtual partitions and the assignment that maps them to actors.

A key (``(tenant, project)`` for cells and scenes, an agent id for beacons and
inboxes) hashes to one of :data:`VIRTUAL_PARTITIONS` virtual partitions; an
:class:`Assignment` maps each virtual partition to the index of the actor that
serves it. A resize changes the assignment, so it moves whole partitions, and
only those whose owner changes (:meth:`Assignment.rebalanced` moves the fewest
a balanced assignment allows), never rehashes keys.

A deployment that was never resized keeps the *implicit* assignment, key hash
mod the actor count (what memesh always routed by). For a count that divides
:data:`VIRTUAL_PARTITIONS` (1, 2, 4, 8, ...) it is exactly the balanced
assignment ``partition mod count``, so nothing moves when one is recorded.

Guarantees: the hash is BLAKE2b, never Python's salted ``hash``, so every
process on every restart sends a key to the same actor under the same
assignment; an assignment is a value (picklable, hashable, JSON round trip).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

VIRTUAL_PARTITIONS = 4096


def _digest(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def shard_for(key: str, shards: int) -> int:
    """The implicit assignment: a key's actor when none was recorded (stable across processes)."""
    return _digest(key) % shards


def virtual_partition(key: str, partitions: int = VIRTUAL_PARTITIONS) -> int:
    """The virtual partition a key belongs to."""
    return _digest(key) % partitions


def partition_key(tenant_id: str, project_id: str) -> str:
    return f"{tenant_id}\x1f{project_id}"


@dataclass(frozen=True, slots=True)
class Assignment:
    """Virtual partition -> actor index for ``count`` actors; ``owners`` None is the implicit assignment."""

    count: int
    owners: tuple[int, ...] | None = None

    @classmethod
    def balanced(cls, count: int, partitions: int = VIRTUAL_PARTITIONS) -> Assignment:
        """Partition ``p`` to actor ``p mod count``: what a never-resized deployment routes by when
        ``count`` divides ``partitions``."""
        if not 1 <= count <= partitions:
            raise ValueError(f"an assignment needs 1 to {partitions} actors, not {count}")
        return cls(count, tuple(p % count for p in range(partitions)))

    def owner(self, key: str) -> int:
        digest = _digest(key)
        if self.owners is None:
            return digest % self.count
        return self.owners[digest % len(self.owners)]

    def explicit(self) -> Assignment | None:
        """The same routing with every partition's owner listed, or None when the implicit hash mod
        ``count`` is not a function of the virtual partition (``count`` does not divide them)."""
        if self.owners is not None:
            return self
        return Assignment.balanced(self.count) if VIRTUAL_PARTITIONS % self.count == 0 else None

    def rebalanced(self, count: int) -> Assignment:
        """An assignment to ``count`` actors that moves the fewest partitions a balanced one allows: each
        actor that stays keeps its partitions up to its share (``partitions / count``, the first
        ``partitions mod count`` actors one more), and only the rest change owner."""
        base = self.explicit()
        if base is None or base.owners is None:
            return Assignment.balanced(count)
        size = len(base.owners)
        if not 1 <= count <= size:
            raise ValueError(f"an assignment needs 1 to {size} actors, not {count}")
        share = [size // count + (1 if i < size % count else 0) for i in range(count)]
        kept = [0] * count
        owners = list(base.owners)
        loose: list[int] = []
        for partition, owner in enumerate(base.owners):
            if owner < count and kept[owner] < share[owner]:
                kept[owner] += 1
            else:
                loose.append(partition)
        spare = iter(loose)
        for index in range(count):
            for _ in range(share[index] - kept[index]):
                owners[next(spare)] = index
        return Assignment(count, tuple(owners))

    def moved_to(self, other: Assignment) -> int:
        """How many virtual partitions change owner from this assignment to ``other`` (every one of them
        when either routes by the implicit hash of a count that does not divide them)."""
        mine, theirs = self.explicit(), other.explicit()
        if mine is None or theirs is None or mine.owners is None or theirs.owners is None:
            return VIRTUAL_PARTITIONS if (self.count, self.owners) != (other.count, other.owners) else 0
        return sum(a != b for a, b in zip(mine.owners, theirs.owners, strict=True))

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "owners": None if self.owners is None else list(self.owners)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Assignment:
        owners = value.get("owners")
        return cls(int(value["count"]), None if owners is None else tuple(int(o) for o in owners))


@dataclass(frozen=True, slots=True)
class Routes:
    """The assignment in force for each partitioned kind (what a directory routes requests by)."""

    scene_shard: Assignment
    beacon_set: Assignment
    inbox_shard: Assignment

    def owner(self, kind: str, key: str) -> int:
        assignment: Assignment = getattr(self, kind)
        return assignment.owner(key)

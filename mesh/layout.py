"""The partition layout: how many actors of each partitioned kind a deployment has, which virtual partitions
each serves, and which tables they own.

Scene shards, beacon sets and inbox shards each own tables named by their
index. A layout gives every kind its count, its :class:`~mesh.sharding.Assignment`
of virtual partitions to actors, and a *generation* (the table names of a
deployment resized by the copies of earlier versions; generation 0 keeps the
names deployments have always had). Changing a count (a resize,
:mod:`actors.resize`) moves the partitions whose owner changes and only then
switches the deployment's manifest to the new assignment.

Guarantees: :func:`table_prefix` is the one naming rule for a partitioned
actor's tables; :func:`parse_table` inverts it, so tables of another
generation or of an index beyond the count are recognised (and dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mesh.sharding import Assignment, Routes

KINDS = ("scene_shard", "beacon_set", "inbox_shard")
COUNT_KEYS = {"scene_shard": "scene_shards", "beacon_set": "beacon_sets", "inbox_shard": "inbox_shards"}
GENERATIONS_KEY = "layout_generations"  # manifest key: {kind: generation}


def table_prefix(kind: str, index: int, generation: int) -> str:
    """The prefix of the tables partition ``index`` of ``kind`` owns at ``generation``."""
    if kind not in KINDS:
        raise ValueError(f"not a partitioned kind: {kind}")
    return f"{kind}_{index}" if generation == 0 else f"{kind}_g{generation}_{index}"


_TABLE = re.compile(r"^(scene_shard|beacon_set|inbox_shard)_(?:g(\d+)_)?(\d+)_([a-z_]+)$")


def parse_table(name: str) -> tuple[str, int, int, str] | None:
    """``(kind, generation, index, suffix)`` of a partitioned actor's table name, or None for any other table."""
    match = _TABLE.match(name)
    if match is None:
        return None
    kind, generation, index, suffix = match.groups()
    return kind, int(generation or 0), int(index), suffix


@dataclass(frozen=True, slots=True)
class Layout:
    """Counts, assignments and generations of the partitioned kinds (picklable; what the actor plan is built
    from). A kind without a recorded assignment routes by the implicit one (:mod:`mesh.sharding`)."""

    counts: dict[str, int]
    generations: dict[str, int] = field(default_factory=dict)
    assignments: dict[str, Assignment] = field(default_factory=dict)
    epoch: int = 0  # online resizes so far (names the partitioned actors: ``DirectorySpec.epoch``)

    def assignment(self, kind: str) -> Assignment:
        return self.assignments.get(kind) or Assignment(self.counts[kind])

    def routes(self) -> Routes:
        return Routes(*(self.assignment(kind) for kind in KINDS))

    def generation(self, kind: str) -> int:
        return self.generations.get(kind, 0)

    def prefix(self, kind: str, index: int) -> str:
        return table_prefix(kind, index, self.generation(kind))

    def resized(self, wanted: dict[str, int]) -> list[str]:
        """The kinds whose count ``wanted`` changes."""
        return [kind for kind in KINDS if kind in self.counts and wanted[kind] != self.counts[kind]]

    def resized_to(self, wanted: dict[str, int], online: bool) -> Layout:
        """The layout a resize to ``wanted`` reaches: each changed kind rebalanced (the fewest partitions
        move), the next epoch when ``online``. Deterministic, so a head can start the actors of the
        layout before the move that reaches it."""
        kinds = self.resized(wanted)
        assignments = {**self.assignments, **{k: self.assignment(k).rebalanced(wanted[k]) for k in kinds}}
        counts = {**self.counts, **{k: wanted[k] for k in kinds}}
        return Layout(counts, dict(self.generations), assignments, self.epoch + (1 if online else 0))


@dataclass(frozen=True, slots=True)
class Move:
    """One kind resized at this start: its count before and after, the virtual partitions that changed owner,
    the rows copied to their new owners and the seconds it took."""

    kind: str
    count_from: int
    count_to: int
    rows: int
    seconds: float
    partitions: int = 0

    def __str__(self) -> str:
        return (
            f"{COUNT_KEYS[self.kind]} {self.count_from} -> {self.count_to}: {self.partitions} partitions, "
            f"{self.rows} rows moved in {self.seconds:.2f}s"
        )


@dataclass(frozen=True, slots=True)
class Settled:
    """The layout in force, and the moves this start made to reach it (none without a resize)."""

    layout: Layout
    moves: tuple[Move, ...] = ()

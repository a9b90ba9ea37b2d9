"""What a partition's changes did: the outcomes :class:`mesh.partition.MemoryPartition` returns, which its
shard commits (or, after a failed commit, hands back to roll the change out of memory)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mesh.model import Cell, Scene


@dataclass(slots=True)
class WriteOutcome:
    """Cells as stored (with their scene), and the scenes this write founded."""

    cells: list[Cell] = field(default_factory=list)
    founded: list[Scene] = field(default_factory=list)
    created: list[Cell] = field(default_factory=list)


@dataclass(slots=True)
class EraseOutcome:
    """Cells removed, scenes whose aggregates were recomputed, and scenes left empty and removed."""

    cells: list[Cell] = field(default_factory=list)
    recomputed: list[Scene] = field(default_factory=list)
    removed_scenes: list[Scene] = field(default_factory=list)
    revived: list[Cell] = field(default_factory=list)  # members of an erased Pattern, live again


@dataclass(slots=True)
class ConsolidationOutcome:
    scene: Scene
    patterns: list[Cell]
    superseded: list[Cell]


@dataclass(frozen=True, slots=True)
class EraseEffect:
    """What erasing a set of cells would do to their scenes (counted before anything changes)."""

    emptied: frozenset[str]  # scenes left without members (removed)
    recomputed: frozenset[str]  # scenes that keep members (aggregates recomputed)

"""What an erase removes from a scene shard (``SceneShard.erase_plan``), read from its partition."""

from __future__ import annotations

from actors.propagation import diff_id_of
from mesh.erasure import ShardErasePlan
from mesh.model import Cell, starts_diff
from mesh.partition import MemoryPartition


def plan_erase(partition: MemoryPartition, cells: list[Cell]) -> ShardErasePlan:
    """The plan that removes ``cells`` (the selected ones with their abstractions): their scenes emptied or
    recomputed, the members a removed Pattern superseded revived, their diffs and writers. Changes nothing."""
    chosen = frozenset(c.id for c in cells)
    effect = partition.erase_effect(chosen)
    revive = sorted(
        m
        for sid in effect.recomputed
        for m in partition.scenes[sid].members
        if m not in chosen and partition.cells[m].superseded_by in chosen
    )
    return ShardErasePlan(
        cell_ids=tuple(sorted(chosen)),
        scene_ids=tuple(sorted(effect.emptied | effect.recomputed)),
        revive_ids=tuple(revive),
        diff_ids=tuple(diff_id_of(c.id) for c in cells if starts_diff(c)),
        writers=tuple(sorted({c.source_agent for c in cells if starts_diff(c) and c.source_agent})),
        nodes_removed=len(cells) + len(effect.emptied),
        aggregates_recomputed=len(effect.recomputed),
    )

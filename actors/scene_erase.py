"""A scene shard's removals: what an erase removes (``SceneShard.erase_plan``), read from its partition, and a
user's delete (``SceneShard.delete_cell``)."""

from __future__ import annotations

from actors.group_commit import GroupCommitter
from actors.propagation import diff_id_of
from mesh.erasure import ShardErasePlan
from mesh.model import Cell, Scene, starts_diff
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


async def tombstone_durably(partition: MemoryPartition, commit: GroupCommitter[Cell | Scene], cell_id: str) -> bool:
    """Tombstone ``cell_id`` and commit it (its scene recomputed beside it); False when there was nothing to
    do: absent, or tombstoned already (a second delete is a no-op, spec section 3). A second delete that
    meets the first's commit in flight answers once that commit is over, so it never acknowledges a
    tombstone storage may lose; if that commit failed (the first delete undid its tombstone), it deletes.
    A commit that fails leaves the cell as storage holds it (untombstoned) and raises."""
    cell = partition.tombstone(cell_id)
    if cell is None:
        held = partition.cells.get(cell_id)
        if held is None:
            return False
        await commit.flush()  # the first delete resumes (and undoes a failed tombstone) before this does
        if held.tombstone or (cell := partition.tombstone(cell_id)) is None:
            return False
    scene = partition.scenes.get(cell.scene_id or "")
    rows: list[Cell | Scene] = [cell] if scene is None else [cell, scene]
    try:
        await commit.submit(rows)
    except Exception:
        partition.untombstone(cell)
        raise
    return True

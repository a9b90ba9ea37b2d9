"""The L1 Pattern a consolidation makes of a group of near-duplicate L0 cells.

:func:`duplicate_groups` finds the groups of a consolidation pool (through
:func:`mesh.consolidation.find_groups`) and :func:`pattern_of` makes the one
Pattern that abstracts a group. Guarantees: a Pattern quotes the content of
its most central member (the earliest created breaks a tie), its embedding is
the normalised mean of the members', its salience the group's maximum, and
it lives in the members' scene and project. Nothing here changes a cell: the
partition marks the members superseded and stores the Pattern.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from mesh.consolidation import find_groups
from mesh.model import Cell, CellType, Layer, Scene, normalize
from mesh.tuning import SceneTuning


def duplicate_groups(pool: list[Cell], tuning: SceneTuning) -> list[list[str]]:
    """The member ids of each near-duplicate group of ``pool`` (in seed order, as ``find_groups`` gives them)."""
    found = find_groups(np.stack([c.embedding for c in pool]), tuning.duplicate_similarity, tuning.min_group) if pool else []
    return [[pool[i].id for i in g] for g in found]


def pattern_of(group: list[Cell], pattern_id: str, scene: Scene, source_agent: str, now: datetime) -> Cell:
    """The Pattern abstracting ``group`` (live L0 members of ``scene``), created at ``now`` by ``source_agent``."""
    mean = normalize(np.sum([c.embedding for c in group], axis=0, dtype=np.float64))
    centrality = np.stack([c.embedding for c in group]) @ mean
    central = min(range(len(group)), key=lambda i: (-float(centrality[i]), group[i].created_at.timestamp()))
    return Cell(
        id=pattern_id,
        tenant_id=scene.tenant_id,
        project_id=scene.project_id,
        cell_type=CellType.PATTERN,
        content=group[central].content,
        salience=max(c.salience for c in group),
        source_agent=source_agent,
        created_at=now,
        last_accessed=now,
        layer=Layer.L1,
        embedding=mean,
        engine=group[0].engine,
        scene_id=scene.id,
    )

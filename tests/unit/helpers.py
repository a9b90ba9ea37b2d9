"""Builders shared by the unit tests (pure, no I/O)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import numpy as np

from mesh.model import Cell, CellType, Layer, Vector, default_layer, normalize

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = itertools.count(1)


def uid(prefix: str = "0") -> str:
    return f"{prefix * 8}-0000-7000-8000-{next(_ids):012d}"


def direction(seed: int, dims: int = 16, noise: float = 0.0, base: int | None = None) -> Vector:
    """A unit vector; with ``base`` it is ``base``'s direction plus ``noise``."""
    rng = np.random.default_rng(seed)
    if base is None:
        return normalize(rng.normal(size=dims))
    return normalize(direction(base, dims) + noise * rng.normal(size=dims))


def cell(
    vector: Vector,
    tenant: str = "t1",
    project: str = "p1",
    cell_type: CellType = CellType.FACT,
    salience: float = 0.5,
    agent: str = "agent-a",
    at: datetime = T0,
    content: str | None = None,
    layer: Layer | None = None,
    scene_id: str | None = None,
) -> Cell:
    cid = uid()
    return Cell(
        id=cid,
        tenant_id=tenant,
        project_id=project,
        cell_type=cell_type,
        content=content or f"content of {cid}",
        salience=salience,
        source_agent=agent,
        created_at=at,
        last_accessed=at,
        layer=layer or default_layer(cell_type),
        embedding=vector,
        engine="test",
        scene_id=scene_id,
    )


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# The observatory event's fields, as spec section 2 lists them (content-free).
EVENT_FIELDS = {
    "diff_id",
    "from_node",
    "to_node",
    "hop_index",
    "energy_before",
    "energy_after",
    "walk_layer",
    "outcome",
    "relevance",  # the explanation memesh adds (docs/observatory.md): the score, the standing, the rule
    "standing",
    "criterion",
    "salience",
    "ts",
    "tenant_id",
    "origin_agent",
}

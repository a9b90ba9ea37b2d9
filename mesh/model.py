"""Domain records: cells, scenes, sessions, and the enums the spec names.

Records are plain slotted dataclasses (a shard holds 100k of them; pydantic
models would cost several times the memory). Embeddings are unit-norm float32
vectors owned by the record; callers must not mutate them in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


class CellType(StrEnum):
    DECISION = "Decision"
    CONSTRAINT = "Constraint"
    RISK = "Risk"
    PATTERN = "Pattern"
    LESSON = "Lesson"
    FACT = "Fact"
    PREFERENCE = "Preference"
    CONTEXT = "Context"
    TASK = "Task"


class Layer(StrEnum):
    L0 = "L0"
    L1 = "L1"
    L2 = "L2"

    @property
    def depth(self) -> int:
        """0, 1 or 2: the layer's number (the observatory's ``walk_layer``)."""
        return int(self.value[1])


def default_layer(cell_type: CellType) -> Layer:
    """Decisions and Constraints are architectural (L2); Patterns are abstractions (L1); the rest is raw (L0)."""
    if cell_type in (CellType.DECISION, CellType.CONSTRAINT):
        return Layer.L2
    if cell_type is CellType.PATTERN:
        return Layer.L1
    return Layer.L0


DEFAULT_PROJECT = "default"


@dataclass(slots=True, eq=False)
class Cell:
    """One unit of knowledge. Live while ``superseded_by`` is None and not tombstoned."""

    id: str
    tenant_id: str
    project_id: str
    cell_type: CellType
    content: str
    salience: float
    source_agent: str
    created_at: datetime
    last_accessed: datetime
    layer: Layer
    embedding: Vector
    engine: str
    scene_id: str | None = None
    session_id: str | None = None
    superseded_by: str | None = None
    tombstone: bool = False

    @property
    def live(self) -> bool:
        return self.superseded_by is None and not self.tombstone

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its vector as raw bytes and a dtype (what crosses an actor hop: a search answer is up
        to 80 cells): numpy's own reduction of an array costs a third more to dump and twice as much to
        load. The copy is equal field by field, its vector of the same dtype and values (read-only, like
        every vector read from storage)."""
        e = self.embedding
        return (
            _cell,
            (
                self.id,
                self.tenant_id,
                self.project_id,
                self.cell_type,
                self.content,
                self.salience,
                self.source_agent,
                self.created_at,
                self.last_accessed,
                self.layer,
                e.tobytes(),
                e.dtype.str,
                e.shape,
                self.engine,
                self.scene_id,
                self.session_id,
                self.superseded_by,
                self.tombstone,
            ),
        )


def _cell(
    id: str,
    tenant_id: str,
    project_id: str,
    cell_type: CellType,
    content: str,
    salience: float,
    source_agent: str,
    created_at: datetime,
    last_accessed: datetime,
    layer: Layer,
    vector: bytes,
    dtype: str,
    shape: tuple[int, ...],
    engine: str,
    scene_id: str | None,
    session_id: str | None,
    superseded_by: str | None,
    tombstone: bool,
) -> Cell:
    embedding = np.frombuffer(vector, dtype=dtype).reshape(shape)
    return Cell(
        id,
        tenant_id,
        project_id,
        cell_type,
        content,
        salience,
        source_agent,
        created_at,
        last_accessed,
        layer,
        embedding,
        engine,
        scene_id,
        session_id,
        superseded_by,
        tombstone,
    )


@dataclass(slots=True, eq=False)
class Scene:
    """A cluster of cells of one project around a centroid.

    ``vector_sum`` is the float64 sum of the live members' embeddings, so the
    centroid (its normalisation) moves in O(dims) per membership change and is
    exact after a reload, which recomputes it from the members.
    """

    id: str
    tenant_id: str
    project_id: str
    created_at: datetime
    vector_sum: npt.NDArray[np.float64]
    members: list[str] = field(default_factory=list)
    live_count: int = 0
    summary: str = ""
    summary_dirty: bool = True
    cached_centroid: Vector | None = field(default=None, repr=False)

    @property
    def centroid(self) -> Vector:
        """The normalised mean of the live members; computed once per change of the sum."""
        if self.cached_centroid is None:
            self.cached_centroid = normalize(self.vector_sum)
        return self.cached_centroid

    @classmethod
    def founded_by(cls, cell: Cell, scene_id: str, dims: int) -> Scene:
        """The empty scene ``cell`` founds: its id, the cell's tenant, project and ``created_at``."""
        return cls(scene_id, cell.tenant_id, cell.project_id, cell.created_at, np.zeros(dims, dtype=np.float64))

    def add_vector(self, vector: Vector) -> None:
        self.vector_sum += vector
        self.cached_centroid = None

    def remove_vector(self, vector: Vector) -> None:
        self.vector_sum -= vector
        self.cached_centroid = None

    def reset_sum(self, vector_sum: npt.NDArray[np.float64]) -> None:
        self.vector_sum = vector_sum
        self.cached_centroid = None


@dataclass(slots=True, eq=False)
class Beacon:
    """An agent's standing interest: its vector is the embedding of ``interest``."""

    id: str
    tenant_id: str
    agent_id: str
    interest: str
    embedding: Vector
    engine: str
    created_at: datetime
    expires_at: datetime | None = None
    removed: bool = False

    def active(self, now: datetime) -> bool:
        return not self.removed and (self.expires_at is None or self.expires_at > now)


@dataclass(slots=True, eq=False)
class AgentNode:
    """An agent in the mesh: its vector is the running mean of the cells it wrote.

    Its node id is the agent id.
    """

    agent_id: str
    tenant_id: str
    vector_sum: npt.NDArray[np.float64]
    count: int = 0

    @property
    def vector(self) -> Vector:
        return normalize(self.vector_sum)


WriterSums = dict[str, tuple[npt.NDArray[np.float64], int]]
"""Per writing agent: the float64 sum of its cells' vectors and their count (what its agent node averages)."""


def starts_diff(cell: Cell) -> bool:
    """Every written cell starts one diff and moves its writer's agent node; a consolidation Pattern (L1) does neither."""
    return not (cell.cell_type is CellType.PATTERN and cell.layer is Layer.L1)


def writer_sums(cells: Iterable[Cell], dims: int) -> WriterSums:
    """The sums of the cells that count toward their writers' agent nodes."""
    sums: WriterSums = {}
    for cell in cells:
        if starts_diff(cell) and cell.source_agent:
            total, count = sums.get(cell.source_agent, (np.zeros(dims, dtype=np.float64), 0))
            sums[cell.source_agent] = (total + cell.embedding, count + 1)
    return sums


def merge_writer_sums(parts: Iterable[WriterSums]) -> WriterSums:
    """One writer's sums from every shard, added up."""
    merged: WriterSums = {}
    for part in parts:
        for agent_id, (total, count) in part.items():
            previous = merged.get(agent_id)
            merged[agent_id] = (total + previous[0], count + previous[1]) if previous else (total, count)
    return merged


@dataclass(slots=True, frozen=True)
class NewCell:
    """A cell as a caller asks for it, before ids, embedding and scene are settled.

    ``embedding`` is an optional caller-supplied vector; when absent the
    service embeds ``content``.
    """

    content: str
    cell_type: CellType
    salience: float = 0.5
    layer: Layer | None = None
    project_id: str | None = None
    session_id: str | None = None
    scene_id: str | None = None
    embedding: tuple[float, ...] | None = None


@dataclass(slots=True, frozen=True)
class Session:
    id: str
    tenant_id: str
    agent_id: str
    project_id: str
    opened_at: datetime
    closed_at: datetime | None = None

    @property
    def open(self) -> bool:
        return self.closed_at is None


def normalize(vector: npt.NDArray[np.floating]) -> Vector:
    """Unit-norm float32 copy of ``vector``; the zero vector (and one with a non-finite entry) gives zeros.

    Scale-safe: the vector is divided by its largest magnitude (in float64)
    before the norm is taken, so ``[1e30] * n`` or ``[1e-40] * n`` still give a
    unit vector instead of overflowing or underflowing to zero.
    """
    v = np.asarray(vector, dtype=np.float64)
    if v.size == 0 or not np.all(np.isfinite(v)):
        return np.zeros(v.shape, dtype=np.float32)
    peak = float(np.max(np.abs(v)))
    if peak == 0.0:
        return np.zeros(v.shape, dtype=np.float32)
    scaled = v / peak
    return (scaled / float(np.linalg.norm(scaled))).astype(np.float32)


def is_unit(vector: npt.NDArray[np.floating], tolerance: float = 1e-3) -> bool:
    """True when ``vector`` has unit length (what every stored and searched vector must have)."""
    norm = float(np.linalg.norm(np.asarray(vector, dtype=np.float64)))
    return abs(norm - 1.0) <= tolerance

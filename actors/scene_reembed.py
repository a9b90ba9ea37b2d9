"""A scene shard's part of a reembed (``head.reembed``): new vectors staged, persisted, then switched in.

Guarantees: reads use the current vectors until ``apply_staged``; ``persist_staged``
writes every staged row first (with writes held back by ``Embedder.gate``), so a
failure before the switch is undone by ``revert_staged`` and nothing is half-switched.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from actors.codecs import cells_to_arrow, scenes_to_arrow
from mesh.model import Cell, Vector, WriterSums, writer_sums
from mesh.partition import MemoryPartition

if TYPE_CHECKING:
    from actors.group_commit import GroupCommitter
    from actors.storage import KeyedTable


class SceneReembedding:
    """The reembed methods of :class:`actors.scene_shard.SceneShard` (its state, declared here)."""

    if TYPE_CHECKING:
        from actors.scene_shard import Record, ShardConfig

        config: ShardConfig
        partition: MemoryPartition
        _staged: dict[str, Vector]
        _switching: bool
        _cells: KeyedTable | None
        _scenes: KeyedTable | None
        _touch_commit: GroupCommitter[Record]

        async def _ready(self) -> MemoryPartition: ...

        async def _touches_landed(self) -> None: ...

        async def _all_committed(self) -> None: ...

    async def reembed_count(self) -> int:
        partition = await self._ready()
        return len(partition.cells)

    async def reembed_page(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        """(id, content) of up to ``limit`` cells in id order after ``after`` that have no staged vector."""
        partition = await self._ready()
        ids = sorted(cid for cid in partition.cells if (after is None or cid > after) and cid not in self._staged)
        return [(cid, partition.cells[cid].content) for cid in ids[:limit]]

    async def stage(self, vectors: list[tuple[str, Vector]]) -> None:
        """Hold new vectors aside; reads keep using the current ones until ``commit_staged``."""
        partition = await self._ready()
        self._staged.update((cid, v) for cid, v in vectors if cid in partition.cells)

    def _switched_cells(self, engine: str) -> list[Cell]:
        """Every cell as it is after the switch: its staged vector, or its current one when none was staged."""
        out = []
        for cell in self.partition.cells.values():
            vector = self._staged.get(cell.id)
            out.append(replace(cell, embedding=vector, engine=engine) if vector is not None else cell)
        return out

    async def _write_cells(self, cells: list[Cell]) -> None:
        assert self._cells is not None
        persisted = [c for c in cells if c.id in self._cells]
        for start in range(0, len(persisted), 2048):
            await self._cells.write(cells_to_arrow(persisted[start : start + 2048], self.config.dims))

    async def persist_staged(self, engine: str) -> WriterSums:
        """Phase one of the switch: write every staged vector's row; reads keep the current vectors.

        Returns, per writer, the sum and count of its cells' new vectors (their agent nodes' new means).
        Called with writes, consolidations and erasures held back (``Embedder.gate``); access times
        are not recorded until ``apply_staged`` or ``revert_staged``.
        """
        await self._ready()
        self._switching = True
        # A touch recall handed over before the switch began lands now, not after the staged rows (it
        # would write the old vector back): flushing the committer alone misses one not yet submitted.
        await self._touches_landed()
        await self._all_committed()  # journaled rows too: only rows the table holds are rewritten below
        cells = self._switched_cells(engine)
        await self._write_cells(cells)
        return writer_sums(cells, self.config.dims)

    async def apply_staged(self, engine: str) -> None:
        """Phase two: switch memory to the persisted vectors at once (scene centroids recomputed)."""
        partition = await self._ready()
        cells = self._switched_cells(engine)
        scenes = [replace(s, members=[], cached_centroid=None) for s in partition.scenes.values()]  # the live ones stay intact
        rebuilt = MemoryPartition(self.config.dims, self.config.tuning)
        rebuilt.load(scenes, cells)
        rebuilt.scene_index.answers.count_on_from(self.partition.scene_index.answers)  # counters never go back
        self.partition = rebuilt
        self._staged = {}
        self._switching = False
        assert self._cells is not None and self._scenes is not None
        fresh = [rebuilt.fresh(s) for s in rebuilt.scenes.values() if s.id in self._scenes]
        await self._scenes.write(scenes_to_arrow(fresh, self.config.dims))
        for table in (self._cells, self._scenes):
            await table.rows.optimize_if_due(1)

    async def revert_staged(self) -> None:
        """Undo phase one after a failure elsewhere: rewrite the current vectors' rows, drop the staged ones."""
        await self._ready()
        staged = set(self._staged)
        self._staged = {}
        try:
            await self._write_cells([c for c in self.partition.cells.values() if c.id in staged])
        finally:
            self._switching = False

    async def discard_staged(self) -> None:
        self._staged = {}

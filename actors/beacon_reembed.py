"""A beacon set's part of a reembed (``head.reembed``): new beacon vectors and agent-node means.

Guarantees: memory keeps the current vectors until ``apply_staged``; ``persist_staged``
writes the new rows first, and ``revert_staged`` rewrites the current ones after a
failure elsewhere, so a reembed switches every beacon and agent node or none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from actors.codecs import agent_nodes_to_arrow, beacons_to_arrow
from mesh.model import AgentNode, Beacon, Vector, WriterSums

if TYPE_CHECKING:
    from actors.storage import KeyedTable


class BeaconReembedding:
    """The reembed methods of :class:`actors.beacon_set.BeaconSet` (its state, declared here)."""

    if TYPE_CHECKING:
        from actors.beacon_set import BeaconSetConfig

        config: BeaconSetConfig
        beacons: dict[str, Beacon]
        agents: dict[str, AgentNode]
        _staged: dict[str, Vector]
        _beacon_table: KeyedTable | None
        _agent_table: KeyedTable | None

        async def _ready(self) -> None: ...

        async def _drained(self) -> None: ...

        def _put_beacon(self, beacon: Beacon) -> None: ...

        def _put_agent(self, node: AgentNode) -> None: ...

    async def reembed_count(self) -> int:
        await self._ready()
        return len(self.beacons)

    async def reembed_page(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        """(id, interest) of up to ``limit`` beacons in id order after ``after`` without a staged vector."""
        await self._ready()
        ids = sorted(b.id for b in self.beacons.values() if (after is None or b.id > after) and b.id not in self._staged)
        return [(bid, self.beacons[bid].interest) for bid in ids[:limit]]

    async def stage(self, vectors: list[tuple[str, Vector]]) -> None:
        await self._ready()
        self._staged.update((bid, v) for bid, v in vectors if bid in self.beacons)

    def _switched(self, engine: str, writers: WriterSums) -> tuple[list[Beacon], list[AgentNode]]:
        beacons = [replace(b, embedding=self._staged[b.id], engine=engine) for b in self.beacons.values() if b.id in self._staged]
        nodes = [
            AgentNode(a.agent_id, a.tenant_id, writers[a.agent_id][0].copy(), writers[a.agent_id][1])
            for a in self.agents.values()
            if a.agent_id in writers
        ]
        return beacons, nodes

    async def _write(self, beacons: list[Beacon], nodes: list[AgentNode]) -> None:
        assert self._beacon_table is not None and self._agent_table is not None
        dims = self.config.dims
        await self._beacon_table.write(beacons_to_arrow((b for b in beacons if b.id in self._beacon_table), dims))
        await self._agent_table.write(agent_nodes_to_arrow((n for n in nodes if n.agent_id in self._agent_table), dims))

    async def persist_staged(self, engine: str, writers: WriterSums) -> None:
        """Phase one of a reembed switch: write the new beacon vectors and agent-node means; memory unchanged."""
        await self._ready()
        await self._drained()
        await self._write(*self._switched(engine, writers))

    async def apply_staged(self, engine: str, writers: WriterSums) -> None:
        """Phase two: switch memory to the persisted vectors."""
        await self._ready()
        beacons, nodes = self._switched(engine, writers)
        for beacon in beacons:
            self._put_beacon(beacon)
        for node in nodes:
            self._put_agent(node)
        self._staged = {}

    async def revert_staged(self) -> None:
        """Undo phase one: rewrite the current beacons and agent nodes, drop the staged vectors."""
        await self._ready()
        staged = set(self._staged)
        self._staged = {}
        await self._write([b for b in self.beacons.values() if b.id in staged], list(self.agents.values()))

    async def discard_staged(self) -> None:
        self._staged = {}

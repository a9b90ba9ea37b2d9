"""Settling the partition layout before the actors start: a changed shard count is a resize.

Run once per start, before any partitioned actor exists (``settle_layout``):

1. Read the manifest. No manifest: a new deployment, nothing to move.
2. Counts as stored: drop tables of any other generation (what a resize cut
   short after its switch left behind) and return the layout.
3. A count changed: refuse while the deployment's actors run (another head
   serves with the old counts) or an erase is unfinished (its journal names
   shards by index); otherwise, for each resized kind, read every row of
   every old table, route it by the request keys (:mod:`mesh.sharding`) to its
   index under the new count, and write it to the tables of the next
   generation, which start empty (leftovers of an earlier attempt are dropped
   first).
4. Switch: one manifest row (``layout``) records every kind's new count and
   generation in one commit. Until it is written the old tables are in force
   and a restart does the resize again; after it, the new ones are.
5. Drop the old generation's tables (with their files: nothing erased in them
   survives elsewhere).

Rows are copied from each table's live view (``RowTable.load``), so every
acknowledged cell, scene, beacon, agent node, standing, delivery, cursor and
pending walk moves; an agent's deliveries keep their order (they all come from
the one table that held the agent). The copy holds one kind's rows in memory,
as the actors themselves do when they load.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from actors.manifest import DeploymentManifest
from actors.schemas import (
    CURSOR_SCHEMA,
    DELIVERY_SCHEMA,
    JOURNAL_SCHEMA,
    MANIFEST_SCHEMA,
    PROPAGATED_SCHEMA,
    STANDING_SCHEMA,
    agent_node_schema,
    beacon_schema,
    cell_schema,
    scene_schema,
)
from actors.storage import LanceStore, StorageConfig
from mesh.errors import ConfigInvalid
from mesh.layout import COUNT_KEYS, KINDS, Layout, Move, Settled, parse_table, table_prefix
from mesh.sharding import partition_key, shard_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TableKind:
    suffix: str
    schema: Callable[[int], pa.Schema]
    identity: str | None


TABLES: dict[str, tuple[TableKind, ...]] = {
    "scene_shard": (
        TableKind("cells", cell_schema, "id"),
        TableKind("scenes", scene_schema, "id"),
        TableKind("propagated", lambda _: PROPAGATED_SCHEMA, None),
    ),
    "beacon_set": (
        TableKind("beacons", beacon_schema, "id"),
        TableKind("agents", agent_node_schema, "id"),
        TableKind("standings", lambda _: STANDING_SCHEMA, "id"),
    ),
    "inbox_shard": (
        TableKind("deliveries", lambda _: DELIVERY_SCHEMA, "delivery_id"),
        TableKind("cursors", lambda _: CURSOR_SCHEMA, None),
    ),
}


Rows = dict[str, pa.Table]  # suffix -> every row of that table, across the old indices


def _column(rows: pa.Table, name: str) -> list[str]:
    return [str(v) for v in rows.column(name).to_pylist()]


def _destinations(kind: str, rows: Rows, count: int) -> dict[str, list[int | None]]:
    """For each table of ``kind``, the new index of each row (None: a row nothing owns any more)."""
    if kind == "scene_shard":

        def by_project(table: pa.Table) -> list[int | None]:
            pairs = zip(_column(table, "tenant_id"), _column(table, "project_id"), strict=True)
            return [shard_for(partition_key(t, p), count) for t, p in pairs]

        cells = rows["cells"]
        of_cell = dict(zip(_column(cells, "id"), by_project(cells), strict=True))
        return {
            "cells": by_project(cells),
            "scenes": by_project(rows["scenes"]),
            "propagated": [of_cell.get(c) for c in _column(rows["propagated"], "cell_id")],  # an erased cell's: dropped
        }
    if kind == "beacon_set":
        beacons = rows["beacons"]
        agent_of = dict(zip(_column(beacons, "id"), _column(beacons, "agent_id"), strict=True))
        return {
            "beacons": [shard_for(a, count) for a in _column(beacons, "agent_id")],
            "agents": [shard_for(a, count) for a in _column(rows["agents"], "id")],
            # a standing is a beacon's (kept with the beacon's agent) or an agent node's
            "standings": [shard_for(agent_of.get(i, i), count) for i in _column(rows["standings"], "id")],
        }
    return {
        "deliveries": [shard_for(a, count) for a in _column(rows["deliveries"], "agent_id")],
        "cursors": [shard_for(a, count) for a in _column(rows["cursors"], "id")],
    }


async def _read_kind(store: LanceStore, kind: str, layout: Layout, dims: int, existing: set[str]) -> Rows:
    rows: Rows = {}
    for table in TABLES[kind]:
        schema = table.schema(dims)
        parts = []
        for index in range(layout.counts[kind]):
            name = f"{layout.prefix(kind, index)}_{table.suffix}"
            if name in existing:
                parts.append((await (await store.table(name, schema, table.identity)).load()).select(schema.names))
        rows[table.suffix] = pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()
    return rows


async def _copy_kind(store: LanceStore, kind: str, old: Layout, count: int, generation: int, dims: int) -> int:
    """Write every row of ``kind`` into the tables of ``generation`` at ``count`` partitions; rows moved."""
    existing = set(await store.table_names())
    for name in existing:  # an earlier attempt at this generation, cut short: start again from empty tables
        parsed = parse_table(name)
        if parsed is not None and parsed[0] == kind and parsed[1] == generation:
            await store.drop(name)
    rows = await _read_kind(store, kind, old, dims, existing)
    destinations = _destinations(kind, rows, count)
    moved = 0
    for table in TABLES[kind]:
        by_index: dict[int, list[int]] = defaultdict(list)
        for position, index in enumerate(destinations[table.suffix]):
            if index is not None:
                by_index[index].append(position)
        for index, positions in sorted(by_index.items()):
            name = f"{table_prefix(kind, index, generation)}_{table.suffix}"
            target = await store.table(name, table.schema(dims), table.identity)
            await target.append(rows[table.suffix].take(positions))
            moved += len(positions)
    return moved


async def _drop_other_generations(store: LanceStore, layout: Layout) -> None:
    for name in await store.table_names():
        parsed = parse_table(name)
        if parsed is not None and parsed[1] != layout.generation(parsed[0]):
            log.info("dropping %s: a table of a partition layout no longer in force", name)
            await store.drop(name)


async def _erases_unfinished(store: LanceStore, existing: set[str]) -> bool:
    if "erase_journal" not in existing:
        return False
    journal = await (await store.table("erase_journal", JOURNAL_SCHEMA)).load()
    return any(state != "done" for state in journal.column("state").to_pylist())


async def settle_layout(storage: StorageConfig, wanted: dict[str, int], dims: int, running: bool) -> Settled:
    """The layout the actors start with: the stored one, resized to ``wanted`` counts when they differ.

    ``wanted``: kind -> count; ``running``: the deployment's actors already run (this is a later head).
    Raises ConfigInvalid when a resize is asked of a running deployment, with an unfinished erase, or
    together with a change of vector width."""
    store = await LanceStore.open(storage)
    manifest = DeploymentManifest(await store.keyed("deployment_manifest", MANIFEST_SCHEMA, "key"))
    stored = await manifest.stored()
    if not stored:
        return Settled(Layout(dict(wanted)))
    layout = manifest.layout(stored, wanted)
    kinds = layout.resized(wanted)
    if not kinds:
        if not running:
            await _drop_other_generations(store, layout)
        return Settled(layout)
    changes = ", ".join(f"{COUNT_KEYS[k]} {layout.counts[k]} -> {wanted[k]}" for k in kinds)
    if running:
        raise ConfigInvalid(f"{changes}: the deployment runs with the old counts; stop every head, then start with the new")
    if "dims" in stored and stored["dims"] != dims:
        raise ConfigInvalid(f"{changes}: the data has {stored['dims']} dims, not {dims}; resize with the old engine")
    if await _erases_unfinished(store, set(await store.table_names())):
        raise ConfigInvalid(f"{changes}: an erase is unfinished; start once with the old counts so it completes, then resize")
    generations = {kind: layout.generation(kind) for kind in KINDS}
    moves = []
    for kind in kinds:
        generations[kind] += 1
        started = time.perf_counter()
        moved = await _copy_kind(store, kind, layout, wanted[kind], generations[kind], dims)
        moves.append(Move(kind, layout.counts[kind], wanted[kind], moved, time.perf_counter() - started))
    resized = Layout({**layout.counts, **{k: wanted[k] for k in kinds}}, generations)
    await manifest.switch_layout(resized)  # the one commit after which the new tables are in force
    await _drop_other_generations(store, resized)
    return Settled(resized, tuple(moves))


def settle_layout_blocking(storage: StorageConfig, wanted: dict[str, int], dims: int, running: bool) -> Settled:
    """``settle_layout`` from synchronous code (a Ray task, or a thread of the starting server)."""
    return asyncio.run(settle_layout(storage, wanted, dims, running))

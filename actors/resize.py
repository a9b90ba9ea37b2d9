"""Settling the partition layout before the actors start: a changed shard count moves virtual partitions.

Run once per start, before any partitioned actor exists (``settle_layout``):

1. Read the manifest. No manifest: a new deployment, nothing to move.
2. A resize cut short (``unswept`` kinds in the manifest): remove, from every
   actor's tables, the rows of partitions that actor does not own under the
   assignment in force (the copies a cut-short move made, or the sources a
   move left after its switch), and drop the tables of indices beyond the
   count. Then drop tables of any other generation.
3. A count changed: refuse while the deployment's actors run (another head
   serves with the old assignment) or an erase is unfinished (its journal
   names shards by index). Otherwise compute the new assignment
   (:meth:`~mesh.sharding.Assignment.rebalanced`: only the partitions whose
   owner must change move), record the kinds as unswept (commit 1), copy every
   row whose partition changes owner to its new owner's tables, switch the
   manifest to the new assignment (commit 2, the one after which the new
   owners are in force), remove the moved rows from their old owners and drop
   retired actors' tables, and clear the mark (commit 3).

A crash before commit 2 leaves the old assignment in force: the next start
sweeps the partial copies and, with the new counts, moves again. A crash
after it leaves the new one in force: the next start sweeps the sources. No
row is ever absent from its owner, and no actor loads a row it does not own.

Rows are read from each table's live view (``RowTable.load``), so every
acknowledged cell, scene, beacon, agent node, standing, delivery, cursor and
propagation mark moves with its key; an agent's deliveries keep their order
(they come from the one table that held the agent). Rows with content leave
their old table by a fragment rewrite (``RowTable.erase_rows``), so no byte of
a moved row stays behind to outlive a later erase.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

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
from actors.write_journal import replay_journals
from mesh.errors import ConfigInvalid
from mesh.layout import COUNT_KEYS, Layout, Move, Settled, parse_table, table_prefix
from mesh.sharding import Assignment, partition_key

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TableKind:
    suffix: str
    schema: Callable[[int], pa.Schema]
    identity: str | None
    column: str  # what tells its rows apart when removed: the identity, or the key of a row without one


TABLES: dict[str, tuple[TableKind, ...]] = {
    "scene_shard": (
        TableKind("cells", cell_schema, "id", "id"),
        TableKind("scenes", scene_schema, "id", "id"),
        TableKind("propagated", lambda _: PROPAGATED_SCHEMA, None, "cell_id"),
    ),
    "beacon_set": (
        TableKind("beacons", beacon_schema, "id", "id"),
        TableKind("agents", agent_node_schema, "id", "id"),
        TableKind("standings", lambda _: STANDING_SCHEMA, "id", "id"),
    ),
    "inbox_shard": (
        TableKind("deliveries", lambda _: DELIVERY_SCHEMA, "delivery_id", "delivery_id"),
        TableKind("cursors", lambda _: CURSOR_SCHEMA, None, "id"),
    ),
}


Rows = dict[str, pa.Table]  # suffix -> the rows of that table at one index
Held = dict[int, Rows]  # index -> its tables' rows


def _column(rows: pa.Table, name: str) -> list[str]:
    return [str(v) for v in rows.column(name).to_pylist()]


def _routing_keys(kind: str, held: Held) -> dict[int, dict[str, list[str | None]]]:
    """For each index and table of ``kind``, each row's routing key (None: a row no partition owns any more,
    the propagation mark of an erased cell). Rows keyed through another table (a mark through its cell, a
    standing through its beacon) look it up across every index, since a row may sit at a copy."""
    if kind == "scene_shard":

        def by_project(table: pa.Table) -> list[str | None]:
            pairs = zip(_column(table, "tenant_id"), _column(table, "project_id"), strict=True)
            return [partition_key(t, p) for t, p in pairs]

        of_cell = {
            c: k for rows in held.values() for c, k in zip(_column(rows["cells"], "id"), by_project(rows["cells"]), strict=True)
        }
        return {
            index: {
                "cells": by_project(rows["cells"]),
                "scenes": by_project(rows["scenes"]),
                "propagated": [of_cell.get(c) for c in _column(rows["propagated"], "cell_id")],
            }
            for index, rows in held.items()
        }
    if kind == "beacon_set":
        agent_of = {
            b: a
            for rows in held.values()
            for b, a in zip(_column(rows["beacons"], "id"), _column(rows["beacons"], "agent_id"), strict=True)
        }
        return {
            index: {
                "beacons": list(_column(rows["beacons"], "agent_id")),
                "agents": list(_column(rows["agents"], "id")),
                # a standing is a beacon's (kept with the beacon's agent) or an agent node's
                "standings": [agent_of.get(i, i) for i in _column(rows["standings"], "id")],
            }
            for index, rows in held.items()
        }
    return {
        index: {"deliveries": list(_column(rows["deliveries"], "agent_id")), "cursors": list(_column(rows["cursors"], "id"))}
        for index, rows in held.items()
    }


def _owners(kind: str, held: Held, assignment: Assignment) -> dict[int, dict[str, list[int | None]]]:
    """For each index and table, the index of the actor that owns each row under ``assignment`` (each distinct
    key hashed once: many rows share a project or an agent)."""
    owner_of: dict[str | None, int | None] = {None: None}

    def owner(key: str | None) -> int | None:
        found = owner_of.get(key, -1)
        if found == -1:
            found = owner_of[key] = assignment.owner(key)  # type: ignore[arg-type]  # None is in the memo
        return found

    return {
        index: {suffix: [owner(key) for key in keys] for suffix, keys in tables.items()}
        for index, tables in _routing_keys(kind, held).items()
    }


async def _indices(store: LanceStore, kind: str, generation: int) -> list[int]:
    """Every index of ``kind`` with a table at ``generation`` (beyond the count too: a retired or new actor's)."""
    found = {p[2] for p in map(parse_table, await store.table_names()) if p is not None and p[:2] == (kind, generation)}
    return sorted(found)


async def _read(store: LanceStore, kind: str, generation: int, indices: list[int], dims: int) -> Held:
    existing = set(await store.table_names())
    held: Held = {}
    for index in indices:
        held[index] = {}
        for table in TABLES[kind]:
            schema = table.schema(dims)
            name = f"{table_prefix(kind, index, generation)}_{table.suffix}"
            rows = (await (await store.table(name, schema, table.identity)).load()) if name in existing else schema.empty_table()
            held[index][table.suffix] = rows.select(schema.names).cast(schema)
    return held


@dataclass(slots=True)
class Copied:
    """What a move copied: rows, and the old owners' rows with each one's new owner (what the sweep removes)."""

    rows: int
    held: Held
    owners: dict[int, dict[str, list[int | None]]]


async def _copy_moving(store: LanceStore, kind: str, old: Layout, new: Assignment, dims: int) -> Copied:
    """Append every row whose owner changes to its new owner's tables. Its old owner keeps it until the
    sweep after the switch, so the row is never absent from the actor the manifest names."""
    generation = old.generation(kind)
    held = await _read(store, kind, generation, list(range(old.counts[kind])), dims)
    owners = _owners(kind, held, new)
    moved = 0
    for table in TABLES[kind]:
        arriving: dict[int, list[pa.Table]] = defaultdict(list)
        for index, rows in held.items():
            by_owner: dict[int, list[int]] = defaultdict(list)
            for position, owner in enumerate(owners[index][table.suffix]):
                if owner is not None and owner != index:
                    by_owner[owner].append(position)
            for owner, positions in by_owner.items():
                arriving[owner].append(rows[table.suffix].take(positions))
        for owner, parts in sorted(arriving.items()):
            name = f"{table_prefix(kind, owner, generation)}_{table.suffix}"
            target = await store.table(name, table.schema(dims), table.identity)
            batch = pa.concat_tables(parts)
            await target.append(batch)
            moved += batch.num_rows
    return Copied(moved, held, owners)


async def _sweep(store: LanceStore, kind: str, layout: Layout, dims: int, copied: Copied | None = None) -> None:
    """Leave at each actor's tables only the rows of partitions it owns under ``layout``, and drop the tables
    of indices beyond the count. ``copied``: the move just made under ``layout`` (its rows need no second
    read: the old owners' strays are the rows it copied, and the new owners hold only what it gave them)."""
    generation, count = layout.generation(kind), layout.counts[kind]
    indices = await _indices(store, kind, generation)
    if copied is None:
        held = await _read(store, kind, generation, indices, dims)
        owners = _owners(kind, held, layout.assignment(kind))
    else:
        held, owners = copied.held, copied.owners
        indices = sorted(set(indices) - (set(range(count)) - set(held)))  # the new owners' tables: nothing to sweep
    for index in indices:
        for table in TABLES[kind]:
            name = f"{table_prefix(kind, index, generation)}_{table.suffix}"
            if index >= count:
                if name in set(await store.table_names()):
                    await store.drop(name)
                continue
            rows = held[index][table.suffix]
            strays = sorted(
                {
                    key
                    for key, owner in zip(_column(rows, table.column), owners[index][table.suffix], strict=True)
                    if owner != index
                }
            )
            if not strays:
                continue
            target = await store.table(name, table.schema(dims), table.identity)
            if table.identity is not None:
                await target.erase_rows(table.column, strays)
            else:  # marks and cursors: no content, so a delete and a purge of the old versions leave nothing
                await target.delete_where_in(table.column, strays)
                await target.purge()


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


async def settle_layout(
    storage: StorageConfig, wanted: dict[str, int], dims: int, running: bool, online: bool = False
) -> Settled:
    """The layout the actors start with: the stored one, resized to ``wanted`` counts when they differ.

    ``wanted``: kind -> count; ``running``: the deployment's actors already run (this is a later head);
    ``online``: an online resize (``head.partition_resizer``) stopped the partitioned actors, and the
    layout gets the next epoch, so the new actors have names of their own. Raises ConfigInvalid when a
    resize is asked of a running deployment, with an unfinished erase, or together with a change of
    vector width."""
    store = await LanceStore.open(storage)
    manifest = DeploymentManifest(await store.keyed("deployment_manifest", MANIFEST_SCHEMA, "key"))
    stored = await manifest.stored()
    if not stored:
        return Settled(Layout(dict(wanted)))
    layout = manifest.layout(stored, wanted)
    kinds = layout.resized(wanted)
    changes = ", ".join(f"{COUNT_KEYS[k]} {layout.counts[k]} -> {wanted[k]}" for k in kinds)
    unswept = manifest.unswept(stored)
    if running:
        if kinds:
            raise ConfigInvalid(f"{changes}: the deployment runs with the old counts; stop every head, then start with the new")
        if unswept:  # a move under way, or one whose mover died: its copies must be swept before actors load them
            raise ConfigInvalid(
                "partitions are moving (or a move was cut short); start again when it ends, or restart every head"
            )
        return Settled(layout)
    if replayed := await replay_journals(store, storage, int(stored.get("dims", dims))):
        log.info("resize: %d journaled cell rows committed before the partitions are read", replayed)
    for kind in unswept:  # a resize cut short: before its switch the copies, after it the sources, are strays
        log.warning("resize: %s was cut short; removing rows of partitions their actor does not own", COUNT_KEYS[kind])
        await _sweep(store, kind, layout, dims)
    if unswept:
        await manifest.switch_layout(layout)
    if not kinds:
        await _drop_other_generations(store, layout)
        return Settled(layout)
    if "dims" in stored and stored["dims"] != dims:
        raise ConfigInvalid(f"{changes}: the data has {stored['dims']} dims, not {dims}; resize with the old engine")
    if await _erases_unfinished(store, set(await store.table_names())):
        raise ConfigInvalid(f"{changes}: an erase is unfinished; start once with the old counts so it completes, then resize")
    resized = layout.resized_to(wanted, online)
    assignments = resized.assignments
    await manifest.switch_layout(layout, unswept=kinds)  # commit 1: a move under way (its copies are strays)
    moves, copies = [], []
    for kind in kinds:
        started = time.perf_counter()
        copies.append(await _copy_moving(store, kind, layout, assignments[kind], dims))
        partitions = layout.assignment(kind).moved_to(assignments[kind])
        moves.append(Move(kind, layout.counts[kind], wanted[kind], copies[-1].rows, time.perf_counter() - started, partitions))
    await manifest.switch_layout(resized, unswept=kinds)  # commit 2: the new owners are in force
    for i, kind in enumerate(kinds):
        started = time.perf_counter()
        await _sweep(store, kind, resized, dims, copies[i])  # the old owners let go of what moved
        moves[i] = replace(moves[i], seconds=moves[i].seconds + time.perf_counter() - started)
    await manifest.switch_layout(resized)  # commit 3: nothing left to sweep
    await _drop_other_generations(store, resized)
    return Settled(resized, tuple(moves))


def settle_layout_blocking(storage: StorageConfig, wanted: dict[str, int], dims: int, running: bool) -> Settled:
    """``settle_layout`` from synchronous code (a Ray task, or a thread of the starting server)."""
    return asyncio.run(settle_layout(storage, wanted, dims, running))

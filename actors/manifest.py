"""The deployment manifest: the shape a deployment's data was written with, kept beside the data.

Kept in the storage every node reaches (not on one head's disk), so a head
started elsewhere with another shard count or vector width is refused, and
every erasure-receipt key the deployment signed with stays listed. Owned by
the Registry actor (its only writer).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from actors.schemas import MANIFEST_SCHEMA
from actors.storage import KeyedTable
from mesh.errors import ConfigInvalid
from mesh.layout import COUNT_KEYS, KINDS, Layout
from mesh.sharding import Assignment

# {"counts": {kind: n}, "generations": {kind: g}, "assignments": {kind: {count, owners}}, "epoch": e,
#  "unswept": [kind]}, written by a resize (actors.resize)
LAYOUT_KEY = "layout"


class DeploymentManifest:
    """Key -> JSON value rows of the ``deployment_manifest`` table."""

    def __init__(self, table: KeyedTable) -> None:
        self._table = table

    async def stored(self) -> dict[str, Any]:
        """Every key and value, with the partition counts of the layout in force (a resize's ``layout``
        row supersedes the counts recorded at the first start)."""
        values = {r["key"]: json.loads(r["value"]) for r in (await self._table.load()).to_pylist()}
        for kind, count in values.get(LAYOUT_KEY, {}).get("counts", {}).items():
            values[COUNT_KEYS[kind]] = count
        return values

    def layout(self, stored: dict[str, Any], wanted: dict[str, int]) -> Layout:
        """The partition layout in force (a kind never recorded counts as ``wanted``)."""
        counts = {kind: int(stored.get(COUNT_KEYS[kind], wanted[kind])) for kind in KINDS}
        row = stored.get(LAYOUT_KEY, {})
        assignments = {kind: Assignment.from_json(value) for kind, value in row.get("assignments", {}).items()}
        return Layout(counts, dict(row.get("generations", {})), assignments, int(row.get("epoch", 0)))

    @staticmethod
    def unswept(stored: dict[str, Any]) -> list[str]:
        """The kinds a resize cut short left with rows at actors that do not own their partitions."""
        return [str(kind) for kind in stored.get(LAYOUT_KEY, {}).get("unswept", [])]

    async def switch_layout(self, layout: Layout, unswept: list[str] | None = None) -> None:
        """Put ``layout`` in force, with the kinds still to sweep: one row, so one commit (a resize's steps)."""
        assignments = {kind: a.to_json() for kind, a in sorted(layout.assignments.items())}
        value = {"counts": layout.counts, "generations": layout.generations, "assignments": assignments, "epoch": layout.epoch}
        await self._put({LAYOUT_KEY: {**value, "unswept": sorted(unswept or [])}})

    async def _put(self, values: dict[str, Any]) -> None:
        rows = [{"key": k, "value": json.dumps(v)} for k, v in sorted(values.items())]
        await self._table.write(pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA))

    async def claim(self, wanted: dict[str, str | int]) -> str | None:
        """Record ``wanted`` on first start; refuse a different shape later (ConfigInvalid).

        The embedding engine may differ at equal ``dims``: the answer is then
        the engine the stored corpus was made with (serve with it, and reembed
        to move to the configured one); None when they agree.
        """
        stored = await self.stored()
        if not stored:
            await self._put(dict(wanted))
            return None
        engine = stored.get("embedding_engine")
        if "dims" in stored and wanted.get("dims") != stored["dims"]:
            raise ConfigInvalid(
                f"embedding_engine {wanted.get('embedding_engine')!r} makes {wanted.get('dims')} dims "
                f"but this data was written with {engine!r} ({stored['dims']} dims)"
            )
        for key, value in wanted.items():
            if key != "embedding_engine" and key in stored and stored[key] != value:
                raise ConfigInvalid(f"{key} is {value!r} but this data was written with {stored[key]!r}")
        return None if engine in (None, wanted.get("embedding_engine")) else str(engine)

    async def set_corpus_engine(self, engine: str) -> None:
        """Record that every stored vector is now made by ``engine`` (a reembed's switch)."""
        await self._put({"embedding_engine": engine})

    async def remember_erasure_key(self, public_jwk: dict[str, Any]) -> list[dict[str, Any]]:
        """Add an erasure-receipt public key (once per ``kid``); every key the deployment ever signed with."""
        keys: list[dict[str, Any]] = list((await self.stored()).get("erasure_keys", []))
        if all(k.get("kid") != public_jwk.get("kid") for k in keys):
            keys.append(public_jwk)
            await self._put({"erasure_keys": keys})
        return keys

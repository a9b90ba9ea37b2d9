"""KeyedTable, the one way every actor writes records (real LanceDB under tmp_path)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa

from actors.storage import KeyedTable, LanceStore, StorageConfig

SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("v", pa.int64(), nullable=False)])


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.Table.from_pylist([{"id": k, "v": v} for k, v in pairs], schema=SCHEMA)


async def open_table(tmp_path: Path) -> KeyedTable:
    store = await LanceStore.open(StorageConfig(str(tmp_path / "lance"), optimize_every=2, keep_versions_s=0))
    table = KeyedTable(await store.table("t", SCHEMA, identity="id"), "id", 2)
    await table.load()
    return table


async def stored(table: KeyedTable) -> dict[str, int]:
    found = (await table.rows.read_all()).to_pylist()
    assert len(found) == len({r["id"] for r in found}), f"a key has two rows: {found}"
    return {r["id"]: r["v"] for r in found}


async def test_new_keys_are_appended_and_committed_ones_replaced(tmp_path: Path) -> None:
    table = await open_table(tmp_path)
    await table.write(rows(("a", 1), ("b", 1)))
    await table.write(rows(("a", 2), ("c", 1)))
    assert await stored(table) == {"a": 2, "b": 1, "c": 1}
    assert "a" in table and "z" not in table
    again = await open_table(tmp_path)  # a reload learns which keys are committed
    await again.write(rows(("b", 5)))
    assert await stored(again) == {"a": 2, "b": 5, "c": 1}


async def test_concurrent_writes_of_one_new_key_leave_one_row(tmp_path: Path) -> None:
    table = await open_table(tmp_path)
    await asyncio.gather(*(table.write(rows(("k", n))) for n in range(5)))
    assert set(await stored(table)) == {"k"}


async def test_delete_and_erase_forget_their_keys(tmp_path: Path) -> None:
    table = await open_table(tmp_path)
    await table.write(rows(("a", 1), ("b", 1), ("c", 1)))
    await table.delete(["a", "never-written"])
    await table.erase(["b"], rows(("c", 9), ("d", 1)))
    assert await stored(table) == {"c": 9, "d": 1}
    assert "a" not in table and "b" not in table and "d" in table
    await table.write(rows(("a", 3)))  # a deleted key is new again: appended, not merged
    assert await stored(table) == {"a": 3, "c": 9, "d": 1}


async def test_rows_sharing_a_key_in_one_write_leave_the_last(tmp_path: Path) -> None:
    table = await open_table(tmp_path)
    await table.write(rows(("a", 1), ("a", 2), ("b", 1)))
    await table.write(rows(("b", 2), ("b", 3)))
    assert await stored(table) == {"a": 2, "b": 3}

"""What ``RowTable.erase_rows`` costs against the least LanceDB needs to do the same rewrite.

``erase_rows`` rewrites every fragment holding a removed or replaced row, so
no byte of the old row stays in a data file (docs/storage.md). It adds the
fragment's other rows back before it deletes the fragment, and checks that
no copy of them is held elsewhere (left by a crash between the two steps),
so a crash loses nothing and a resumed erase adds nothing twice.

The baseline, in the same process on the same kind of table, is the bare
rewrite: read the fragment, add its survivors and the replacements, delete
the fragment, drop old versions (what ``erase_rows`` did before it was made
crash-safe, with no lock, no check and no sync). Two layouts: one compacted
fragment of 5,000 rows (an agent-node table after compaction), and 50
fragments of 100 rows (between compactions). Each round replaces 10 rows.

Run: ``.venv/bin/python -m bench.erase_rewrite [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import warnings
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from actors.storage import LanceStore, RowTable, StorageConfig
from bench.common import Report, banner, machine_info

SECTION = "erase rewrite"
DIMS = 384
SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("v", pa.list_(pa.float32(), DIMS), nullable=False)])


def rows(ids: range, value: float) -> pa.Table:
    return pa.Table.from_pylist([{"id": f"a{i}", "v": [value] * DIMS} for i in ids], schema=SCHEMA)


async def bare_rewrite(table: Any, replace: pa.Table) -> None:
    """The floor: one fragment rewrite with LanceDB's own calls and nothing else."""
    keys = ",".join(f"'{k}'" for k in replace.column("id").to_pylist())
    found = await table.query().with_row_id().where(f"id IN ({keys})").select(["id"]).to_arrow()
    fragments = sorted({r >> 32 for r in found.column("_rowid").to_pylist()})
    within = " OR ".join(f"(_rowid >= {f << 32} AND _rowid < {(f + 1) << 32})" for f in fragments)
    held = (await table.query().where(within).to_arrow()).select(SCHEMA.names)
    survivors = held.filter(pc.invert(pc.is_in(held.column("id"), replace.column("id"))))
    await table.add(pa.concat_tables([survivors.cast(SCHEMA), replace]))
    await table.delete(within)
    with warnings.catch_warnings():  # as erase_rows does: this process is the table's one user
        warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0", category=UserWarning)
        await table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)


async def fill(table: RowTable, fragments: int, per_fragment: int) -> None:
    for f in range(fragments):
        await table.append(rows(range(f * per_fragment, (f + 1) * per_fragment), 0.1))
    if fragments == 1:
        await table.purge()


async def measure(fragments: int, per_fragment: int, rounds: int) -> tuple[float, float]:
    """Median ms of a 10-row replace: (erase_rows, bare rewrite), on two tables of one store."""
    store = await LanceStore.open(StorageConfig(tempfile.mkdtemp(prefix="memesh-bench-erase-")))
    ours = await store.table("ours", SCHEMA, identity="id")
    bare = await store.table("bare", SCHEMA, identity="id")
    await fill(ours, fragments, per_fragment)
    await fill(bare, fragments, per_fragment)
    spent: dict[str, list[float]] = {"ours": [], "bare": []}
    for r in range(rounds):  # alternated, so drift on the box hits both alike
        replace = rows(range(r * 10, r * 10 + 10), float(r))
        started = time.perf_counter()
        await ours.erase_rows("id", [], replace)
        spent["ours"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await bare_rewrite(bare._table, replace)  # the baseline is LanceDB itself
        spent["bare"].append((time.perf_counter() - started) * 1000)
    assert await ours.count() == await bare.count() == fragments * per_fragment
    return statistics.median(spent["ours"]), statistics.median(spent["bare"])


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.erase_rewrite", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else 30
    report = report or Report(info={"machine": machine_info()})
    banner("erase_rows against the bare LanceDB rewrite")
    base = "bare LanceDB rewrite, same run"
    for fragments, per_fragment, layout in ((1, 5_000, "one fragment of 5,000 rows"), (50, 100, "50 fragments of 100 rows")):
        ours, bare = asyncio.run(measure(fragments, per_fragment, rounds))
        report.add(SECTION, f"replace 10 rows, {layout}, p50", ours, "ms", base, bare)
    report.print_table(SECTION)
    return report


if __name__ == "__main__":
    main()

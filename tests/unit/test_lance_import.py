"""LanceDB imported with its models' builds deferred: cheaper, and validating exactly as before.

Each check runs in a fresh interpreter: the test process has imported LanceDB long before.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import time
from pydantic import BaseModel, ValidationError
from pydantic._internal._config import config_defaults
from actors.storage import import_lancedb

lancedb = import_lancedb()
assert import_lancedb() is lancedb
assert config_defaults["defer_build"] is False, "the default leaked past the import"

from lance_namespace_urllib3_client.models.describe_table_request import DescribeTableRequest
assert DescribeTableRequest.__pydantic_complete__ is False, "built at import: nothing was deferred"
assert DescribeTableRequest(version=3).version == 3
for bad in ({"version": -1}, {"version": "3"}, {"tag": 7}):
    try:
        DescribeTableRequest(**bad)
    except ValidationError:
        pass
    else:
        raise AssertionError(f"a deferred model accepted {bad}")

class After(BaseModel):
    n: int
assert After.__pydantic_complete__ is True, "a model defined after the import was deferred too"
print("ok")
"""


def test_lancedb_models_build_on_first_use_and_validate_as_eager_ones() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_a_table_round_trips_after_the_deferred_import(tmp_path: object) -> None:
    probe = f"""
import asyncio
import pyarrow as pa
from actors.storage import import_lancedb
lancedb = import_lancedb()

async def main():
    db = await lancedb.connect_async({str(tmp_path)!r})
    table = await db.create_table("t", pa.table({{"id": ["a", "b"], "n": [1, 2]}}))
    await table.add(pa.table({{"id": ["c"], "n": [3]}}))
    assert await table.count_rows() == 3
    print("ok")

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]

"""Erase as a journaled operation, and what its certificate promises, checked on the bytes.

H1: a head-side timeout cut an erase half-way (inboxes kept the content, no audit row, and a
retry certified zero removals). H2: the erased text stayed in data files (a stale scene summary,
and LanceDB deletion vectors). In process: real LanceDB under tmp_path, the hash engine.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cluster.compose import start_core
from head.erasure_signing import verify_receipt
from head.facade import Memesh
from mesh.erasure import parse_scope
from mesh.errors import NotFound, StorageUnavailable
from mesh.model import CellType, NewCell
from mesh.query import NodeFilter
from tests.unit.conftest import ADMIN, in_process_settings
from tests.unit.test_propagation import agent, drain, settle, write


def grep(root: Path, needle: str) -> list[str]:
    found = subprocess.run(["grep", "-rl", "--binary-files=text", needle, str(root)], capture_output=True, text=True)
    return found.stdout.split()


async def erased_rows(core: Memesh) -> list[Any]:
    return [r for r in await core.directory.audit_log().rows(0, 10_000) if r.kind == "Erased"]


def inbox_targets(core: Memesh) -> list[Any]:
    return [core.directory.inbox_shard(i).target for i in range(core.directory.spec.inbox_shards)]  # type: ignore[attr-defined]


async def test_an_erase_cut_by_a_timeout_finishes_and_a_retry_gets_its_certificate(core: Memesh) -> None:
    listener, _ = await agent(core, role="Reader")
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "payroll export schedule")
    cell = await write(core, writer, "payroll export schedule UNIQUE-MARKER-41", salience=0.9)
    assert any("UNIQUE-MARKER-41" in i["diff"]["content"] for i in (await drain(core, listener))["items"])
    slow = asyncio.Event()
    originals = []
    for shard in inbox_targets(core):
        original = shard.erase
        originals.append((shard, original))

        async def delayed(*args: Any, _original: Any = original) -> None:
            await slow.wait()
            await _original(*args)

        shard.erase = delayed
    scope = parse_scope("node", cell, None)
    with pytest.raises(TimeoutError):  # the request's deadline passes while an owner is slow
        await asyncio.wait_for(core.data.erase(ADMIN, scope, scope.label, dry_run=False), 0.5)
    assert await erased_rows(core) == []  # not certified: not every owner confirmed yet
    slow.set()
    await core.data.wait_idle(30)  # the erase went on without its caller
    assert all("UNIQUE-MARKER-41" not in i["diff"]["content"] for i in (await drain(core, listener, since=0))["items"])
    retry = await core.data.erase(ADMIN, scope, scope.label, dry_run=False)  # the retry receives the certificate
    assert retry.counts.nodes_removed == 2 and retry.counts.deliveries_removed >= 1  # the cell and its emptied scene
    claims = verify_receipt(retry.digest or "", core.data.public_keys)
    assert claims["counts"] == retry.counts.as_dict()
    (row,) = await erased_rows(core)  # exactly once
    assert row.target == scope.label and claims["erase_id"] in row.detail
    for shard, original in originals:
        shard.erase = original
    with pytest.raises(NotFound):  # answered: a new request is a new erase, and the node is gone
        await core.data.erase(ADMIN, scope, scope.label, dry_run=False)
    assert len(await erased_rows(core)) == 1


async def test_a_failing_owner_is_retried_until_every_owner_is_done(core: Memesh) -> None:
    writer, _ = await agent(core)
    listener, _ = await agent(core, role="Reader")
    await core.inbox.place_beacon(listener, "quarterly board minutes")
    await write(core, writer, "quarterly board minutes", project_id="board", salience=0.9)
    failures = 0
    shard = inbox_targets(core)[0]
    original = shard.erase

    async def flaky(*args: Any) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise StorageUnavailable("storage failed during erase")
        await original(*args)

    shard.erase = flaky
    scope = parse_scope("project", "board", "t1")
    cert = await core.data.erase(ADMIN, scope, scope.label, dry_run=False)
    assert failures == 2 and cert.digest is not None and len(await erased_rows(core)) == 1
    assert (await drain(core, listener, since=0))["items"] == []


async def test_a_crash_mid_erase_is_resumed_at_the_next_start(make_core: Callable[..., Memesh], tmp_path: Path) -> None:
    core = make_core()
    writer, _ = await agent(core)
    listener, _ = await agent(core, role="Reader")
    await core.inbox.place_beacon(listener, "incident postmortem draft")
    await write(core, writer, "incident postmortem draft CRASH-MARKER-9", project_id="ops", salience=0.9)
    never = asyncio.Event()
    for shard in inbox_targets(core):

        async def stuck(*_: Any) -> None:
            await never.wait()  # the head dies before this owner answers

        shard.erase = stuck
    scope = parse_scope("project", "ops", "t1")
    attempt = asyncio.create_task(core.data.erase(ADMIN, scope, scope.label, dry_run=False))
    for _ in range(200):
        pending = await core.directory.audit_log().journal_unfinished()
        if pending:
            break
        await asyncio.sleep(0.02)
    assert [e.state for e in pending] == ["pending"]  # the intent was durable before any owner finished
    attempt.cancel()
    for _, task in list(core.data._running.values()):
        task.cancel()
    await asyncio.sleep(0)
    await core.close()

    again = make_core()
    await start_core(again, in_process_settings(tmp_path / "data"))
    await again.data.wait_idle(30)
    assert (await drain(again, listener, since=0))["items"] == []
    assert await again.memory.query(writer, "incident postmortem draft", None, 10, NodeFilter()) == []
    cert = await again.data.erase(ADMIN, scope, scope.label, dry_run=False)  # the resumed erase's certificate
    assert cert.counts.nodes_removed >= 1 and cert.counts.deliveries_removed >= 1
    assert verify_receipt(cert.digest or "", again.data.public_keys)["label"] == "project:ops"
    assert len(await erased_rows(again)) == 1
    await again.close()


async def test_no_byte_of_an_erased_cell_stays_in_any_file(make_core: Callable[..., Memesh], tmp_path: Path) -> None:
    """H2, as the review reproduced it: one cell erased from a scene whose other members stay, in a table
    compacted into large fragments; then every file under the data dir is searched for its text."""
    core = make_core(storage={"optimize_every": 8})
    writer, _ = await agent(core)
    listener, _ = await agent(core, role="Reader")
    await core.inbox.place_beacon(listener, "ledger reconciliation job")
    rng = np.random.default_rng(1)
    for batch in range(12):  # enough commits for compaction: one fragment holds the marker among many rows
        specs = [NewCell(f"filler note {batch}.{n} {rng.integers(1 << 30)}", CellType.FACT, project_id="fin") for n in range(100)]
        await core.memory.write_cells(writer, specs)
    marker = "ledger reconciliation job ERASE-ME-BYTES-77 overruns"
    (cell,) = await core.memory.write_cells(writer, [NewCell(marker, CellType.FACT, project_id="fin", salience=1.0)])
    twin = [NewCell("ledger reconciliation job ERASE-ME-BYTES-77 overruns", CellType.FACT, project_id="fin", salience=0.9)]
    (copy,) = await core.memory.write_cells(writer, twin)  # a near-duplicate: consolidation quotes one of them
    for n in range(3):
        await core.memory.write_cells(
            writer, [NewCell(f"ledger reconciliation job note {n}", CellType.FACT, project_id="fin", scene_id=cell.scene_id)]
        )
    await settle(core)
    report = await core.memory.consolidate(writer, cell.scene_id or "")
    assert report.patterns and "ERASE-ME-BYTES-77" in report.patterns[0].content
    await asyncio.sleep(1.1)  # access times and agent nodes committed
    data = tmp_path / "data"
    before = grep(data, "ERASE-ME-BYTES-77")  # it is there before: cells, the stored scene summary, deliveries
    assert any("_cells.lance" in f for f in before) and any("_scenes.lance" in f for f in before)
    assert any("_deliveries.lance" in f for f in before)
    for node in (cell.id, copy.id):
        scope = parse_scope("node", node, None)
        await core.data.erase(ADMIN, scope, scope.label, dry_run=False)
    assert grep(data, "ERASE-ME-BYTES-77") == []
    scene = await core.memory.get_scene(writer, cell.scene_id or "")  # the scene keeps its other members
    assert scene.live_count == 3 and "ERASE-ME-BYTES-77" not in scene.summary
    await core.close()
    again = make_core(storage={"optimize_every": 8})  # and it stays gone through a restart
    assert grep(data, "ERASE-ME-BYTES-77") == []
    assert len(await again.memory.query(writer, "filler note", None, 1000, NodeFilter())) == 1000
    await again.close()


async def test_an_agent_erase_leaves_no_byte_of_its_beacons_or_deliveries(
    make_core: Callable[..., Memesh], tmp_path: Path
) -> None:
    core = make_core(storage={"optimize_every": 4})
    doomed, _ = await agent(core)
    writer, _ = await agent(core)
    for n in range(6):
        await core.inbox.place_beacon(doomed, f"BEACON-TEXT-55 vendor contract renewal {n}")
    for n in range(10):
        await write(core, writer, f"vendor contract renewal clause {n}", salience=0.9)
    await write(core, doomed, "AGENT-WROTE-56 vendor contract renewal", salience=0.9)
    await core.memory.open_session(doomed, "SESSION-PROJECT-57")
    assert (await drain(core, doomed))["items"]
    await asyncio.sleep(1.1)
    data = tmp_path / "data"
    for needle in ("BEACON-TEXT-55", "AGENT-WROTE-56"):
        assert grep(data, needle)
    scope = parse_scope("agent", doomed.agent_id, None)
    cert = await core.data.erase(ADMIN, scope, scope.label, dry_run=False)
    assert cert.counts.sessions_removed == 1 and cert.counts.deliveries_removed >= 1
    for needle in ("BEACON-TEXT-55", "AGENT-WROTE-56"):
        assert grep(data, needle) == [], needle
    await core.close()

"""Growth has limits and a policy: retention, quotas, bounded per-scene work, and audit rows that
precede the change they record.

Each test names the finding of the 2026-11-23 review (../shared/reference/security-review.md)
it would have caught. In process: real LanceDB under tmp_path, the hash engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from head.facade import Memesh
from head.usage import Quotas, UsageLedger
from mesh.consolidation import find_groups
from mesh.errors import Conflict, NotFound, QuotaExceeded, StorageUnavailable
from mesh.identity import AgentStatus
from mesh.inbox import AgentInbox
from mesh.model import CellType, NewCell, normalize
from mesh.seam import beacon_set_index, inbox_index
from tests.unit.conftest import ADMIN, Api, assert_error
from tests.unit.test_propagation import agent, drain, settle, write

DIMS = 384


def test_an_inbox_drops_old_acknowledged_deliveries_then_the_oldest_past_its_cap() -> None:
    """H6: deliveries were never deleted (5 KB of embedding plus the content each)."""
    inbox = AgentInbox()
    for n in range(10):
        inbox.enqueue(f"d{n}", f"diff{n}", "p", 0.5, "{}", delivered_at=float(n))
    inbox.commit(10)
    inbox.cursor = 4
    dropped, unacked = inbox.trim(now=100.0, acked_max_age_s=97.5, max_deliveries=100)
    assert [d.seq for d in dropped] == [1, 2, 3] and unacked == 0  # acknowledged and older than 97.5 s
    dropped, unacked = inbox.trim(now=100.0, acked_max_age_s=1e9, max_deliveries=5)
    assert [d.seq for d in dropped] == [4, 5] and unacked == 1
    page = inbox.pull(None, None, None, 100, lambda _: True)
    assert [d.seq for d in page.items] == [6, 7, 8, 9, 10] and page.cursor == 4 and page.window_high == 10


async def test_retention_removes_delivery_rows_and_survives_a_restart(make_core: Callable[..., Memesh]) -> None:
    core = make_core(retention={"max_deliveries_per_inbox": 3, "sweep_interval_s": 0})
    listener, _ = await agent(core, role="Reader")
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "kafka consumer lag")
    for n in range(6):
        await write(core, writer, f"kafka consumer lag alert number {n}", salience=0.9)
    await settle(core)
    shard = core.directory.instances[f"inbox_shard:{inbox_index(core.directory, listener.agent_id)}"]
    await shard.sweep()
    held = (await drain(core, listener, since=0))["items"]
    assert len(held) == 3 and {i["delivery_seq"] for i in held} == {4, 5, 6}
    assert (await core.health())["deliveries_dropped_unacked"] == 3
    await core.close()
    again = make_core(retention={"max_deliveries_per_inbox": 3, "sweep_interval_s": 0})
    assert {i["delivery_seq"] for i in (await drain(again, listener, since=0))["items"]} == {4, 5, 6}
    await again.close()


async def test_removed_and_expired_beacons_leave_memory_and_storage(make_core: Callable[..., Memesh]) -> None:
    """H6: ``remove`` only set a flag and expired beacons stayed for ever (memory, rows, every walk's mask)."""
    core = make_core(retention={"sweep_interval_s": 0})
    owner, _ = await agent(core, role="Reader")
    ref = core.directory.beacon_set(beacon_set_index(core.directory, owner.agent_id))
    for n in range(200):  # a place-then-remove loop
        placed = await core.inbox.place_beacon(owner, f"interest {n}")
        await core.inbox.remove_beacon(owner, placed.id)
        await core.inbox.remove_beacon(owner, placed.id)  # a repeated removal is still a no-op
    for n in range(5):
        await core.inbox.place_beacon(owner, f"short-lived {n}", ttl_s=1.0)
    await asyncio.sleep(1.05)
    await core.inbox.place_beacon(owner, "kept")  # purges the agent's expired beacons first
    target = ref.target  # type: ignore[attr-defined]
    assert list(target.beacons) and len(target.beacons) == 1
    assert await target._beacon_table.rows.count() == 1
    assert target._tenants["t1"].index.size < 300  # the index is rebuilt, not grown for ever
    await core.close()


async def test_sessions_are_capped_and_closed_ones_purged(make_core: Callable[..., Memesh]) -> None:
    """H6: sessions, closed ones included, were never deleted and all loaded at start."""
    core = make_core(limits={"max_open_sessions_per_agent": 3}, retention={"closed_session_max_age_s": 0, "sweep_interval_s": 0})
    writer, _ = await agent(core)
    sessions = [await core.memory.open_session(writer, "p") for _ in range(3)]
    with pytest.raises(QuotaExceeded):
        await core.memory.open_session(writer, "p")
    await core.memory.close_session(writer, sessions[0].id)
    await core.memory.open_session(writer, "p")  # a closed one frees its slot
    registry = core.directory.registry().target  # type: ignore[attr-defined]
    assert await registry.sweep(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert (await registry.health())["sessions"] == 3
    await core.close()


async def test_a_writer_that_opens_and_closes_sessions_in_a_loop_keeps_a_bounded_number(make_core: Callable[..., Memesh]) -> None:
    """Closed sessions were kept a day whatever their number: a writer opening and closing sessions at its rate
    limit grew the registry (one actor, every tenant's sessions in its memory) by millions a day."""
    sections: dict[str, Any] = {"retention": {"max_closed_sessions_per_agent": 3, "sweep_interval_s": 0}}
    core = make_core(**sections)
    writer, _ = await agent(core)
    opened = []
    for _ in range(10):
        session = await core.memory.open_session(writer, "p")
        await core.memory.close_session(writer, session.id)
        opened.append(session.id)
    kept = await core.memory.open_session(writer, "p")  # open sessions do not count against the closed ones' cap
    registry = core.directory.registry().target  # type: ignore[attr-defined]
    assert (await registry.health())["sessions"] == 4
    await core.memory.close_session(writer, opened[-1])  # the newest closed ones are kept: closing is idempotent
    with pytest.raises(NotFound):
        await core.memory.close_session(writer, opened[0])  # the oldest is gone, as after its day
    assert await registry.sweep() == 7  # their rows leave storage at the sweep
    assert await registry._session_table.rows.count() == 4
    await core.close()
    again = make_core(**sections)  # a restart loads what is stored: the same four
    registry = again.directory.registry().target  # type: ignore[attr-defined]
    assert (await registry.health())["sessions"] == 4
    assert (await again.memory._session(writer, kept.id)).open
    await again.close()


async def test_an_erase_takes_the_closed_sessions_waiting_for_the_sweep(make_core: Callable[..., Memesh]) -> None:
    """A closed session dropped past the cap keeps its row until the sweep: an erase of its project takes it too."""
    core = make_core(retention={"max_closed_sessions_per_agent": 1, "sweep_interval_s": 0})
    writer, _ = await agent(core)
    for _ in range(3):
        await core.memory.close_session(writer, (await core.memory.open_session(writer, "p")).id)
    registry = core.directory.registry().target  # type: ignore[attr-defined]
    assert await registry._session_table.rows.count() == 3
    assert await registry.erase_sessions(writer.tenant_id, "p", None, dry_run=True) == 3
    assert await registry.erase_sessions(writer.tenant_id, "p", None, dry_run=False) == 3
    assert await registry._session_table.rows.count() == 0
    assert await registry.sweep() == 0
    await core.close()


async def test_tenant_quotas_answer_quota_exceeded_without_retry_after(make_core: Callable[..., Memesh]) -> None:
    """H6: nothing capped a tenant's cells, beacons or bytes."""
    core = make_core(quotas={"max_cells_per_tenant": 5, "max_beacons_per_tenant": 2, "max_bytes_per_tenant": 0})
    api = Api(core)
    key = await api.key()
    batch = {"cells": [{"content": f"cell {n}", "cell_type": "Fact"} for n in range(4)]}
    assert (await api.send("POST", "/v1/cells:batch", key, batch)).status_code == 201
    refused = await api.send("POST", "/v1/cells:batch", key, batch)
    assert_error(refused, 429, "quota_exceeded")
    assert "retry-after" not in refused.headers
    assert (await api.send("POST", "/v1/cells", key, {"content": "the fifth", "cell_type": "Fact"})).status_code == 201
    other_tenant = await api.key(tenant="t2")
    assert (await api.send("POST", "/v1/cells", other_tenant, {"content": "mine", "cell_type": "Fact"})).status_code == 201
    for n in range(2):
        assert (await api.send("POST", "/v1/beacons", key, {"interest": f"b{n}"})).status_code == 200
    assert_error(await api.send("POST", "/v1/beacons", key, {"interest": "b3"}), 429, "quota_exceeded")
    await api.http.aclose()
    await core.close()
    sized = make_core(quotas={"max_bytes_per_tenant": 20_000})
    api = Api(sized)
    key = await api.key(tenant="t3")
    big = {"content": "x" * 16_000, "cell_type": "Fact"}
    assert (await api.send("POST", "/v1/cells", key, big)).status_code == 201
    assert_error(await api.send("POST", "/v1/cells", key, big), 429, "quota_exceeded")
    await api.http.aclose()
    await sized.close()


async def test_a_usage_refresh_counts_the_writes_under_way(make_core: Callable[..., Memesh]) -> None:
    """The quota ledger read every actor again after ``refresh_s`` and forgot the reservations of writes still
    under way (no actor holds them yet): a write was admitted past the quota, and a write failing after the
    refresh gave back what the new reading never counted, so a tenant could pass its quota at every refresh.
    The actors here hold nothing of the tenant: what is counted is the ledger's own."""
    core = make_core()
    now = [0.0]
    ledger = UsageLedger(core.directory, Quotas(max_cells=10, max_beacons=0, max_bytes=0, refresh_s=30.0), lambda: now[0])
    first = await ledger.reserve("t1", cells=6)
    now[0] += 31  # the next reservation reads every actor again while the first write is under way
    with pytest.raises(QuotaExceeded):
        await ledger.reserve("t1", cells=6)
    small = await ledger.reserve("t1", cells=1)
    ledger.release(first)  # failed: it gives back the 6 the reading counted, no more
    with pytest.raises(QuotaExceeded):
        await ledger.reserve("t1", cells=10)
    ledger.settle(await ledger.reserve("t1", cells=9))
    ledger.settle(small)
    now[0] += 31  # nothing under way now: the reading is the actors' (none of it was really written)
    ledger.settle(await ledger.reserve("t1", cells=10))
    await core.close()


async def test_a_beacon_placed_or_removed_whose_commit_fails_is_undone(make_core: Callable[..., Memesh]) -> None:
    """A placement whose commit failed (503, no id given out) left the beacon live in memory, gathering
    deliveries and holding one of its agent's places; a removal whose commit failed left it out of memory only
    (a retry answered 200, and it came back at the next load). Both are undone."""
    core = make_core(limits={"max_beacons_per_agent": 1})
    owner, _ = await agent(core, role="Reader")
    target = core.directory.beacon_set(beacon_set_index(core.directory, owner.agent_id)).target  # type: ignore[attr-defined]
    fail_once(target._beacon_commit, "submit")
    with pytest.raises(StorageUnavailable):
        await core.inbox.place_beacon(owner, "replication lag")
    assert not target.beacons and not target._removed._owner  # undone, not remembered as a removal
    placed = await core.inbox.place_beacon(owner, "replication lag")  # its agent's one place is free
    fail_once(target._beacon_commit, "submit")
    with pytest.raises(StorageUnavailable):
        await core.inbox.remove_beacon(owner, placed.id)
    assert list(target.beacons) == [placed.id]
    assert await target._beacon_table.rows.count() == 1
    await core.inbox.remove_beacon(owner, placed.id)  # the retry removes it, row and all
    assert not target.beacons and await target._beacon_table.rows.count() == 0
    await core.close()


async def test_a_cancelled_write_stays_counted(make_core: Callable[..., Memesh]) -> None:
    """A write cancelled under way (a request timeout, a gRPC deadline) gave its quota back, though on Ray the
    shard's call runs on and may land: such writes were free until the next reading. It stays counted."""
    core = make_core(quotas={"max_cells_per_tenant": 5})
    writer, _ = await agent(core)
    embedder = core.memory._embedder
    real, entered = embedder.embed, asyncio.Event()

    async def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await asyncio.sleep(30)
        return await real(*args, **kwargs)

    embedder.embed = slow
    task = asyncio.create_task(core.memory.write_cells(writer, [NewCell(f"cell {n}", CellType.FACT) for n in range(4)]))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    embedder.embed = real
    with pytest.raises(QuotaExceeded):  # 4 counted + 2 > 5
        await core.memory.write_cells(writer, [NewCell(f"more {n}", CellType.FACT) for n in range(2)])
    await core.memory.write_cells(writer, [NewCell("one more", CellType.FACT)])
    await core.close()


def test_find_groups_matches_the_greedy_definition() -> None:
    """H4: the vectorised grouping decides what the Python double loop decided."""
    rng = np.random.default_rng(3)
    base = [normalize(rng.normal(size=32)) for _ in range(6)]
    rows = np.stack([normalize(base[i % 6] + 0.15 * rng.normal(size=32)) for i in range(700)])
    groups = find_groups(rows, 0.9, 2)
    taken: set[int] = set()
    expected = []
    for seed in range(len(rows)):
        if seed in taken:
            continue
        group = [i for i in range(len(rows)) if i not in taken and float(rows[i] @ rows[seed]) >= 0.9]
        if len(group) >= 2:
            taken.update(group)
            expected.append(group)
    assert groups == expected


async def test_scenes_are_capped_and_consolidation_leaves_the_loop_free(make_core: Callable[..., Memesh]) -> None:
    """H4: scene size had no cap and consolidation was O(n^2) Python on the shard's event loop."""
    core = make_core(scenes={"max_members": 300})
    writer, _ = await agent(core)
    rng = np.random.default_rng(5)
    base = normalize(rng.normal(size=DIMS))
    vectors = [normalize(base + 0.9 * rng.normal(size=DIMS) / np.sqrt(DIMS)) for _ in range(700)]
    specs = [NewCell(f"near {n}", CellType.FACT, embedding=tuple(v.tolist())) for n, v in enumerate(vectors)]
    cells = []
    for start in range(0, len(specs), 100):
        cells += await core.memory.write_cells(writer, specs[start : start + 100])
    scenes = {c.scene_id for c in cells}
    assert len(scenes) >= 3  # 700 similar cells, at most 300 a scene
    shard = core.directory.scene_shard(0).target  # type: ignore[attr-defined]
    shard = shard if cells[0].scene_id in shard.partition.scenes else core.directory.scene_shard(1).target  # type: ignore[attr-defined]
    assert max(len(shard.partition.scenes[s].members) for s in scenes) <= 300
    with pytest.raises(Conflict):  # an explicit scene_id on a full scene
        full = next(s for s in scenes if len(shard.partition.scenes[s].members) == 300)
        await core.memory.write_cells(writer, [NewCell("one more", CellType.FACT, scene_id=full)])
    work = asyncio.create_task(core.memory.consolidate(writer, cells[0].scene_id or ""))
    started = time.perf_counter()
    await core.memory.query(writer, "near", None, 5, _no_filter())  # answered while the consolidation runs
    assert time.perf_counter() - started < 2.0
    report = await work
    assert report.scene.live_count <= 300
    await core.close()


async def test_a_batch_overfilling_a_named_scene_is_refused_and_leaves_nothing(make_core: Callable[..., Memesh]) -> None:
    """A batch naming a scene more times than it had room for got 409, but its cells before the one that
    found the scene full stayed readable until a restart, though never stored. Now nothing of it is kept."""
    core = make_core(scenes={"max_members": 2})
    api = Api(core)
    key = await api.key()
    first = await api.send("POST", "/v1/cells", key, {"content": "the primary lags", "cell_type": "Fact"})
    scene = first.json()["scene_id"]
    named = [{"content": f"replica {n} lags too", "cell_type": "Fact", "scene_id": scene} for n in range(2)]
    assert_error(await api.send("POST", "/v1/cells:batch", key, {"cells": named}), 409, "conflict")
    listed = await api.send("GET", "/v1/cells", key)
    assert [c["id"] for c in listed.json()["cells"]] == [first.json()["id"]]
    answer = await api.send("POST", "/v1/query", key, {"text": "replica lags", "k": 10})
    assert [c["id"] for c in answer.json()] == [first.json()["id"]]
    assert (await api.send("POST", "/v1/cells:batch", key, {"cells": named[:1]})).status_code == 201  # one place left
    await api.http.aclose()
    await core.close()


def fail_once(target: Any, method: str) -> None:
    """``target.method`` raises StorageUnavailable on its next call, as a failed commit does, then is itself again."""
    real = getattr(target, method)

    async def failing(*args: Any, **kwargs: Any) -> Any:
        setattr(target, method, real)
        raise StorageUnavailable("storage failed during a commit")

    setattr(target, method, failing)


async def test_a_delete_or_a_session_change_whose_commit_fails_is_undone(make_core: Callable[..., Memesh]) -> None:
    """A delete whose commit failed (503) left the cell tombstoned in memory only: a retry was 404 and the cell
    came back at the next load. A session open whose commit failed kept its place (no one holds its id to close
    it: enough of them and the agent could open none); a failed close left it closed in memory only. Each is
    undone, so memory stays what storage holds and a retry does it."""
    core = make_core(limits={"max_open_sessions_per_agent": 1})
    writer, _ = await agent(core)
    cell_id = await write(core, writer, "rotate the tls certificates every ninety days")
    shard = next(
        s.target  # type: ignore[attr-defined]
        for s in (core.directory.scene_shard(0), core.directory.scene_shard(1))
        if cell_id in s.target.partition.cells  # type: ignore[attr-defined]
    )
    fail_once(shard._commit, "submit")
    with pytest.raises(StorageUnavailable):
        await core.cells.delete(writer, cell_id)
    assert (await core.cells.get(writer, cell_id)).id == cell_id
    assert [c.id for c in await core.memory.query(writer, "tls certificates", None, 5, _no_filter())] == [cell_id]
    await core.cells.delete(writer, cell_id)  # the retry deletes it
    with pytest.raises(NotFound):
        await core.cells.get(writer, cell_id)
    registry = core.directory.registry().target  # type: ignore[attr-defined]
    fail_once(registry._session_commit, "submit")
    with pytest.raises(StorageUnavailable):
        await core.memory.open_session(writer, "p")
    session = await core.memory.open_session(writer, "p")  # its one place was given back
    fail_once(registry._session_commit, "submit")
    with pytest.raises(StorageUnavailable):
        await core.memory.close_session(writer, session.id)
    assert (await registry.get_session(session.id)).open
    with pytest.raises(QuotaExceeded):  # still open, so still counted
        await core.memory.open_session(writer, "p")
    await core.memory.close_session(writer, session.id)
    assert not (await registry.get_session(session.id)).open
    await core.close()


@contextlib.contextmanager
def audit_unavailable(core: Memesh) -> Iterator[None]:
    """The AuditLog actor failing every append, as a storage outage would (its real method is put back)."""
    audit = core.directory.audit_log().target  # type: ignore[attr-defined]
    real = audit.append

    async def broken(*_: Any, **__: Any) -> int:
        raise StorageUnavailable("storage failed during append to audit_log")

    audit.append = broken
    try:
        yield
    finally:
        audit.append = real


def _no_filter() -> Any:
    from mesh.query import NodeFilter

    return NodeFilter()


async def test_a_consolidation_whose_commit_fails_leaves_nothing_behind(make_core: Callable[..., Memesh]) -> None:
    """M8: memory kept the Patterns after a failed commit; a later touch persisted members superseded by a
    Pattern that did not exist, and after a restart those cells vanished from every read."""
    core = make_core()
    writer, _ = await agent(core)
    ids = [await write(core, writer, "rotate the tls certificates every ninety days") for _ in range(3)]
    scene_id = (await core.memory.query(writer, "rotate the tls certificates", None, 1, _no_filter()))[0].scene_id or ""
    shard = next(
        s.target  # type: ignore[attr-defined]
        for s in (core.directory.scene_shard(0), core.directory.scene_shard(1))
        if scene_id in s.target.partition.scenes  # type: ignore[attr-defined]
    )
    table = shard._cells.rows  # the RowTable under the KeyedTable
    real_append = table.append
    calls = 0

    async def failing(rows: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StorageUnavailable("storage failed during append")
        await real_append(rows)

    table.append = failing
    with pytest.raises(StorageUnavailable):
        await core.memory.consolidate(writer, scene_id)
    found = await core.memory.recall(writer, "rotate the tls certificates", None, 10, _no_filter())
    assert {c.id for c in found} == set(ids) and all(c.superseded_by is None for c in found)
    await asyncio.sleep(1.2)  # the access times of that recall are committed
    await core.close()
    again = make_core()
    after = await again.memory.query(writer, "rotate the tls certificates", None, 10, _no_filter())
    assert {c.id for c in after} == set(ids)
    await again.close()


async def test_an_audit_row_precedes_the_change_it_records(core: Memesh) -> None:
    """M4: revoke, rotate and issue changed the registry first and wrote the row after; a failed row left
    a change with no audit row (and a rotate's new key lost)."""
    issued = await core.identity.issue(ADMIN, "t1", "victim", ["Writer"])
    with audit_unavailable(core):
        for action in ("revoke", "rotate", "suspend"):
            with pytest.raises(StorageUnavailable):
                await core.identity.apply(ADMIN, issued.agent.id, action)
        with pytest.raises(StorageUnavailable):
            await core.identity.issue(ADMIN, "t1", "never", ["Writer"])
    agent_now = await core.identity.get(ADMIN, issued.agent.id)
    assert agent_now.status is AgentStatus.ACTIVE and agent_now.key_hash == issued.agent.key_hash
    assert [a.display_name for a in (await core.identity.list(ADMIN, None, 100))[0]] == ["victim"]

    registry = core.directory.registry().target  # type: ignore[attr-defined]
    real_apply = registry.apply

    async def failing_apply(*_: Any) -> Any:
        raise StorageUnavailable("storage failed during append to registry_agents")

    registry.apply = failing_apply
    with pytest.raises(StorageUnavailable):
        await core.identity.apply(ADMIN, issued.agent.id, "revoke")
    registry.apply = real_apply
    rows = [(r.kind, r.outcome) for r in await core.directory.audit_log().rows(0, 100)]
    assert rows[-2:] == [("AgentRevoked", "ok"), ("AgentRevoked", "failed")]


async def test_a_descriptor_is_never_stored_without_its_audit_row(core: Memesh) -> None:
    """M4: ``DescriptorService.put`` stored the descriptor, then wrote the row."""
    issued = await core.identity.issue(ADMIN, "t1", "described", ["Writer"])
    with audit_unavailable(core), pytest.raises(StorageUnavailable):
        await core.descriptors.put(ADMIN, issued.agent.id, {"name": "planner", "description": "plans"})
    with pytest.raises(NotFound):  # nothing was stored
        await core.descriptors.get(ADMIN, issued.agent.id)

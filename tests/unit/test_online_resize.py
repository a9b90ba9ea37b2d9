"""An online resize (``head.partition_resizer``) under load, in process on the real LanceDB: writes, recalls and
inbox pulls keep coming while the partitions move from 2 / 2 / 2 actors to 5 / 3 / 4 and back to 2 / 2 / 2; every
acknowledged write is found, every inbox shows the same items and cursor, every beacon is where its agent routes,
and every actor holds exactly the partitions it owns. What may not run beside a resize is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from head.facade import Memesh
from head.partition_resizer import HOLD, MOVED, PartitionResizer
from mesh.audit import AuditKind
from mesh.errors import Conflict, Forbidden, MemeshError, ValidationFailed
from mesh.model import CellType, NewCell
from mesh.query import NodeFilter
from mesh.sharding import VIRTUAL_PARTITIONS
from tests.unit.conftest import ADMIN, assert_error
from tests.unit.test_admin_gate import CONFIG, ConsoleHarness
from tests.unit.test_propagation import agent, drain
from tests.unit.test_resize import assert_every_row_at_its_owner, check, populate, started

GROWN = {"scene_shard": 5, "beacon_set": 3, "inbox_shard": 4}


class Load:
    """Writers, a reader and a puller, each in a loop until stopped; what was acknowledged, and when."""

    def __init__(self, core: Memesh) -> None:
        self.core = core
        self.acked: dict[str, str] = {}  # cell id -> content
        self.answered: list[tuple[float, float]] = []  # (sent, answered) of every request
        self.failures: list[MemeshError] = []
        self._stop = asyncio.Event()

    async def run(self, writer_key: str, reader_key: str) -> None:
        writer = await self.core.identity.authenticate(writer_key)
        reader = await self.core.identity.authenticate(reader_key)

        async def timed(work: Callable[[], object]) -> None:
            sent = time.monotonic()
            try:
                async with self.core.directory.gate.operation():  # what the door does for every request
                    await work()  # type: ignore[misc]
            except MemeshError as exc:  # a 503 a client retries; counted, and the test bounds it
                self.failures.append(exc)
            self.answered.append((sent, time.monotonic()))
            await asyncio.sleep(0.005)  # a paced client: in process, a call that never waits would never yield

        async def write_loop(n: int) -> None:
            i = 0
            while not self._stop.is_set():
                content = f"under the online resize writer {n} note {i}"
                i += 1

                async def one(content: str = content) -> None:
                    (cell,) = await self.core.memory.write_cells(writer, [NewCell(content=content, cell_type=CellType.FACT)])
                    self.acked[cell.id] = content

                await timed(one)

        async def read_loop() -> None:
            while not self._stop.is_set():
                await timed(lambda: self.core.memory.recall(reader, "resize note", None, 5, NodeFilter()))

        async def pull_loop() -> None:
            while not self._stop.is_set():
                await timed(lambda: drain(self.core, reader))

        await asyncio.gather(write_loop(0), write_loop(1), read_loop(), pull_loop())

    def stop(self) -> None:
        self._stop.set()


async def resize_under_load(core: Memesh, wanted: dict[str, int]) -> tuple[Load, float, float]:
    _, writer_key = await agent(core, "tenant-load", "Writer")
    _, reader_key = await agent(core, "tenant-load", "Reader")
    load = Load(core)
    running = asyncio.create_task(load.run(writer_key, reader_key))
    await asyncio.sleep(0.5)
    began = time.monotonic()
    await core.resizer.resize(ADMIN, wanted)
    ended = time.monotonic()
    await asyncio.sleep(0.5)
    load.stop()
    await running
    return load, began, ended


async def test_partitions_move_online_under_load_and_nothing_acknowledged_is_lost(
    tmp_path: Path, make_core: Callable[..., Memesh]
) -> None:
    core = await started(make_core, tmp_path)
    world = await populate(core)

    load, began, ended = await resize_under_load(core, GROWN)
    spec = core.directory.spec
    assert (spec.scene_shards, spec.beacon_sets, spec.inbox_shards, spec.epoch) == (5, 3, 4, 1)
    moved = {m.kind: m.partitions for m in core.partitions.moves}
    assert moved == {
        "scene_shard": VIRTUAL_PARTITIONS - 820 - 819,
        "beacon_set": VIRTUAL_PARTITIONS - 1366 - 1365,
        "inbox_shard": 2048,
    }
    during = [(s, a) for s, a in load.answered if s < ended and a > began]
    assert during, "no request overlapped the resize"
    assert not load.failures, load.failures[:3]  # held requests waited and were answered, none refused
    assert len(load.acked) > 10
    await check(core, world)
    reader, _ = await agent(core, "tenant-load", "Reader")
    for cell_id, content in load.acked.items():  # every write acknowledged before, during and after the move
        found = await core.memory.recall(reader, content, None, 3, NodeFilter())
        assert cell_id in [c.id for c in found], f"{content!r} lost in the online resize"
    rows = await core.directory.audit_log().rows(0, 10_000)
    (resized,) = [r for r in rows if r.kind == AuditKind.PARTITIONS_RESIZED]
    assert '"scene_shard":[2,5,2457,' in resized.detail.replace(" ", "")

    load, _, _ = await resize_under_load(core, {"scene_shard": 2, "beacon_set": 2, "inbox_shard": 2})
    assert not load.failures and core.directory.spec.epoch == 2
    await check(core, world)
    await core.close()
    await assert_every_row_at_its_owner(tmp_path / "data")

    again = await started(make_core, tmp_path)  # a start with the counts in force moves nothing, finds everything
    assert again.partitions.moves == () and again.directory.spec.epoch == 2
    await check(again, world)
    await again.close()


async def test_what_may_not_run_beside_a_resize_is_refused(tmp_path: Path, make_core: Callable[..., Memesh]) -> None:
    core = await started(make_core, tmp_path)
    writer, _ = await agent(core, "tenant-0", "Writer")
    project_admin, _ = await agent(core, "tenant-0", "ProjectAdmin")
    with pytest.raises(Forbidden):
        await core.resizer.resize(project_admin, GROWN)
    with pytest.raises(Forbidden):
        await core.resizer.resize(writer, GROWN)
    for bad in ({"scene_shard": 0}, {"scene_shard": 5000}, {"scene_shards": 3}):
        with pytest.raises(ValidationFailed):
            await core.resizer.resize(ADMIN, bad)
    assert (await core.resizer.resize(ADMIN, {"scene_shard": 2})).moves == ()  # already so: nothing moves

    await core.directory.audit_log().begin_exclusive("reembed", "job-1", 60)  # a reembed runs at some head
    with pytest.raises(Conflict, match="reembed"):
        await core.resizer.resize(ADMIN, GROWN)
    await core.directory.audit_log().end_exclusive("job-1")
    assert core.directory.spec.scene_shards == 2 and not core.directory.gate.held

    await core.directory.audit_log().begin_exclusive("resize", "another-head", 60)  # a resize runs elsewhere
    with pytest.raises(Conflict):
        await core.reembed.start(ADMIN)
    await core.directory.audit_log().end_exclusive("another-head")

    detached = PartitionResizer(core.directory, core.heads.publish, None, 384)  # a head that cannot start actors
    with pytest.raises(ValidationFailed):
        await detached.resize(ADMIN, GROWN)
    await core.close()


async def test_a_head_held_by_a_mover_that_died_follows_the_manifest_after_hold_max(
    tmp_path: Path, make_core: Callable[..., Memesh]
) -> None:
    core = await started(make_core, tmp_path)
    core.resizer.hold_max_s = 0.5
    assert await core.resizer.on_roster([HOLD, "agent-1"]) == ["agent-1"]  # a credential change still goes through
    assert core.directory.gate.held  # another head began a move: this one holds
    for _ in range(600):  # ... and never heard "moved": past hold_max_s it follows (bounded: 30 s)
        if not core.directory.gate.held:
            break
        await asyncio.sleep(0.05)
    assert not core.directory.gate.held
    assert await core.resizer.on_roster([HOLD]) == [] and core.directory.gate.held
    await core.resizer.on_roster([MOVED])  # the usual end: follow and release at once
    assert not core.directory.gate.held
    await core.close()


async def test_the_console_shows_the_layout_and_moves_partitions(tmp_path: Path, make_core: Callable[..., Memesh]) -> None:
    core = await started(make_core, tmp_path)
    app = create_app(core, console=CONFIG)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test") as http:
        console = ConsoleHarness(core, app.state.console, app, http)
        project_admin = await console.session_for("pam")
        assert_error(await console.send("GET", "/admin/api/partitions", project_admin), 403, "forbidden")
        viewer = await console.session_for("sam", tenant="system", role="ServiceAdmin")
        shown = (await console.send("GET", "/admin/api/partitions", viewer)).json()
        assert shown == {
            "scene_shards": 2,
            "beacon_sets": 2,
            "inbox_shards": 2,
            "epoch": 0,
            "virtual_partitions": 4096,
            "moves": [],
        }
        for bad in ({"scene_shards": 0}, {"scene_shards": "3"}, {"shards": 3}):
            refused = await console.send("POST", "/admin/api/partitions/resize", viewer, json=bad)
            assert refused.status_code in (400, 422) and refused.json()["error"]["code"] == "validation", refused.text
        moved = await console.send("POST", "/admin/api/partitions/resize", viewer, json={"scene_shards": 3})
        assert moved.status_code == 200, moved.text
        assert moved.json()["epoch"] == 1 and moved.json()["scene_shards"] == 3
        assert [(m["kind"], m["count_from"], m["count_to"]) for m in moved.json()["moves"]] == [("scene_shard", 2, 3)]
        again = (await console.send("GET", "/admin/api/partitions", viewer)).json()
        assert again["scene_shards"] == 3 and again["moves"] == moved.json()["moves"]
    await core.close()

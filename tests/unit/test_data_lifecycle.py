"""Node delete, erase with signed certificates, and reembed, in-process over real LanceDB (hash engine)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import lancedb
import numpy as np
import pytest

from cluster.compose import start_core
from head.embedding import Embedder, HashEngine, Matrix
from head.erasure_signing import KEY_FILE, verify_receipt
from head.facade import Memesh
from mesh.erasure import DeleteReason, EraseScope, ScopeKind, parse_scope
from mesh.errors import Conflict, Forbidden, NotFound, StorageUnavailable, ValidationFailed
from mesh.identity import Principal, Role
from mesh.model import CellType, NewCell
from mesh.query import NodeFilter
from mesh.seam import beacon_set_index
from tests.unit.conftest import ADMIN, in_process_settings
from tests.unit.test_propagation import agent, drain, settle, write

T1_ADMIN = Principal("00000000-0000-7000-8000-0000000000a1", "t1", frozenset({Role.PROJECT_ADMIN}))
T2_ADMIN = Principal("00000000-0000-7000-8000-0000000000a2", "t2", frozenset({Role.PROJECT_ADMIN}))


async def audit_kinds(core: Memesh) -> list[tuple[str, str, str]]:
    rows = await core.directory.audit_log().rows(0, 1000)
    return [(r.kind, r.outcome, r.target) for r in rows]


async def contents(core: Memesh, who: Principal, text: str = "deploy helm chart") -> set[str]:
    return {c.content for c in await core.memory.query(who, text, None, 50, NodeFilter())}


async def test_erase_removes_a_project_everywhere_and_certifies_it(core: Memesh, tmp_path: object) -> None:
    reader, _ = await agent(core, "t1", "Reader")
    writer, _ = await agent(core, "t1")
    other, _ = await agent(core, "t2")
    await core.inbox.place_beacon(reader, "deploy helm chart kubernetes")
    await core.memory.open_session(writer, "alpha")
    await write(core, writer, "deploy helm chart kubernetes alpha", project_id="alpha", salience=0.9)
    await write(core, writer, "deploy helm chart kubernetes beta", project_id="beta", salience=0.9)
    await write(core, other, "deploy helm chart kubernetes alpha in t2", project_id="alpha")
    before = await drain(core, reader)
    assert {i["diff"]["content"] for i in before["items"]} >= {"deploy helm chart kubernetes alpha"}

    scope = parse_scope("project", "alpha", None)
    dry = await core.data.erase(T1_ADMIN, scope, "project:alpha", dry_run=True)
    assert dry.digest is None
    assert dry.counts.nodes_removed == 2 and dry.counts.diffs_removed == 1  # the cell and its scene
    assert dry.counts.deliveries_removed >= 1 and dry.counts.sessions_removed == 1
    assert "deploy helm chart kubernetes alpha" in await contents(core, writer)  # a dry run deletes nothing

    cert = await core.data.erase(T1_ADMIN, scope, "project:alpha", dry_run=False)
    assert cert.counts.nodes_removed == dry.counts.nodes_removed
    assert cert.counts.deliveries_removed == dry.counts.deliveries_removed
    assert cert.counts.tombstones_propagated == dry.counts.tombstones_propagated > 0  # the owners it reached
    assert await contents(core, writer) == {"deploy helm chart kubernetes beta"}
    assert await contents(core, other) == {"deploy helm chart kubernetes alpha in t2"}  # another tenant's alpha stays
    after = await drain(core, reader, since=0)
    assert all(i["diff"]["provenance"]["project_id"] != "alpha" for i in after["items"])
    assert len(after["items"]) == len(before["items"]) - cert.counts.deliveries_removed

    claims = verify_receipt(cert.digest or "", core.data.public_keys)
    assert claims["label"] == "project:alpha" and claims["scope"]["tenant_id"] == "t1"
    assert claims["counts"] == cert.counts.as_dict()
    with pytest.raises(ValidationFailed):
        verify_receipt((cert.digest or "")[:-4] + "AAAA", core.data.public_keys)
    assert ("Erased", "ok", "project:alpha") in await audit_kinds(core)

    # The rows are gone from storage, older table versions included.
    uri = core.directory.scene_shard(0).target.config.storage.uri  # type: ignore[attr-defined]
    db = lancedb.connect(uri)
    for name in db.list_tables().tables:
        if name.endswith("_cells"):
            table = db.open_table(name)
            assert all(r["project_id"] != "alpha" or r["tenant_id"] != "t1" for r in table.to_arrow().to_pylist())
            for version in table.list_versions():
                table.checkout(version["version"])
                assert all(r["content"] != "deploy helm chart kubernetes alpha" for r in table.to_arrow().to_pylist())

    again = await core.data.erase(T1_ADMIN, scope, "project:alpha", dry_run=False)  # idempotent
    assert again.counts.nodes_removed == 0 and again.counts.deliveries_removed == 0


async def test_erase_refuses_a_wrong_confirm_and_other_tenants(core: Memesh) -> None:
    writer, _ = await agent(core, "t1")
    cell = await write(core, writer, "keep me", project_id="alpha")
    with pytest.raises(ValidationFailed, match="project:alpha"):
        await core.data.erase(T1_ADMIN, parse_scope("project", "alpha", None), "alpha", dry_run=False)
    with pytest.raises(Forbidden):
        await core.data.erase(T2_ADMIN, parse_scope("project", "alpha", "t1"), "project:alpha", dry_run=False)
    with pytest.raises(Forbidden):
        await core.data.erase(T2_ADMIN, parse_scope("node", cell, None), f"node:{cell}", dry_run=True)
    with pytest.raises(Forbidden):  # agent scope: ServiceAdmin only
        await core.data.erase(T1_ADMIN, parse_scope("agent", writer.agent_id, None), f"agent:{writer.agent_id}", dry_run=True)
    with pytest.raises(Forbidden):
        await core.data.erase(writer, parse_scope("project", "alpha", None), "project:alpha", dry_run=True)
    assert await contents(core, writer, "keep me") == {"keep me"}
    kinds = await audit_kinds(core)
    assert ("Denied", "denied", "project:alpha") in kinds
    assert [k for k in kinds if k[0] == "AuthzDenied"] == [
        ("AuthzDenied", "denied", "project:alpha"),
        ("AuthzDenied", "denied", f"node:{cell}"),
        ("AuthzDenied", "denied", f"agent:{writer.agent_id}"),
    ]
    with pytest.raises(ValidationFailed):
        parse_scope("node", "not-a-uuid", None)
    with pytest.raises(ValidationFailed):
        parse_scope("planet", "x", None)
    for tenant in ("t\x00", "t\x1f", "t\u202e", "", "t" * 129):  # a tenant that cannot exist: no certificate for it
        with pytest.raises(ValidationFailed, match=r"scope\.tenant_id"):
            parse_scope("project", "alpha", tenant)
    assert parse_scope("project", "alpha", "t1 émoji 🦜").tenant_id == "t1 émoji 🦜"


async def test_erase_an_agent_removes_its_writes_inbox_beacons_and_sessions(core: Memesh) -> None:
    writer, _ = await agent(core, "t1")
    listener, _ = await agent(core, "t1")
    await core.inbox.place_beacon(listener, "terraform state locking")
    await core.inbox.place_beacon(writer, "terraform state locking")
    await core.memory.open_session(writer, "infra")
    await write(core, writer, "terraform state locking with dynamodb", project_id="infra", salience=0.9)
    await write(core, listener, "terraform state locking broke today", project_id="infra", salience=0.9)
    assert (await drain(core, writer))["items"]  # the writer has deliveries of its own
    scope = EraseScope(ScopeKind.AGENT, writer.agent_id)
    cert = await core.data.erase(ADMIN, scope, scope.label, dry_run=False)
    assert cert.counts.nodes_removed >= 3  # its cell, its beacon, its agent node
    assert cert.counts.sessions_removed == 1
    assert (await drain(core, writer, since=0))["items"] == []
    assert all(
        i["diff"]["provenance"]["origin_agent"] != writer.agent_id for i in (await drain(core, listener, since=0))["items"]
    )
    assert await contents(core, listener, "terraform state locking") == {"terraform state locking broke today"}
    beacons = core.directory.beacon_set(beacon_set_index(core.directory, writer.agent_id))
    assert await beacons.list_for("t1", writer.agent_id, datetime.now(UTC)) == []
    assert len(await beacons.list_for("t1", listener.agent_id, datetime.now(UTC))) <= 1


async def test_node_delete_tombstones_once_and_respects_tenants(core: Memesh) -> None:
    writer, _ = await agent(core, "t1")
    listener, _ = await agent(core, "t1")
    cell = await write(core, writer, "obsolete runbook step")
    beacon = await core.inbox.place_beacon(listener, "runbook")
    with pytest.raises(Forbidden):
        await core.data.delete_node(T2_ADMIN, cell, DeleteReason.USER_DELETE)
    assert await contents(core, writer, "obsolete runbook step") == {"obsolete runbook step"}
    await core.data.delete_node(T1_ADMIN, cell, DeleteReason.RETENTION)
    assert await contents(core, writer, "obsolete runbook step") == set()
    await core.data.delete_node(T1_ADMIN, cell, DeleteReason.RETENTION)  # a second delete is a no-op
    await core.data.delete_node(ADMIN, beacon.id, DeleteReason.USER_DELETE)
    with pytest.raises(NotFound):
        await core.data.delete_node(ADMIN, "00000000-0000-7000-8000-00000000ffff", DeleteReason.USER_DELETE)
    kinds = await audit_kinds(core)
    assert [k for k in kinds if k[0] == "NodeDeleted"] == [
        ("NodeDeleted", "ok", cell),
        ("NodeDeleted", "ok", cell),
        ("NodeDeleted", "ok", beacon.id),
    ]
    assert ("AuthzDenied", "denied", cell) in kinds


class _ShiftedHash(HashEngine):
    """A second engine of the same width (test-only: a real second model would cost a download);
    its vectors differ from ``hash-384``'s, so a switch is observable."""

    def __init__(self) -> None:
        super().__init__(384)
        self.name = "shifted-hash-384"

    def encode(self, texts: list[str]) -> Matrix:
        return super().encode([f"{t} shifted" for t in texts])


async def test_reembed_switches_every_vector_at_once(make_core: Callable[..., Memesh]) -> None:
    core = make_core()
    target = _ShiftedHash()
    core.reembed._target = lambda: target  # what compose passes: the configured engine
    writer, _ = await agent(core, "t1")
    for n in range(40):
        await write(core, writer, f"fact number {n} about helm charts", project_id="p")
    await core.inbox.place_beacon(writer, "helm charts")
    await settle(core)
    searched = (await core.health())["scene_searches_run"]
    with pytest.raises(Forbidden):
        await core.reembed.start(T1_ADMIN)
    job = await core.reembed.start(ADMIN)
    assert job.status == "running"
    with pytest.raises(Conflict):
        await core.reembed.start(ADMIN)
    answers = await asyncio.gather(*(contents(core, writer, "fact number 3 about helm charts") for _ in range(5)))
    assert all("fact number 3 about helm charts" in a for a in answers)  # recall keeps answering while it runs
    await core.reembed.wait(60)
    done = core.reembed.job(ADMIN, job.job_id)
    assert done.status == "succeeded" and done.nodes_processed == done.nodes_total >= 41
    assert core.embedder.name == "shifted-hash-384"
    assert (await core.health())["scene_searches_run"] >= searched > 0  # a rebuilt partition's counters go on
    (best,) = await core.memory.query(writer, "fact number 3 about helm charts", None, 1, NodeFilter())
    assert best.content == "fact number 3 about helm charts" and best.engine == "shifted-hash-384"
    assert np.allclose(best.embedding, target.encode([best.content])[0], atol=1e-6)
    with pytest.raises(NotFound):
        core.reembed.job(ADMIN, "00000000-0000-7000-8000-00000000ffff")
    with pytest.raises(NotFound):  # a job spans every tenant: a ProjectAdmin does not see it
        core.reembed.job(T1_ADMIN, job.job_id)
    kinds = [k[0] for k in await audit_kinds(core)]
    assert "ReembedStarted" in kinds and "ReembedFinished" in kinds
    wanted = {"scene_shards": 2, "beacon_sets": 2, "inbox_shards": 2, "embedding_engine": "hash-384", "dims": 384}
    assert await core.directory.registry().claim_deployment(wanted) == "shifted-hash-384"  # the manifest moved
    await core.close()


async def test_erasing_a_member_erases_its_pattern_and_revives_the_rest(core: Memesh) -> None:
    writer, _ = await agent(core, "t1")
    other, _ = await agent(core, "t1")
    (first,) = await core.memory.write_cells(writer, [NewCell(content="restart the flaky build agent", cell_type=CellType.FACT)])
    await core.memory.write_cells(other, [NewCell(content="restart the flaky build agent", cell_type=CellType.FACT)])
    await settle(core)
    report = await core.memory.consolidate(writer, first.scene_id or "")
    (pattern,) = report.patterns
    assert await contents(core, writer, "restart the flaky build agent") == {"restart the flaky build agent"}  # the Pattern
    scope = EraseScope(ScopeKind.AGENT, writer.agent_id)
    cert = await core.data.erase(ADMIN, scope, scope.label, dry_run=False)
    assert cert.counts.nodes_removed >= 2  # the writer's cell and the Pattern quoting it
    hits = await core.memory.query(other, "restart the flaky build agent", None, 10, NodeFilter())
    assert [(c.source_agent, c.superseded_by) for c in hits] == [(other.agent_id, None)]  # the other member, live again
    assert pattern.id not in {c.id for c in hits}


async def test_a_switch_that_fails_leaves_the_corpus_on_one_engine(make_core: Callable[..., Memesh]) -> None:
    """The storage failure is injected (a beacon set's first-phase write raises, as a full disk would):
    the shards that already wrote new vectors rewrite the old ones, in memory and on disk."""
    core = make_core()
    core.reembed._target = lambda: _ShiftedHash()
    writer, _ = await agent(core, "t1")
    for n in range(10):
        await write(core, writer, f"incident {n} in the payments queue", project_id="p")

    async def full_disk(*_: object) -> None:
        raise StorageUnavailable("storage failed during upsert into beacon_set_0_beacons")

    core.directory.beacon_set(0).target.persist_staged = full_disk  # type: ignore[attr-defined]
    job = await core.reembed.start(ADMIN)
    await core.reembed.wait(60)
    assert core.reembed.job(ADMIN, job.job_id).status == "failed"
    assert core.embedder.name == "hash-384"
    hits = await core.memory.query(writer, "incident 3 in the payments queue", None, 10, NodeFilter())
    assert hits[0].content == "incident 3 in the payments queue" and {c.engine for c in hits} == {"hash-384"}
    await core.close()
    reopened = make_core()
    stored = await reopened.memory.query(writer, "incident 3 in the payments queue", None, 10, NodeFilter())
    assert {c.engine for c in stored} == {"hash-384"}  # the rows were rewritten with the old vectors
    assert np.allclose(stored[0].embedding, HashEngine(384).encode([stored[0].content])[0], atol=1e-6)
    await reopened.close()


async def test_receipts_keep_verifying_after_a_head_gets_a_new_key(make_core: Callable[..., Memesh], tmp_path: Path) -> None:
    settings = in_process_settings(tmp_path / "data")
    first = make_core()
    await start_core(first, settings)
    scope = parse_scope("project", "nothing-here", None)
    old = await first.data.erase(ADMIN, scope, scope.label, dry_run=False)
    await first.close()
    (tmp_path / "data" / KEY_FILE).unlink()  # a head started without the old key file makes a new key
    second = make_core()
    await start_core(second, settings)
    assert len(second.data.public_keys["keys"]) == 2
    new = await second.data.erase(ADMIN, scope, scope.label, dry_run=False)
    for cert in (old, new):
        assert verify_receipt(cert.digest or "", second.data.public_keys)["label"] == "project:nothing-here"
    await second.close()


class _RecordingHash(HashEngine):
    """The hash engine, recording what each encode call held and taking 20 ms per call (test-only:
    it makes the order of a busy single-threaded embedder observable)."""

    def __init__(self) -> None:
        super().__init__(384)
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> Matrix:
        self.calls.append(list(texts))
        time.sleep(0.02)
        return super().encode(texts)


async def test_background_embedding_yields_to_live_requests() -> None:
    engine = _RecordingHash()
    embedder = Embedder(engine)
    background = asyncio.create_task(embedder.embed_background([f"cell {n}" for n in range(10 * Embedder.BACKGROUND_CHUNK)]))
    await asyncio.sleep(0.01)  # the first chunk is encoding
    live = await embedder.embed(["a live query"])
    assert not background.done()  # the live request did not wait for the corpus
    vectors = await background
    assert vectors.shape == (10 * Embedder.BACKGROUND_CHUNK, 384) and live.shape == (1, 384)
    at = next(i for i, call in enumerate(engine.calls) if call == ["a live query"])
    assert at <= 2 and all(len(c) <= Embedder.BACKGROUND_CHUNK for c in engine.calls)
    assert np.allclose(vectors[5], HashEngine(384).encode(["cell 5"])[0])
    embedder.close()

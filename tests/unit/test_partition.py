"""Scenes, layers and consolidation in one partition (DESIGN.md section 6)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mesh import partition_index
from mesh.errors import Conflict, NotFound
from mesh.model import Cell, CellType, Layer, normalize
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter
from mesh.sharding import partition_key, shard_for
from mesh.tuning import SceneTuning
from tests.unit.helpers import T0, cell, direction, later, uid

DIMS = 16


def partition(**tuning: float) -> MemoryPartition:
    return MemoryPartition(DIMS, SceneTuning(**tuning))  # type: ignore[arg-type]


def test_close_cells_share_a_scene_and_far_cells_found_new_ones() -> None:
    p = partition(join_similarity=0.8)
    a = cell(direction(0, DIMS, 0.05, base=1))
    b = cell(direction(2, DIMS, 0.05, base=1))
    far = cell(direction(3, DIMS, 0.05, base=99))
    out = p.write([a, b, far], [uid("5"), uid("5"), uid("5")])
    assert len(out.founded) == 2
    assert a.scene_id == b.scene_id != far.scene_id
    scene = p.scene("t1", a.scene_id or "")
    assert scene.live_count == 2
    expected = (a.embedding + b.embedding) / np.linalg.norm(a.embedding + b.embedding)
    assert np.allclose(scene.centroid, expected, atol=1e-5)


@pytest.mark.parametrize("budget", [None, 4 * 20 * 3])  # the default bound, and one that holds 3 cells' scores
def test_a_batch_joins_scenes_as_its_cells_would_one_by_one(budget: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch scores its cells against their projects' scenes once; each cell must still see the scenes the
    cells before it founded and moved. Clusters of near cells over three projects, written in batches of 32
    and one by one: the same scenes (it fails when a scene changed within the batch is not scored again)."""
    if budget is not None:
        monkeypatch.setattr(partition_index, "JOIN_SCORES_BYTES", budget)
    rng = np.random.default_rng(3)
    centres = [direction(100 + c, DIMS) for c in range(12)]
    cells = [
        cell(normalize(centres[c] + 0.12 * rng.normal(size=DIMS)), project=f"p{c % 3}")
        for c in rng.integers(0, len(centres), size=240)
    ]
    scene_ids = [uid("5") for _ in cells]

    def scenes_of(batch: int) -> list[frozenset[int]]:
        p, founded = partition(join_similarity=0.8, max_members=12), 0
        copies = [replace(c, scene_id=None) for c in cells]
        for start in range(0, len(copies), batch):
            founded += len(p.write(copies[start : start + batch], scene_ids[founded:]).founded)
        members: dict[str, set[int]] = {}
        for i, c in enumerate(copies):
            members.setdefault(c.scene_id or "", set()).add(i)
        return sorted(map(frozenset, members.values()), key=min)

    batched, alone = scenes_of(32), scenes_of(1)
    assert batched == alone
    assert 12 < len(alone) < 200 and any(len(m) > 1 for m in alone)  # cells joined, and the full scenes spilled over


def test_a_batch_holds_join_scores_within_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    p = partition(join_similarity=0.99)
    p.write([cell(direction(200 + i, DIMS)) for i in range(30)], [uid("5") for _ in range(30)])
    batch = [cell(direction(300 + i, DIMS)) for i in range(10)]
    assert len(p.scene_index.joins(batch)) == 10
    monkeypatch.setattr(partition_index, "JOIN_SCORES_BYTES", 4 * 30 * 4)  # four cells' scores over 30 scenes
    assert len(p.scene_index.joins(batch)) == 4


def test_scenes_never_span_projects_or_tenants() -> None:
    p = partition(join_similarity=0.5)
    v = direction(1, DIMS)
    c1, c2, c3 = cell(v, project="p1"), cell(v, project="p2"), cell(v, tenant="t2")
    p.write([c1, c2, c3], [uid("5") for _ in range(3)])
    assert len({c1.scene_id, c2.scene_id, c3.scene_id}) == 3
    with pytest.raises(NotFound):
        p.scene("t1", c3.scene_id or "")


def test_write_is_idempotent_by_cell_id() -> None:
    p = partition()
    c = cell(direction(1, DIMS))
    first = p.write([c], [uid("5")])
    again = p.write([c], [uid("5")])
    assert again.created == [] and again.founded == []
    assert again.cells[0] is first.cells[0]
    assert p.scene("t1", c.scene_id or "").live_count == 1


def test_explicit_scene_must_exist_in_tenant_and_project() -> None:
    p = partition()
    c = cell(direction(1, DIMS))
    p.write([c], [uid("5")])
    joined = cell(direction(50, DIMS), scene_id=c.scene_id)
    p.write([joined], [uid("5")])
    assert joined.scene_id == c.scene_id
    with pytest.raises(NotFound):
        p.write([cell(direction(2, DIMS), tenant="t2", scene_id=c.scene_id)], [uid("5")])
    with pytest.raises(NotFound):  # another project's scene is as absent as a missing one (no existence oracle)
        p.write([cell(direction(2, DIMS), project="other", scene_id=c.scene_id)], [uid("5")])


def test_a_batch_that_overfills_a_named_scene_is_refused_whole() -> None:
    """A batch naming a scene more times than it has room for was refused with Conflict at the cell that found
    it full, but the cells before it stayed in memory: searchable and counted, never journaled nor committed
    (so gone after a restart). It is refused before anything changes."""
    p = partition(join_similarity=0.8, max_members=3)
    first = cell(direction(1, DIMS))
    p.write([first], [uid("5")])
    scene = first.scene_id or ""
    batch = [cell(direction(n, DIMS, 0.05, base=1), scene_id=scene) for n in (20, 21, 22)]
    with pytest.raises(Conflict):
        p.write(batch, [uid("5") for _ in batch])
    assert list(p.cells) == [first.id]
    assert p.scene("t1", scene).members == [first.id] and p.scene("t1", scene).live_count == 1
    assert [c.id for c, _ in p.search("t1", direction(1, DIMS), 10, NodeFilter())] == [first.id]
    assert p.usage("t1")[0] == 1
    fits = batch[:2]
    p.write(fits, [uid("5") for _ in fits])  # room for two: they join it
    assert p.scene("t1", scene).members == [first.id, *(c.id for c in fits)]


def test_a_cell_joining_on_its_own_leaves_the_places_a_batch_named() -> None:
    """A near cell with no scene named would join the scene whose last place a later cell of its batch names;
    it founds another instead, so the named cell is stored and the batch is not refused half-way."""
    p = partition(join_similarity=0.8, max_members=2)
    first = cell(direction(1, DIMS))
    p.write([first], [uid("5")])
    scene = first.scene_id or ""
    near = cell(direction(30, DIMS, 0.02, base=1))
    named = cell(direction(31, DIMS, 0.02, base=1), scene_id=scene)
    out = p.write([near, named], [uid("5"), uid("5")])
    assert named.scene_id == scene and near.scene_id != scene and len(out.founded) == 1
    assert p.scene("t1", scene).members == [first.id, named.id]


def test_a_write_that_fails_half_way_leaves_no_cell_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails after the checks (here the second cell's insert), the cells stored so far are taken out."""
    p = partition(join_similarity=0.8)
    first = cell(direction(1, DIMS))
    p.write([first], [uid("5")])
    real, calls = p._insert, 0

    def failing(c: Cell) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("injected")
        real(c)

    monkeypatch.setattr(p, "_insert", failing)
    batch = [cell(direction(n, DIMS, 0.05, base=b)) for n, b in ((40, 1), (41, 99))]
    with pytest.raises(RuntimeError):
        p.write(batch, [uid("5") for _ in batch])
    assert list(p.cells) == [first.id] and p.usage("t1")[0] == 1
    assert [c.id for c, _ in p.search("t1", direction(1, DIMS), 10, NodeFilter())] == [first.id]
    assert len(p.scenes) == 1 and p.scene("t1", first.scene_id or "").members == [first.id]


def test_search_is_tenant_confined_and_filters_apply() -> None:
    p = partition(join_similarity=0.99)
    q = direction(1, DIMS)
    mine = cell(q, cell_type=CellType.RISK, agent="agent-a")
    other_type = cell(direction(2, DIMS, 0.1, base=1), cell_type=CellType.FACT, agent="agent-b")
    decision = cell(direction(3, DIMS, 0.1, base=1), cell_type=CellType.DECISION)
    theirs = cell(q, tenant="t2")
    p.write([mine, other_type, decision, theirs], [uid("5") for _ in range(4)])
    ids = [c.id for c, _ in p.search("t1", q, 10, NodeFilter())]
    assert theirs.id not in ids and ids[0] == mine.id and len(ids) == 3
    assert [c.id for c, _ in p.search("t1", q, 10, NodeFilter(cell_types=frozenset({CellType.FACT})))] == [other_type.id]
    assert [c.id for c, _ in p.search("t1", q, 10, NodeFilter(source_agent="agent-b"))] == [other_type.id]
    assert [c.id for c, _ in p.search("t1", q, 10, NodeFilter(layer=Layer.L2))] == [decision.id]
    assert [c.id for c, _ in p.search("t1", q, 10, NodeFilter(scene_id=mine.scene_id))] == [mine.id]
    assert p.search("t1", q, 10, NodeFilter(tenant_id="t2")) == []
    assert p.search("t1", q, 10, NodeFilter(source_agent="nobody")) == []
    assert p.search("t1", q, 10, NodeFilter(project_ids=frozenset({"elsewhere"}))) == []


def test_consolidation_abstracts_near_duplicates_into_an_l1_pattern() -> None:
    p = partition(join_similarity=0.5, duplicate_similarity=0.95)
    dup1 = cell(direction(10, DIMS, 0.02, base=7), salience=0.3, content="deploy with helm")
    dup2 = cell(direction(11, DIMS, 0.02, base=7), salience=0.9, content="we deploy with helm charts")
    loner = cell(direction(12, DIMS, 0.2, base=7), content="something else in the scene")
    constraint = cell(direction(13, DIMS, 0.01, base=7), cell_type=CellType.CONSTRAINT)
    p.write([dup1, dup2, loner, constraint], [uid("5") for _ in range(4)])
    assert len({dup1.scene_id, dup2.scene_id, loner.scene_id, constraint.scene_id}) == 1
    scene_id = dup1.scene_id or ""
    outcome = p.consolidate("t1", scene_id, lambda: uid("9"), "agent-c", later(60))
    (pattern,) = outcome.patterns
    assert pattern.layer is Layer.L1 and pattern.cell_type is CellType.PATTERN
    assert pattern.salience == pytest.approx(0.9)
    assert pattern.scene_id == scene_id and pattern.source_agent == "agent-c"
    assert {c.id for c in outcome.superseded} == {dup1.id, dup2.id}
    assert dup1.superseded_by == dup2.superseded_by == pattern.id
    assert constraint.superseded_by is None  # only L0 cells are abstracted
    hits = [c.id for c, _ in p.search("t1", dup1.embedding, 10, NodeFilter())]
    assert dup1.id not in hits and dup2.id not in hits and pattern.id in hits
    with_old = [c.id for c, _ in p.search("t1", dup1.embedding, 10, NodeFilter(include_superseded=True))]
    assert dup1.id in with_old
    assert outcome.scene.live_count == 3
    again = p.consolidate("t1", scene_id, lambda: uid("9"), "agent-c", later(120))
    assert again.patterns == []


def test_summary_quotes_the_most_central_salient_members() -> None:
    p = partition(join_similarity=0.3, summary_members=2)
    central = cell(direction(1, DIMS, 0.01, base=3), salience=1.0, content="the   central\nidea")
    side = cell(direction(2, DIMS, 0.4, base=3), salience=0.1, content="a side remark")
    p.write([central, side], [uid("5"), uid("5")])
    summary = p.scene("t1", central.scene_id or "").summary
    assert summary.startswith("the central idea")
    assert "a side remark" in summary


def test_list_scenes_pages_by_id() -> None:
    p = partition(join_similarity=0.999)
    cells = [cell(direction(i, DIMS)) for i in range(5)]
    p.write(cells, [uid("5") for _ in range(5)])
    first = p.list_scenes("t1", None, None, 2)
    second = p.list_scenes("t1", None, first[-1].id, 10)
    ids = [s.id for s in first + second]
    assert ids == sorted(ids) and len(ids) == 5
    assert p.list_scenes("t2", None, None, 10) == []
    assert p.list_scenes("t1", "p-other", None, 10) == []


def test_reload_rebuilds_the_same_state() -> None:
    p = partition(join_similarity=0.5)
    cells = [cell(direction(i, DIMS, 0.05, base=1)) for i in range(4)]
    p.write(cells, [uid("5") for _ in range(4)])
    p.consolidate("t1", cells[0].scene_id or "", lambda: uid("9"), "a", T0)
    copy = partition(join_similarity=0.5)
    copy.load(list(p.scenes.values()), list(p.cells.values()))
    for scene_id, scene in p.scenes.items():
        assert np.allclose(copy.scene("t1", scene_id).centroid, scene.centroid, atol=1e-5)
    q = cells[0].embedding
    assert [c.id for c, _ in copy.search("t1", q, 5, NodeFilter())] == [c.id for c, _ in p.search("t1", q, 5, NodeFilter())]


def test_shard_mapping_is_stable_and_spreads() -> None:
    keys = [partition_key("t", f"p{i}") for i in range(200)]
    shards = [shard_for(k, 4) for k in keys]
    assert shards == [shard_for(k, 4) for k in keys]
    assert set(shards) == {0, 1, 2, 3}


def test_rollback_undoes_a_write_whose_commit_failed() -> None:
    p = partition(join_similarity=0.8)
    kept = cell(direction(1, DIMS, 0.01, base=5))
    p.write([kept], [uid("5")])
    before = p.scene("t1", kept.scene_id or "").centroid.copy()
    joiner = cell(direction(2, DIMS, 0.01, base=5))
    founder = cell(direction(3, DIMS, 0.01, base=77))
    outcome = p.write([joiner, founder], [uid("5"), uid("5")])
    assert len(outcome.founded) == 1
    p.rollback(outcome)
    assert joiner.id not in p.cells and founder.id not in p.cells
    assert founder.scene_id not in p.scenes
    assert [c.id for c, _ in p.search("t1", joiner.embedding, 10, NodeFilter())] == [kept.id]
    assert np.allclose(p.scene("t1", kept.scene_id or "").centroid, before, atol=1e-6)
    assert [s.id for s in p.list_scenes("t1", None, None, 10)] == [kept.scene_id]

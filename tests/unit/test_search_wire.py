"""Search answers pickled as columns (mesh.search_wire): what the head loads is what the shard answered."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace

import numpy as np

from mesh.errors import Forbidden, MemeshError
from mesh.model import Cell, CellType, Layer
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter, SearchAnswer, SearchRequest
from mesh.search_wire import SearchAnswers
from mesh.tuning import SceneTuning
from tests.unit.helpers import cell, direction, later, uid

DIMS = 16


def same(a: Cell, b: Cell) -> bool:
    for f in fields(Cell):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "embedding":
            if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y) or y.flags.writeable:
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def round_trip(answers: SearchAnswers) -> list[SearchAnswer | MemeshError]:
    loaded = pickle.loads(pickle.dumps(answers, protocol=5))
    assert type(loaded) is list and len(loaded) == len(answers)
    return loaded


def assert_same(sent: SearchAnswers, loaded: list[SearchAnswer | MemeshError]) -> None:
    for before, after in zip(sent, loaded, strict=True):
        if isinstance(before, MemeshError):
            assert type(after) is type(before) and str(after) == str(before)
            continue
        assert not isinstance(after, MemeshError)
        (dense_a, lexical_a), (dense_b, lexical_b) = before, after
        assert [s for _, s in dense_a] == [s for _, s in dense_b]
        assert [(b, s) for _, b, s in lexical_a] == [(b, s) for _, b, s in lexical_b]
        assert all(same(x, y) for (x, _), (y, _) in zip(dense_a, dense_b, strict=True))
        assert all(same(x, y) for (x, _, _), (y, _, _) in zip(lexical_a, lexical_b, strict=True))


def test_a_batch_arrives_whole_with_refusals_in_place_and_shared_cells_once() -> None:
    rich = replace(
        cell(direction(1, DIMS), cell_type=CellType.DECISION, layer=Layer.L2, scene_id=uid("5"), at=later(5)),
        session_id=uid("6"),
        superseded_by=uid("7"),
        tombstone=True,
        last_accessed=later(9),
    )
    a, b = cell(direction(2, DIMS), content="zebra"), cell(direction(3, DIMS), salience=0.25)
    sent = SearchAnswers(
        [
            ([(a, 0.9), (rich, 0.5)], [(b, 3.5, 0.1), (a, 1.25, 0.9)]),
            Forbidden("the project is outside this agent's scope"),
            ([], []),
            ([(b, 0.3)], []),
        ]
    )
    loaded = round_trip(sent)
    assert_same(sent, loaded)
    first, _, _, last = loaded
    assert not isinstance(first, MemeshError) and not isinstance(last, MemeshError)
    assert first[0][0][0] is first[1][1][0]  # a once in the batch, in both lists of one answer
    assert first[1][0][0] is last[0][0][0]  # b across answers


def test_vectors_of_another_dtype_travel_one_cell_at_a_time_unchanged() -> None:
    model = cell(direction(1, DIMS).astype(np.float32))
    client = cell(direction(2, DIMS).astype(np.float64))  # a client's vector, normalised in float64
    sent = SearchAnswers([([(model, 0.8), (client, 0.7)], [])])
    loaded = round_trip(sent)
    assert_same(sent, loaded)
    assert not isinstance(loaded[0], MemeshError)
    assert loaded[0][0][1][0].embedding.dtype == np.float64


def test_a_partitions_answers_pickled_equal_its_answers() -> None:
    p = MemoryPartition(DIMS, SceneTuning())
    texts = ["budget zebra plan", "plan b", "zebra crossing", "quarterly budget", "nothing in common"]
    cells = [cell(direction(i, DIMS).astype(np.float32), content=t) for i, t in enumerate(texts)]
    p.write(cells, [uid("5") for _ in cells])
    requests = [
        SearchRequest("t1", direction(9, DIMS), 3, NodeFilter(), ("budget", "zebra")),
        SearchRequest("t1", direction(8, DIMS), 10, NodeFilter()),
        SearchRequest("t2", direction(7, DIMS), 3, NodeFilter(), ("plan",)),  # another tenant: nothing
    ]
    sent = SearchAnswers.of(requests, p.answer)
    assert len(sent) == 3 and sent[0][1]  # the hybrid request found lexical candidates
    assert_same(sent, round_trip(sent))
    assert pickle.loads(pickle.dumps(SearchAnswers(), protocol=5)) == []

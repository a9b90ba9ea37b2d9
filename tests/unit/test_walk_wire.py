"""A wave's requests and answers travel packed (``mesh.walk_wire``) and arrive as the objects that were sent."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh.neighbours import neighbour_scene_parts, neighbour_scenes
from mesh.partition import MemoryPartition
from mesh.tuning import SceneTuning
from mesh.walk import Candidate, EnergyPolicy, FrontierNode, NeighbourRequest, NodeKind, WalkState
from mesh.walk_wire import PackedAnswers, WaveAnswers, WaveRequests
from tests.unit.helpers import cell, direction, uid

DIMS = 8


def vector(seed: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIMS).astype(dtype)


def same_candidate(a: Candidate, b: Candidate) -> bool:
    plain = ("node_id", "kind", "similarity", "relevance", "agent_id", "standing")
    if any(getattr(a, f) != getattr(b, f) for f in plain):
        return False
    if a.vector is None or b.vector is None:
        return a.vector is None and b.vector is None
    return a.vector.dtype == b.vector.dtype and np.array_equal(a.vector, b.vector)


def test_answers_arrive_whole_with_empty_lists_missing_vectors_and_order_kept() -> None:
    sent = WaveAnswers(
        [
            {
                "s1": [
                    Candidate("s2", NodeKind.SCENE, 0.9, 0.4, None, vector(1)),
                    Candidate("b1", NodeKind.BEACON, 0.7, 0.6, "alice", None, 1.5),
                    Candidate("s3", NodeKind.SCENE, 0.6, -0.1, None, vector(2)),
                ],
                "s9": [],  # asked, found nothing: the walk must learn that too
            },
            {},
            {"s4": [Candidate("a1", NodeKind.AGENT, 0.5, 0.5, "bob", None, None)]},
        ]
    )
    got = pickle.loads(pickle.dumps(sent))
    assert type(got) is WaveAnswers and len(got) == 3
    assert [list(a) for a in got] == [["s1", "s9"], [], ["s4"]]
    for a, b in zip(sent, got, strict=True):
        for frontier in a:
            assert len(a[frontier]) == len(b[frontier])
            assert all(same_candidate(x, y) for x, y in zip(a[frontier], b[frontier], strict=True))
    assert pickle.loads(pickle.dumps(WaveAnswers())) == []


def test_requests_arrive_whole_with_their_frontier_and_diff_vectors() -> None:
    sent = WaveRequests(
        [
            NeighbourRequest("t1", [("s1", vector(1)), ("s2", vector(2))], vector(3), 4, "alice", 8, True),
            NeighbourRequest("t2", [], vector(4), 2, None),
            NeighbourRequest("t1", [("s5", vector(5))], vector(6), 3, None, 2, False, 0.25, keep=False),
        ]
    )
    got = pickle.loads(pickle.dumps(sent))
    assert type(got) is WaveRequests and len(got) == 3
    for a, b in zip(sent, got, strict=True):
        fields = ("tenant_id", "k", "exclude_agent", "leaf_k", "observe", "centroid_floor", "keep")
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert [q for q, _ in a.queries] == [q for q, _ in b.queries]
        assert all(np.array_equal(x, y) and y.dtype == np.float32 for (_, x), (_, y) in zip(a.queries, b.queries, strict=True))
        assert np.array_equal(a.diff_vector, b.diff_vector)


candidates = st.builds(
    Candidate,
    st.text(min_size=1, max_size=6),
    st.sampled_from(list(NodeKind)),
    st.floats(-1, 1),
    st.floats(-1, 1),
    st.none() | st.text(max_size=4),
    st.none() | st.integers(0, 1000).map(vector),
    st.none() | st.floats(-5, 5),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=4), st.lists(candidates, max_size=4), max_size=3), max_size=4))
def test_any_answer_round_trips(answers: list[dict[str, list[Candidate]]]) -> None:
    got = pickle.loads(pickle.dumps(WaveAnswers(answers)))
    assert [list(a) for a in got] == [list(a) for a in answers]
    for a, b in zip(answers, got, strict=True):
        for frontier in a:
            assert len(a[frontier]) == len(b[frontier])
            assert all(same_candidate(x, y) for x, y in zip(a[frontier], b[frontier], strict=True))


def test_vectors_of_another_dtype_or_shape_travel_unchanged() -> None:
    """One matrix would cast a float64 vector's neighbours (or refuse another width): such a message goes as
    plain objects, and every vector keeps its own dtype and values."""
    requests = WaveRequests(
        [
            NeighbourRequest("t1", [("s1", vector(1))], vector(2), 4, None),
            NeighbourRequest("t1", [("s2", vector(3, np.float64))], vector(4, np.float64), 4, None),
        ]
    )
    got = pickle.loads(pickle.dumps(requests))
    assert [r.diff_vector.dtype for r in got] == [np.float32, np.float64]
    assert all(np.array_equal(a.diff_vector, b.diff_vector) for a, b in zip(requests, got, strict=True))
    answers = WaveAnswers([{"s1": [Candidate("s2", NodeKind.SCENE, 0.9, 0.4, None, np.ones(3, dtype=np.float32))]}, {}])
    answers[1]["s5"] = [Candidate("s6", NodeKind.SCENE, 0.8, 0.2, None, vector(5))]  # another width
    back = pickle.loads(pickle.dumps(answers))
    assert type(back) is WaveAnswers and all(same_candidate(a, b) for a, b in zip(answers[1]["s5"], back[1]["s5"], strict=True))
    assert back[0]["s1"][0].vector.shape == (3,)


def test_a_scene_shards_packed_answer_unpacks_to_each_frontier_nodes_own_search() -> None:
    """``neighbour_scenes`` answers a wave of several tenants packed; unpacked (and after a pickle round trip)
    each frontier node has what a search of its own gives: the nearest live scenes of its walk's tenant,
    best first, each with its relevance to that walk's diff and a copy of its centroid."""
    partition = MemoryPartition(16, SceneTuning(join_similarity=0.9))
    cells = [cell(direction(seed, 16), tenant=f"t{seed % 3}", project=f"p{seed % 2}") for seed in range(60)]
    partition.write(cells, [uid("5") for _ in cells])
    requests = [
        NeighbourRequest("t0", [("f1", direction(101, 16)), ("f2", direction(102, 16))], direction(103, 16), 4, None),
        NeighbourRequest("t1", [("f3", direction(104, 16))], direction(105, 16), 2, None),
        NeighbourRequest("t0", [("f4", direction(106, 16))], direction(107, 16), 3, None),
        NeighbourRequest("nobody", [("f5", direction(108, 16))], direction(109, 16), 3, None),
        NeighbourRequest("t2", [], direction(110, 16), 3, None),
    ]
    packed = neighbour_scenes(partition, requests)
    for answers in (packed.unpacked(), pickle.loads(pickle.dumps(packed)).unpacked()):
        assert [sorted(a) for a in answers] == [["f1", "f2"], ["f3"], ["f4"], ["f5"], []]
        for request, answer in zip(requests, answers, strict=True):
            for frontier_id, frontier in request.queries:
                expected = partition.scene_neighbours(request.tenant_id, frontier, request.k)
                got = answer[frontier_id]
                assert [c.node_id for c in got] == [scene.id for scene, _ in expected]
                assert all(c.kind is NodeKind.SCENE and c.agent_id is None and c.standing is None for c in got)
                assert np.allclose([c.similarity for c in got], [sim for _, sim in expected], atol=1e-6)
                relevance = [float(scene.centroid @ request.diff_vector) for scene, _ in expected]
                assert np.allclose([c.relevance for c in got], relevance, atol=1e-6)
                for c, (scene, _) in zip(got, expected, strict=True):
                    assert c.vector is not None and c.vector.dtype == np.float32
                    assert np.array_equal(c.vector, scene.centroid) and not np.shares_memory(c.vector, scene.centroid)
        assert answers[0]["f1"], "the test's tenant t0 has scenes near its frontier"


def test_scenes_below_the_centroid_floor_come_without_their_centroid_and_nothing_else_changes() -> None:
    """A request's ``centroid_floor`` (the walk's gate) leaves out exactly the centroids of the candidates less
    relevant than it; every candidate, its scores and the other centroids are those of an answer without a
    floor, whole or in parts, before and after a pickle; and the walk decides the same from either answer."""
    partition = MemoryPartition(16, SceneTuning(join_similarity=0.9))
    cells = [cell(direction(seed, 16), tenant=f"t{seed % 2}", project="p") for seed in range(60)]
    partition.write(cells, [uid("5") for _ in cells])

    def requests(floor: float) -> list[NeighbourRequest]:
        return [
            NeighbourRequest(f"t{n % 2}", [(f"f{n}", direction(400 + n, 16))], direction(500 + n, 16), 6, None, 8, False, floor)
            for n in range(9)
        ]

    def flat(answer: PackedAnswers) -> list[Any]:
        return [(f, c[:4], c.vector) for a in answer.unpacked() for f, cs in a.items() for c in cs]

    policy = EnergyPolicy(gate=0.1)
    full = flat(neighbour_scenes(partition, requests(float("-inf"))))
    floored = neighbour_scenes(partition, requests(policy.gate))
    for answer in (
        floored,
        pickle.loads(pickle.dumps(floored)),
        PackedAnswers.joined(list(neighbour_scene_parts(partition, requests(policy.gate), 2))),
    ):
        got = flat(answer)
        assert [(f, c) for f, c, _ in got] == [(f, c) for f, c, _ in full]
        for (_, c, vector), (_, _, whole) in zip(got, full, strict=True):
            assert (vector is None) == (c[3] < policy.gate)
            assert vector is None or np.array_equal(vector, whole)
    assert {vector is None for _, _, vector in flat(floored)} == {True, False}, "the test has candidates on both sides"
    for n, request in enumerate(requests(policy.gate)):
        outcomes = []
        for answer in (neighbour_scenes(partition, requests(float("-inf"))), floored):
            state = WalkState.start(policy, "origin", request.diff_vector, 1.0)
            state.frontier = [FrontierNode(f"f{n}", request.queries[0][1], 1.0)]
            state.advance(answer.unpacked()[n])
            outcomes.append((state.events, [(f.node_id, f.vector.tolist()) for f in state.frontier]))
        assert outcomes[0] == outcomes[1]


def test_an_answer_made_in_parts_is_the_answer_made_whole() -> None:
    """A scene shard answers a wave a few walks at a time (``neighbour_scene_parts``, a turn of its event loop
    between parts); joined, the parts unpack, also after a pickle, to exactly the answer made in one piece:
    every candidate with its centroid, whatever the part size."""
    partition = MemoryPartition(16, SceneTuning(join_similarity=0.9))
    cells = [cell(direction(seed, 16), tenant=f"t{seed % 3}", project=f"p{seed % 2}") for seed in range(60)]
    partition.write(cells, [uid("5") for _ in cells])
    requests = [
        NeighbourRequest(
            f"t{n % 4}", [(f"f{n}-{q}", direction(200 + 7 * n + q, 16)) for q in range(n % 3)], direction(300 + n, 16), 4, None
        )
        for n in range(11)
    ]

    def candidates(answers: WaveAnswers) -> list[Any]:
        return [
            {
                f: [(c.node_id, c.kind, c.similarity, c.relevance, None if c.vector is None else c.vector.tolist()) for c in cs]
                for f, cs in a.items()
            }
            for a in answers
        ]

    whole = candidates(neighbour_scenes(partition, requests).unpacked())
    assert any(any(cs for cs in a.values()) for a in whole), "the test's frontier nodes have scenes near them"
    for part in (1, 2, 3, 8, 11, 64):
        joined = PackedAnswers.joined(list(neighbour_scene_parts(partition, requests, part)))
        assert candidates(joined.unpacked()) == whole
        assert candidates(pickle.loads(pickle.dumps(joined)).unpacked()) == whole
    assert PackedAnswers.joined([]).unpacked() == []


def test_a_scene_near_many_frontier_nodes_travels_once_and_beacon_rows_pack_as_columns() -> None:
    """Frontier nodes of one tenant's walks that find the same scene share its centroid's row: the answer's
    matrix holds each carried scene once, and every candidate still unpacks with that scene's centroid.
    Rows given as tuples (what a beacon set builds) pack into the same columns and unpack unchanged."""
    partition = MemoryPartition(16, SceneTuning(join_similarity=0.9))
    cells = [cell(direction(seed, 16), tenant="t0", project=f"p{seed % 2}") for seed in range(30)]
    partition.write(cells, [uid("5") for _ in cells])
    near = direction(7, 16)
    frontier = [(f"f-{q}", near) for q in range(3)]
    requests = [NeighbourRequest("t0", frontier, direction(200 + n, 16), 4, None) for n in range(5)]
    packed = pickle.loads(pickle.dumps(neighbour_scenes(partition, requests)))
    answers = packed.unpacked()
    carried = [c for a in answers for cs in a.values() for c in cs if c.vector is not None]
    assert len(carried) == 5 * 3 * 4 and packed.matrix is not None and len(packed.matrix) == 4  # four scenes, once each
    for c in carried:
        assert np.array_equal(c.vector, partition.scenes[c.node_id].centroid)
    rows: list[dict[str, list[Any]]] = [
        {"a": [("agent-1", NodeKind.AGENT.value, 0.5, 0.25, "writer", 1.5, -1)], "b": []},
        {},
        {"c": [("beacon-1", NodeKind.BEACON.value, 0.75, 0.5, "listener", None, -1)]},
    ]
    beacons = pickle.loads(pickle.dumps(PackedAnswers.of_rows(rows)))
    assert beacons.unpacked() == [
        {"a": [Candidate("agent-1", NodeKind.AGENT, 0.5, 0.25, "writer", None, 1.5)], "b": []},
        {},
        {"c": [Candidate("beacon-1", NodeKind.BEACON, 0.75, 0.5, "listener", None, None)]},
    ]
    joined = PackedAnswers.joined([PackedAnswers.of_rows(rows), neighbour_scenes(partition, requests[:1])])
    assert joined.unpacked()[:3] == beacons.unpacked() and len(joined.unpacked()) == 4

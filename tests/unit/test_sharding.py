"""Virtual partitions and their assignment to actors (``mesh.sharding``): the implicit routing of a deployment
never resized equals the balanced assignment wherever one exists, and a rebalance moves only the partitions a
balanced assignment cannot leave where they are."""

from __future__ import annotations

import pickle
import random

import pytest

from mesh.deployment import DirectorySpec
from mesh.sharding import VIRTUAL_PARTITIONS, Assignment, Routes, shard_for, virtual_partition

KEYS = [f"tenant-{random.Random(i).randrange(10**9)}\x1fproject-{i % 37}" for i in range(5000)]


@pytest.mark.parametrize("count", [1, 2, 4, 8, 64])
def test_the_implicit_routing_is_the_balanced_assignment_when_the_count_divides_the_partitions(count: int) -> None:
    implicit, balanced = Assignment(count), Assignment.balanced(count)
    assert implicit.explicit() == balanced
    assert [implicit.owner(k) for k in KEYS] == [balanced.owner(k) for k in KEYS] == [shard_for(k, count) for k in KEYS]
    assert implicit.moved_to(balanced) == 0


def test_a_count_that_does_not_divide_the_partitions_has_no_explicit_form_and_moves_everything() -> None:
    assert Assignment(3).explicit() is None
    assert Assignment(3).rebalanced(3) == Assignment.balanced(3)
    assert Assignment(3).moved_to(Assignment.balanced(3)) == VIRTUAL_PARTITIONS
    assert Assignment(3).moved_to(Assignment(3)) == 0


def lower_bound(before: Assignment, count: int) -> int:
    """The fewest partitions any assignment with ``rebalanced``'s shares can move from ``before``."""
    assert before.owners is not None
    share = [VIRTUAL_PARTITIONS // count + (1 if i < VIRTUAL_PARTITIONS % count else 0) for i in range(count)]
    load = [before.owners.count(i) for i in range(max(before.owners) + 1)]
    return sum(max(0, n - (share[i] if i < count else 0)) for i, n in enumerate(load))


def test_a_chain_of_resizes_stays_balanced_and_each_step_moves_the_fewest_partitions() -> None:
    current = Assignment.balanced(2)
    for count in [5, 3, 8, 8, 1, 7, 16, 2]:
        nxt = current.rebalanced(count)
        assert nxt.owners is not None and len(nxt.owners) == VIRTUAL_PARTITIONS and nxt.count == count
        loads = [nxt.owners.count(i) for i in range(count)]
        assert max(loads) - min(loads) <= 1 and sum(loads) == VIRTUAL_PARTITIONS
        assert current.moved_to(nxt) == lower_bound(current, count), (current.count, count)
        assert nxt == current.rebalanced(count), "the rebalance is deterministic"
        current = nxt
    assert Assignment.balanced(2).moved_to(Assignment.balanced(2).rebalanced(5)) == VIRTUAL_PARTITIONS - 820 - 819


def test_an_assignment_routes_every_key_of_a_partition_together_and_survives_json_and_pickle() -> None:
    assignment = Assignment.balanced(4).rebalanced(7)
    by_partition: dict[int, set[int]] = {}
    for key in KEYS:
        by_partition.setdefault(virtual_partition(key), set()).add(assignment.owner(key))
    assert all(len(owners) == 1 for owners in by_partition.values())
    assert Assignment.from_json(assignment.to_json()) == assignment
    assert Assignment.from_json(Assignment(3).to_json()) == Assignment(3)
    routes = Routes(assignment, Assignment(3), Assignment.balanced(2))
    spec = DirectorySpec("ns", 7, 3, 2, routes=routes)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert [spec.owner("scene_shard", k) for k in KEYS] == [assignment.owner(k) for k in KEYS]
    assert [spec.owner("beacon_set", k) for k in KEYS] == [shard_for(k, 3) for k in KEYS]
    assert [DirectorySpec("ns", 7, 3, 2).owner("inbox_shard", k) for k in KEYS] == [shard_for(k, 2) for k in KEYS]


def test_an_assignment_refuses_more_actors_than_partitions() -> None:
    with pytest.raises(ValueError, match="1 to 4096"):
        Assignment.balanced(VIRTUAL_PARTITIONS + 1)
    with pytest.raises(ValueError):
        Assignment.balanced(2).rebalanced(0)

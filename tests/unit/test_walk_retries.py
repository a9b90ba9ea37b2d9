"""A walk batch that fails (``actors.walk_queue``): an actor restarting is waited for, any other failure is
retried twice and then left to the replay, so the queue never stalls behind a batch that cannot walk."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from actors import walk_queue
from actors.chores import Background
from actors.walk_queue import WalkQueue
from mesh.errors import Unavailable
from mesh.model import Cell, Vector
from mesh.partition import MemoryPartition
from mesh.tuning import SceneTuning
from tests.unit.helpers import cell, direction


def queue_of(walk: walk_queue.WalkBatch) -> WalkQueue:
    partition = MemoryPartition(8, SceneTuning())
    return WalkQueue(walk, 64, lambda: partition, Background("test"), optimize_every=64)


@pytest.fixture(autouse=True)
def quick_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk_queue, "RETRY_PAUSES_S", (0.01,) * 7)


async def test_a_batch_waits_for_an_unavailable_actor_across_many_attempts() -> None:
    attempts: list[bool] = []

    async def walk(jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool) -> None:
        attempts.append(observe)
        if len(attempts) < 6:
            raise Unavailable("walker:0 is unavailable")  # killed, not yet restarted by Ray

    queue = queue_of(walk)
    queue.enqueue([cell(direction(0, 8))])
    await queue.settle(5)
    assert attempts == [True, False, False, False, False, False]  # the moves only on the first attempt


async def test_a_batch_that_fails_otherwise_is_tried_three_times_then_left_to_the_replay() -> None:
    attempts = 0

    async def walk(jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool) -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError("a walk that cannot succeed")

    queue = queue_of(walk)
    queue.enqueue([cell(direction(0, 8))])
    await queue.settle(5)
    assert attempts == 3
    queue.enqueue([cell(direction(1, 8))])  # the queue goes on with the next batch
    await asyncio.wait_for(queue.settle(5), 5)
    assert attempts == 6

"""Walks yield to reads: a scene shard's waves pause between parts while its searches are recent, and
deliver exactly what they deliver without pausing (``actors.read_yield``, ``SceneShard.neighbours_many``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.read_yield import ReadYield
from head.facade import Memesh
from mesh.query import NodeFilter
from tests.unit.test_owner_addressed_walks import SHARDS, _principal, _workload


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_wave_pauses_only_while_reads_are_recent() -> None:
    clock = Clock()
    reads = ReadYield(0.002, 0.05, clock)
    assert reads.pause() == 0.0  # no read yet
    reads.read()
    clock.now += 0.049
    assert reads.pause() == 0.002
    clock.now += 0.002  # 51 ms after the read: past the window
    assert reads.pause() == 0.0
    assert reads.pauses == 1


def test_a_zero_pause_turns_yielding_off() -> None:
    clock = Clock()
    reads = ReadYield(0.0, 60.0, clock)
    reads.read()
    assert reads.pause() == 0.0 and reads.pauses == 0


async def test_waves_that_yield_to_reads_deliver_what_waves_that_do_not_deliver(
    make_core: Callable[..., Memesh], tmp_path: Any
) -> None:
    outcomes, pauses = [], []
    for pause in (0.0, 0.01):
        # a window of a minute: one recall before the writes makes every wave of the workload pause
        core = make_core(
            **SHARDS,
            propagation={"read_yield_s": pause, "read_window_s": 60.0},
            storage={"data_dir": tmp_path / str(pause)},
        )
        try:
            reader = await _principal(core, "tenant-0")
            await core.memory.recall(reader, "anything at all", None, 5, NodeFilter())
            outcomes.append(await _workload(core))
            pauses.append((await core.health())["wave_read_pauses"])
        finally:
            await core.close()
    unpaused, paused = outcomes
    assert paused == unpaused
    assert all(len(items) >= 2 for items in paused.values()), paused  # the beacons were reached
    assert pauses[0] == 0 and pauses[1] > 0, pauses

"""Recall's access times: riding on the next search, else sent after a linger, coalesced, bounded, never failing a recall."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from head.access_times import AccessTimes
from mesh.errors import Unavailable

T0 = datetime(2026, 11, 23, tzinfo=UTC)


class Shards:
    def __init__(self) -> None:
        self.calls: list[tuple[int, list[str], datetime]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail = False

    async def send(self, shard: int, ids: list[str], now: datetime) -> None:
        self.calls.append((shard, ids, now))
        await self.release.wait()
        if self.fail:
            raise Unavailable("scene shard restarting")


async def test_what_no_search_takes_is_sent_after_the_linger() -> None:
    shards = Shards()
    access = AccessTimes(shards.send, linger_s=0.05)
    access.record(0, ["a", "b"], T0)
    await asyncio.sleep(0.01)
    assert shards.calls == []  # lingering: the shard's next search may carry them
    await asyncio.sleep(0.1)
    assert shards.calls == [(0, ["a", "b"], T0)] and access.calls == 1 and access.taken == 0


async def test_a_search_takes_what_waits_for_its_shard_and_no_call_is_sent() -> None:
    shards = Shards()
    access = AccessTimes(shards.send, linger_s=0.05)
    access.record(0, ["a"], T0)
    access.record(0, ["b", "a"], T0 + timedelta(seconds=1))
    access.record(1, ["z"], T0)
    assert access.take(0) == (["a", "b"], T0 + timedelta(seconds=1))  # the latest time, every id once
    assert access.take(0) is None  # taken once
    await asyncio.sleep(0.1)
    assert shards.calls == [(1, ["z"], T0)], "only the shard no search went to gets a call"
    assert access.taken == 1 and access.calls == 1


async def test_close_sends_what_lingers_at_once() -> None:
    shards = Shards()
    access = AccessTimes(shards.send, linger_s=60)
    access.record(0, ["a"], T0)
    await asyncio.wait_for(access.close(), 5)
    assert shards.calls == [(0, ["a"], T0)]


async def test_recalls_during_a_call_in_flight_go_together_in_the_next_one() -> None:
    shards = Shards()
    shards.release.clear()
    access = AccessTimes(shards.send, linger_s=0)
    access.record(0, ["a"], T0)
    await asyncio.sleep(0.01)
    for i in range(10):
        access.record(0, [f"c{i}", "a"], T0 + timedelta(seconds=i))
    access.record(1, ["z"], T0)  # another shard is not held up by shard 0's call
    await asyncio.sleep(0.01)
    assert [c[0] for c in shards.calls] == [0, 1]
    shards.release.set()
    await access.close()
    assert len(shards.calls) == 3 and access.calls == 3
    shard, ids, now = shards.calls[2]
    assert shard == 0 and set(ids) == {"a", *(f"c{i}" for i in range(10))} and len(ids) == 11
    assert now == T0 + timedelta(seconds=9), "the batch carries the latest time"


async def test_pending_ids_are_bounded_and_a_failed_send_fails_no_recall() -> None:
    shards = Shards()
    shards.release.clear()
    shards.fail = True
    access = AccessTimes(shards.send, max_pending=5, linger_s=0)
    access.record(0, ["first"], T0)
    await asyncio.sleep(0.01)
    access.record(0, [f"x{i}" for i in range(50)], T0)
    shards.release.set()
    await access.close()
    assert len(shards.calls) == 2 and len(shards.calls[1][1]) == 5
    shards.fail = False
    access.record(0, ["again"], T0)
    await access.close()
    assert shards.calls[-1][1] == ["again"]

"""Recall's access times: sent at once when alone, coalesced while a call is in flight, bounded, never failing a recall."""

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


async def test_a_lone_recall_is_sent_at_once() -> None:
    shards = Shards()
    access = AccessTimes(shards.send)
    access.record(0, ["a", "b"], T0)
    await asyncio.sleep(0)
    assert shards.calls == [(0, ["a", "b"], T0)]


async def test_recalls_during_a_call_in_flight_go_together_in_the_next_one() -> None:
    shards = Shards()
    shards.release.clear()
    access = AccessTimes(shards.send)
    access.record(0, ["a"], T0)
    await asyncio.sleep(0)
    for i in range(10):
        access.record(0, [f"c{i}", "a"], T0 + timedelta(seconds=i))
    access.record(1, ["z"], T0)  # another shard is not held up by shard 0's call
    await asyncio.sleep(0)
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
    access = AccessTimes(shards.send, max_pending=5)
    access.record(0, ["first"], T0)
    await asyncio.sleep(0)
    access.record(0, [f"x{i}" for i in range(50)], T0)
    shards.release.set()
    await access.close()
    assert len(shards.calls) == 2 and len(shards.calls[1][1]) == 5
    shards.fail = False
    access.record(0, ["again"], T0)
    await access.close()
    assert shards.calls[-1][1] == ["again"]

"""Node lanes (actors.node_lane) on real Unix sockets, in one process: what a lane serves, what it refuses,
and what its callers see when it breaks. Their use by Ray actors is tested in tests/ray/test_node_lanes.py."""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from actors.node_lane import JOIN_BYTES, LaneAddress, LaneBroken, LaneClient, Lanes, LaneServer, LaneUnfit, lane_directory
from mesh.errors import InternalError, NotFound


class Target:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.release = asyncio.Event()

    async def echo(self, value: object, suffix: str = "") -> object:
        self.seen.append("echo")
        return (value, suffix)

    async def wait(self, value: object) -> object:
        self.seen.append("wait")
        await self.release.wait()
        return value

    async def missing(self) -> None:
        raise NotFound("no such cell")

    async def broken(self) -> None:
        raise ValueError("a bug")

    async def secret(self) -> str:
        self.seen.append("secret")
        return "never"


SERVED = frozenset({"echo", "wait", "missing", "broken"})


@pytest.fixture
async def lane(tmp_path: Path) -> AsyncIterator[tuple[Target, LaneServer, LaneAddress]]:
    directory = tmp_path / "lanes"
    directory.mkdir(mode=0o700)
    target = Target()
    server = LaneServer(target, SERVED, node="node-a")
    address = await server.start(directory)
    yield target, server, address
    await server.close()


async def test_calls_answer_in_any_order_with_their_own_answers(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    target, server, address = lane
    client = await LaneClient.open("shard", address)
    slow = asyncio.ensure_future(client.invoke("wait", ("slow",), {}))
    fast = await asyncio.gather(*(client.invoke("echo", (i,), {"suffix": "x"}) for i in range(50)))
    assert fast == [(i, "x") for i in range(50)]
    assert not slow.done()  # the slow call did not hold the fast ones
    target.release.set()
    assert await slow == "slow"
    assert server.calls == 51
    client.close()


async def test_large_and_small_frames_interleave_whole(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    """Payloads past ``JOIN_BYTES`` go out as a header and a body of their own; concurrent calls of every
    size, both ways, still arrive whole and each answer reaches its own caller."""
    _, _, address = lane
    client = await LaneClient.open("shard", address)
    sizes = [10, JOIN_BYTES - 20, JOIN_BYTES, 3 * JOIN_BYTES + 7, 1_000_000, 1]
    payloads = [np.full(n, i % 251, dtype=np.uint8) for i, n in enumerate(sizes * 4)]
    answers = await asyncio.gather(*(client.invoke("echo", (p,), {}) for p in payloads))
    assert all(np.array_equal(got, sent) and suffix == "" for (got, suffix), sent in zip(answers, payloads, strict=True))
    client.close()


async def test_errors_cross_the_lane_as_ray_maps_them(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    target, _, address = lane
    client = await LaneClient.open("shard", address)
    with pytest.raises(NotFound, match="no such cell"):
        await client.invoke("missing", (), {})
    with pytest.raises(InternalError, match=r"shard\.broken failed"):
        await client.invoke("broken", (), {})
    with pytest.raises(InternalError):  # a method the lane does not serve is never called
        await client.invoke("secret", (), {})
    assert "secret" not in target.seen
    assert await client.invoke("echo", (1,), {}) == (1, "")  # the lane stays open after refusals
    client.close()


async def test_arguments_only_rays_serializer_can_send_are_left_to_ray(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    target, server, address = lane
    client = await LaneClient.open("shard", address)
    with pytest.raises(LaneUnfit):
        await client.invoke("echo", (lambda: None,), {})  # a closure: cloudpickle sends it, pickle does not
    assert await client.invoke("echo", (3,), {}) == (3, "") and server.calls == 1  # nothing of it was sent
    assert target.seen == ["echo"]
    client.close()


async def test_a_connection_without_the_token_is_closed_before_any_call(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    target, server, address = lane
    forged = LaneAddress(address.node, address.path, bytes(32))
    client = await LaneClient.open("shard", forged)
    with pytest.raises(LaneBroken):
        await asyncio.wait_for(client.invoke("echo", ("x",), {}), 5)
    assert target.seen == [] and server.calls == 0
    assert "token" not in repr(address) and address.token.hex() not in repr(address)


async def test_a_frame_over_the_bound_closes_the_connection(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    target, _, address = lane
    reader, writer = await asyncio.open_unix_connection(address.path)
    writer.write(address.token + struct.pack("!IQB", (1 << 30) + 1, 1, 0))
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing read into memory
    assert target.seen == []


async def test_calls_in_flight_fail_as_broken_when_the_actor_goes(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    _, server, address = lane
    client = await LaneClient.open("shard", address)
    pending = asyncio.ensure_future(client.invoke("wait", ("x",), {}))
    await asyncio.sleep(0.05)
    await server.close()  # its connections close, as a killed process's do
    with pytest.raises(LaneBroken):
        await asyncio.wait_for(pending, 5)
    assert client.broken
    with pytest.raises(LaneBroken):
        await client.invoke("echo", (1,), {})


async def test_lanes_are_found_in_the_background_and_only_on_this_node(lane: tuple[Target, LaneServer, LaneAddress]) -> None:
    _, _, address = lane
    asked: list[str] = []

    async def here() -> LaneAddress:
        asked.append("here")
        return address

    async def elsewhere() -> LaneAddress:
        asked.append("elsewhere")
        return LaneAddress("node-b", address.path, address.token)

    lanes = Lanes("node-a", retry_s=0.05, remote_retry_s=60)
    assert lanes.lane("shard:0", here) is None  # the first call goes through Ray; the lane is looked for
    await asyncio.sleep(0.1)
    client = lanes.lane("shard:0", here)
    assert client is not None and await client.invoke("echo", (2,), {}) == (2, "")
    assert lanes.lane("shard:1", elsewhere) is None
    await asyncio.sleep(0.1)
    assert lanes.lane("shard:1", elsewhere) is None  # another node's actor: Ray, and not asked again soon
    assert asked == ["here", "elsewhere"]
    client.close()  # broken: looked for again after retry_s
    assert lanes.lane("shard:0", here) is None
    await asyncio.sleep(0.1)
    assert lanes.lane("shard:0", here) is None
    await asyncio.sleep(0.1)
    again = lanes.lane("shard:0", here)
    assert again is not None and again is not client and asked.count("here") == 2
    lanes.close()


def test_the_lane_directory_is_private_or_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = lane_directory()
    assert made is not None and made.stat().st_mode & 0o777 == 0o700
    made.chmod(0o755)  # opened to others (by someone else, or a umask gone wrong): not used
    assert lane_directory() is None
    made.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    made.symlink_to(tmp_path / "elsewhere")  # a link planted in its place: not followed
    assert lane_directory() is None


async def test_a_started_lane_sweeps_sockets_of_processes_that_are_gone(tmp_path: Path) -> None:
    directory = tmp_path / "lanes"
    directory.mkdir(mode=0o700)
    dead = directory / "999999999-abc.sock"
    dead.touch()
    alive = directory / f"{os.getpid()}-abc.sock"
    alive.touch()
    server = LaneServer(Target(), SERVED, node="node-a")
    address = await server.start(directory)
    assert not dead.exists() and alive.exists()
    assert os.stat(address.path).st_mode & 0o777 == 0o600
    await server.close()
    assert os.path.basename(address.path) not in os.listdir(directory)

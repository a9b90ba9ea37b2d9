"""Soft state (``storage.soft_commit_window_ms``) and walks turned off (``propagation.enabled``), in process."""

from __future__ import annotations

from collections.abc import Callable

from head.facade import Memesh
from tests.unit.test_propagation import agent, drain, write


async def test_with_walks_off_nothing_is_pushed_and_turning_them_on_replays_nothing(make_core: Callable[..., Memesh]) -> None:
    quiet = make_core(propagation={"enabled": False})
    listener, _ = await agent(quiet)
    writer, _ = await agent(quiet)
    await quiet.inbox.place_beacon(listener, "kubernetes helm deployment")
    await write(quiet, writer, "kubernetes helm deployment runbook updated", salience=0.8)
    assert (await drain(quiet, listener))["items"] == []
    await quiet.close()

    loud = make_core()  # walks on: the cells written while they were off count as walked
    await write(loud, writer, "bananas are a yellow fruit")  # settles every shard's replay, if one started
    assert (await drain(loud, listener))["items"] == []
    fresh = await write(loud, writer, "kubernetes helm deployment rolled back", salience=0.8)
    items = (await drain(loud, listener))["items"]
    assert [item["diff"]["cell_id"] for item in items] == [fresh]
    await loud.close()


async def test_a_closed_deployment_commits_its_soft_state_whatever_the_window(make_core: Callable[..., Memesh]) -> None:
    core = make_core(storage={"soft_commit_window_ms": 60_000})
    listener, _ = await agent(core)
    writer, _ = await agent(core)
    await core.inbox.place_beacon(listener, "postgres replication lag")
    await write(core, writer, "postgres replication lag alerts fired", salience=0.8)
    first = (await drain(core, listener))["items"]
    assert len(first) == 1
    await core.close()  # within the window: the close commits the walk marks and the agent nodes

    again = make_core()
    await write(again, writer, "bananas are a yellow fruit")  # a replay, had the marks been lost, ends here
    assert [(i["delivery_seq"], i["diff"]["id"]) for i in (await drain(again, listener))["items"]] == [
        (i["delivery_seq"], i["diff"]["id"]) for i in first
    ]
    walks = [(await again.directory.walker(i).health())["walks"] for i in range(again.directory.spec.walkers)]
    assert sum(walks) == 1  # only the banana's walk: the first cell was not walked again
    await again.close()

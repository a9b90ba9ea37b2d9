"""Messages per walk against shard count: owner-addressed waves against waves to every owner.

For each shard count S (scene shards = beacon sets = S), two in-process
deployments (the real actor classes, real LanceDB under a temporary directory,
the ``hash`` engine: message counts depend on where nodes live, not on the
model) get the same workload, one with ``propagation.owner_addressed`` off (the
baseline: every wave messages every scene shard and beacon set) and one with it
on. Two workloads:

- **many tenants**: 16 tenants, one project each, a listener with two beacons
  and a writer writing 8 cells (half on the listener's topics);
- **one wide tenant**: one tenant writing into 16 projects (its scenes on every
  shard), the same listeners: the case owner-addressing cannot help.

Printed per S: walks, waves per walk, messages per walk (remote actor calls; the
shard running the walk answers its own part without one), the ratio addressed /
baseline, and whether both runs delivered the same items (they must).
Run: ``.venv/bin/python -m bench.walk_messages [--shards 1,2,4,8,16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.common import banner
from cluster.compose import build_memesh
from cluster.settings import Settings
from head.facade import Memesh
from mesh.identity import Principal, Role
from mesh.model import CellType, NewCell

ADMIN = Principal(agent_id="00000000-0000-7000-8000-000000000001", tenant_id="system", roles=frozenset({Role.SERVICE_ADMIN}))
TOPICS = [
    "kafka consumer lag",
    "terraform state locking",
    "postgres vacuum stalls",
    "dns cache poisoning",
    "kubernetes pod evictions",
    "redis memory fragmentation",
    "nginx upstream timeouts",
    "s3 request throttling",
]


def _settings(data_dir: Path, shards: int, addressed: bool) -> Settings:
    return Settings(
        ray={"in_process": True, "scene_shards": shards, "beacon_sets": shards, "inbox_shards": 2},
        embedding={"engine": "hash"},
        storage={"data_dir": data_dir, "commit_window_ms": 1},
        propagation={"owner_addressed": addressed},
        observatory={"enabled": False},
    )


async def _agent(core: Memesh, tenant: str) -> Principal:
    issued = await core.identity.issue(ADMIN, tenant, "a", ["Writer"])
    principal = await core.identity.authenticate(issued.plaintext_secret)
    assert principal is not None
    return principal


async def _run(data_dir: Path, shards: int, addressed: bool, wide: bool) -> dict[str, Any]:
    core = build_memesh(_settings(data_dir, shards, addressed))
    try:
        tenants = ["wide"] * 16 if wide else [f"tenant-{n}" for n in range(16)]
        listeners, writers = [], []
        for n, tenant in enumerate(tenants):
            listener, writer = await _agent(core, tenant), await _agent(core, tenant)
            topic = TOPICS[n % len(TOPICS)]
            await core.inbox.place_beacon(listener, topic)
            await core.inbox.place_beacon(listener, f"{topic} postmortem")
            listeners.append(listener)
            writers.append(writer)
        for n, writer in enumerate(writers):
            topic, other = TOPICS[n % len(TOPICS)], TOPICS[(n + 3) % len(TOPICS)]
            texts = [topic, f"{topic} postmortem", f"{topic} again", f"{topic} runbook"]
            texts += [other, f"notes on {other}", "lunch menu", "standup moved"]
            project = f"project-{n}" if wide else "default"
            for text in texts:
                cell = NewCell(content=text, cell_type=CellType.FACT, salience=0.8, project_id=project)
                await core.memory.write_cells(writer, [cell])
        for i in range(shards):
            await core.directory.scene_shard(i).settle(120.0)
        walks = messages = 0
        for i in range(core.directory.spec.walkers):
            health = await core.directory.walker(i).health()
            walks, messages = walks + health["walks"], messages + health["walk_messages"]
        delivered = []
        for listener in listeners:
            page = await core.inbox.pull(listener, None, None, 200)
            delivered.append(sorted((i["diff"]["content"], i["delivery"]["score"]) for i in json.loads(page.items_json)))
        return {"walks": walks, "messages": messages, "delivered": delivered}
    finally:
        await core.close()


async def main_async(shard_counts: list[int]) -> None:
    banner("messages per walk against shard count (owner-addressed vs every owner)")
    print(f"{'workload':<16}{'S':>4}{'walks':>7}{'msgs/walk all':>15}{'msgs/walk owners':>18}{'ratio':>8}  same")
    with tempfile.TemporaryDirectory(prefix="memesh-walk-messages-") as tmp:
        for wide in (False, True):
            for shards in shard_counts:
                runs = []
                for addressed in (False, True):
                    runs.append(await _run(Path(tmp) / f"{wide}-{shards}-{addressed}", shards, addressed, wide))
                every, owned = runs
                per_all = every["messages"] / max(every["walks"], 1)
                per_owned = owned["messages"] / max(owned["walks"], 1)
                ratio = per_owned / per_all if per_all else 1.0
                same = every["delivered"] == owned["delivered"]
                name = "one wide tenant" if wide else "many tenants"
                print(f"{name:<16}{shards:>4}{owned['walks']:>7}{per_all:>15.2f}{per_owned:>18.2f}{ratio:>8.2f}  {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="1,2,4,8,16", help="scene shard (and beacon set) counts")
    args = parser.parse_args()
    asyncio.run(main_async([int(s) for s in args.shards.split(",")]))


if __name__ == "__main__":
    main()

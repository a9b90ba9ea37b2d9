"""A second Ray node on loopback, joined to the session's real Ray and removed by force.

The session Ray (``ray_address``) is one node. ``extra_node`` starts another raylet, object store and
workers on this machine, joined to the same GCS, the way ``ray.cluster_utils.Cluster.add_node`` adds a
worker node (Ray's own multi-node test utility, which can only grow a cluster it started itself); ``kill``
removes it the way ``Cluster.remove_node(allow_graceful=False)`` does: every process of the node killed,
as when a machine is lost. Nothing here is a fake: it is a real two-node Ray cluster on one machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ExtraNode:
    def __init__(self, node: Any) -> None:
        self.node = node
        self.node_id: str = node.node_id
        self.alive = True

    def kill(self) -> None:
        """Lose the node: its raylet, object store and every worker on it, killed at once."""
        if self.alive:
            self.node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            self.alive = False


def alive_node_ids() -> set[str]:
    import ray

    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def ready(node_id: str, timeout_s: float) -> None:
    """Wait until the node runs work: a task pinned to it answers. A node the GCS lists as alive may not be
    in the schedulers' view yet, and actors placed in that gap all land on the other node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def where() -> str:
        return str(ray.get_runtime_context().get_node_id())

    pinned = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    assert ray.get(pinned.remote(), timeout=max(timeout_s, 1.0)) == node_id


@contextmanager
def extra_node(gcs_address: str, num_cpus: int = 1, timeout_s: float = 60.0) -> Iterator[ExtraNode]:
    """A worker node joined to the running cluster at ``gcs_address`` for the block; killed at its end."""
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    params = RayParams(
        gcs_address=gcs_address,
        num_cpus=num_cpus,
        num_gpus=0,
        object_store_memory=150 * 1024 * 1024,
        min_worker_port=0,
        max_worker_port=0,
        include_log_monitor=False,
        node_manager_port=0,
    )
    params.dashboard_agent_listen_port = None
    node = ExtraNode(Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True))
    try:
        deadline = time.monotonic() + timeout_s
        while node.node_id not in alive_node_ids():
            assert time.monotonic() < deadline, "the extra Ray node never joined the cluster"
            time.sleep(0.2)
        ready(node.node_id, deadline - time.monotonic())
        yield node
    finally:
        node.kill()

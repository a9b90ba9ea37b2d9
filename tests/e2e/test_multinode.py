"""memesh on a real two-node Ray (loopback): actors spread across the nodes, then one node lost during
writes and acknowledgements. Its actors restart on the surviving node and reload from the shared storage
(here a path both nodes reach, as an NFS mount would be); no acknowledged write or cursor is lost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ray_nodes import ExtraNode, extra_node
from tests.servers import Server

SPREAD = {
    "MEMESH_RAY__PLACEMENT": "spread",
    "MEMESH_RAY__SCENE_SHARDS": "3",
    "MEMESH_RAY__BEACON_SETS": "3",
    "MEMESH_RAY__INBOX_SHARDS": "3",
}
ACTORS = (
    "registry",
    "observatory",
    "audit_log",
    "head_roster",
    "console_state",
    *(f"{kind}:{i}" for kind in ("scene_shard", "beacon_set", "inbox_shard") for i in range(3)),
)


def actor_nodes(namespace: str, timeout_s: float = 120.0, lost: str | None = None) -> dict[str, str]:
    """Where each actor of the deployment runs now (asked of the actor itself, so it also answers). With
    ``lost``, an actor that still answers from that node is asked again (bounded): a worker of a killed node
    can answer a direct call for a few seconds after its raylet died, until it notices and exits."""
    import ray

    def where(_: object) -> str:
        return str(ray.get_runtime_context().get_node_id())

    from ray.exceptions import ActorUnavailableError, GetTimeoutError

    nodes = {}
    deadline = time.monotonic() + timeout_s
    for name in ACTORS:
        while name not in nodes:  # an actor whose node was lost is unavailable until Ray has restarted it
            handle = ray.get_actor(name, namespace=namespace)
            try:
                answer = ray.get(handle.__ray_call__.remote(where), timeout=max(1.0, deadline - time.monotonic()))
                if answer != lost or time.monotonic() >= deadline:
                    nodes[name] = answer
                else:
                    time.sleep(0.5)
            except (ActorUnavailableError, GetTimeoutError):
                assert time.monotonic() < deadline, f"{name} did not come back within {timeout_s}s"
                time.sleep(0.5)
    return nodes


def write_until_acknowledged(http: httpx.Client, content: str, deadline_s: float = 180.0) -> str:
    """POST one cell, retrying what the loss of a node answers (503, 504, a dropped connection) until 201."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            response = http.post("/v1/cells", json={"content": content, "cell_type": "Fact"})
            if response.status_code == 201:
                return str(response.json()["id"])
            assert response.status_code in (429, 503, 504), response.text
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"no acknowledgement for {content!r} in {deadline_s}s"
        time.sleep(0.5)


def pull(http: httpx.Client, body: dict[str, Any], deadline_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while True:
        response = http.post("/v1/inbox:pull", json=body)
        if response.status_code == 200:
            page: dict[str, Any] = response.json()
            return page
        assert response.status_code in (503, 504), response.text
        assert time.monotonic() < deadline, "the inbox never answered again"
        time.sleep(0.5)


@pytest.mark.timeout(600)  # 2.5 to 3.5 minutes of real servers here: the suite's 300 s hang guard is too close
def test_actors_spread_across_nodes_and_survive_losing_one(ray_address: str, tmp_path: Path) -> None:
    with extra_node(ray_address) as node:
        server = Server(tmp_path / "data", ray_address, "hash", SPREAD).start()
        try:
            _lose_a_node_under_writes_and_acks(server, node)
        finally:
            server.stop()


def _lose_a_node_under_writes_and_acks(server: Server, node: ExtraNode) -> None:
    before = actor_nodes(server.namespace)
    on_lost = sorted(name for name, where in before.items() if where == node.node_id)
    assert on_lost and len(on_lost) < len(ACTORS), f"actors not spread over both nodes: {before}"

    listener = server.issue("multi", "Reader", "listener")["plaintext_secret"]
    writer = server.issue("multi", "Writer", "writer")["plaintext_secret"]
    with server.http(listener) as http:
        assert http.post("/v1/beacons", json={"interest": "kubernetes cluster upgrade"}).status_code in (200, 201)
    acknowledged: dict[str, str] = {}
    with server.http(writer) as http:
        for i in range(12):
            content = f"kubernetes cluster upgrade step {i} finished"
            acknowledged[write_until_acknowledged(http, content)] = content
    with server.http(listener) as http:
        deadline = time.monotonic() + 60
        while not (page := pull(http, {}))["items"]:
            assert time.monotonic() < deadline, "no delivery reached the listener"
            time.sleep(0.2)
        acked = page["items"][-1]["delivery_seq"]
        assert pull(http, {"ack": acked})["cursor"] == acked

    node.kill()  # the machine is lost: raylet, object store and every actor worker on it
    with server.http(writer) as http:
        for i in range(12, 24):
            content = f"kubernetes cluster upgrade step {i} finished"
            acknowledged[write_until_acknowledged(http, content)] = content

    after = actor_nodes(server.namespace, lost=node.node_id)
    assert node.node_id not in after.values(), f"an actor still claims the lost node: {after}"
    with server.http(writer) as http:
        for cell_id, content in acknowledged.items():
            found = http.post("/v1/recall", json={"text": content, "k": 3})
            assert found.status_code == 200, found.text
            assert cell_id in found.text, f"acknowledged cell {cell_id} ({content!r}) lost with the node"
    with server.http(listener) as http:
        page = pull(http, {})
        assert page["cursor"] == acked, "the acknowledged inbox cursor moved or was lost with the node"
        assert all(item["delivery_seq"] > acked for item in page["items"])

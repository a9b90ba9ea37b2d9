"""An online resize on the real Ray, through two heads under load: ``memesh admin partitions resize`` at one head
moves the virtual partitions from 2 / 2 / 2 actors to 5 / 3 / 4 while writers and readers keep using both heads;
nothing acknowledged is lost, no request is answered wrongly (a held request is answered by the new owner), the
listener's cursor and inbox are intact and its beacon still catches new writes, and both heads route by (and
show in /metrics) the new layout."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import ray

from tests.servers import Server, ack_first_delivery

GROWN = ("--scene-shards", "5", "--beacon-sets", "3", "--inbox-shards", "4")


class Traffic:
    """Writers and a reader in threads, one keep-alive client each; every status seen, every acknowledged write."""

    def __init__(self) -> None:
        self.acked: dict[str, str] = {}
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def write(self, server: Server, key: str, name: str) -> None:
        def run() -> None:
            with server.http(key) as http:
                i = 0
                while not self._stop.is_set():
                    content = f"the online resize wrote {name} entry {i}"
                    body = {"content": content, "cell_type": "Fact", "project_id": f"project-{i % 12}"}  # many partitions
                    i += 1
                    response = http.post("/v1/cells", json=body)
                    with self._lock:
                        self.statuses.append(response.status_code)
                        if response.status_code == 201:
                            self.acked[response.json()["id"]] = content

        self._start(run)

    def read(self, server: Server, key: str) -> None:
        def run() -> None:
            with server.http(key) as http:
                while not self._stop.is_set():
                    response = http.post("/v1/recall", json={"text": "online resize entry", "k": 5})
                    with self._lock:
                        self.statuses.append(response.status_code)

        self._start(run)

    def _start(self, run: object) -> None:
        thread = threading.Thread(target=run, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def gauge(server: Server, name: str, kind: str) -> float:
    for line in httpx.get(f"{server.base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f'{name}{{kind="{kind}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"{name} for {kind} is not on /metrics")


def test_an_online_resize_under_load_through_two_heads(ray_address: str, tmp_path: Path) -> None:
    first = Server(tmp_path / "data", ray_address, "hash").start()
    second = Server(tmp_path / "data", ray_address, "hash", {"MEMESH_RAY__NAMESPACE": first.namespace})
    second.log_path = tmp_path / "second.log"
    traffic = Traffic()
    try:
        second.start()
        listener = first.issue("resize", "Reader", "listener")["plaintext_secret"]
        writer = first.issue("resize", "Writer", "writer")["plaintext_secret"]
        with second.http(listener) as http:
            assert http.post("/v1/beacons", json={"interest": "warehouse robot battery swap"}).status_code in (200, 201)
        with first.http(writer) as http:
            for i in range(3):
                response = http.post("/v1/cells", json={"content": f"warehouse robot battery swap {i} done", "cell_type": "Fact"})
                assert response.status_code == 201, response.text
        with second.http(listener) as http:
            acked = ack_first_delivery(http)
            time.sleep(1.0)  # the last walks land
            shown = sorted(i["delivery_seq"] for i in http.post("/v1/inbox:pull", json={}).json()["items"])

        traffic.write(first, writer, "first")
        traffic.write(second, writer, "second")
        traffic.read(second, listener)
        time.sleep(2.0)
        before = len(traffic.acked)
        done = json.loads(first.admin("partitions", "resize", *GROWN, timeout_s=900).stdout)  # the CLI waits up to 900 s
        time.sleep(2.0)
        traffic.stop()

        assert (done["scene_shards"], done["beacon_sets"], done["inbox_shards"], done["epoch"]) == (5, 3, 4, 1)
        assert {m["kind"]: m["partitions"] for m in done["moves"]} == {
            "scene_shard": 2457,
            "beacon_set": 1365,
            "inbox_shard": 2048,
        }
        assert next(m["rows"] for m in done["moves"] if m["kind"] == "scene_shard") > 0, "no cell moved: widen the load"
        assert len(traffic.acked) > before + 5, "the writers stopped writing through the resize"
        refused = [s for s in traffic.statuses if s not in (200, 201)]
        assert set(refused) <= {503}, f"answers other than a retryable 503: {sorted(set(refused))}"
        assert len(refused) <= len(traffic.statuses) // 10, f"{len(refused)} of {len(traffic.statuses)} refused"

        for server in (first, second):  # every acknowledged write, found through either head
            with server.http(writer) as http:
                for cell_id, content in list(traffic.acked.items())[:: max(1, len(traffic.acked) // 40)]:
                    found = http.post("/v1/recall", json={"text": content, "k": 3})
                    assert found.status_code == 200 and cell_id in found.text, f"{content!r} lost (via {server.base_url})"
            assert gauge(server, "memesh_partitions", "scene_shard") == 5.0
            assert gauge(server, "memesh_partitions", "inbox_shard") == 4.0
        assert gauge(first, "memesh_partitions_moved", "beacon_set") == 1365.0

        with second.http(listener) as http:  # the cursor and inbox moved with the agent; its beacon still catches
            page = http.post("/v1/inbox:pull", json={}).json()
            assert page["cursor"] == acked
            assert set(shown) <= {i["delivery_seq"] for i in page["items"]}
        with second.http(writer) as http:
            late = http.post("/v1/cells", json={"content": "warehouse robot battery swap after the resize", "cell_type": "Fact"})
            assert late.status_code == 201, late.text
        with first.http(listener) as http:
            deadline = time.monotonic() + 60
            while late.json()["id"] not in http.post("/v1/inbox:pull", json={}).text:
                assert time.monotonic() < deadline, "a write after the resize never reached the listener's inbox"
                time.sleep(0.2)

        ray.get_actor("scene_shard:4@1", namespace=first.namespace)  # the new epoch's actors run
        try:
            ray.get_actor("scene_shard:0", namespace=first.namespace)
            raise AssertionError("an actor of the old layout still runs")
        except ValueError:
            pass
        assert "online resize: scene_shards 2 -> 5" in first.output()
    finally:
        traffic.stop()
        second.stop()
        assert first.stop() == 0, first.output()[-3000:]

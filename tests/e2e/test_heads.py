"""Several ``memesh serve`` heads of one deployment on the real Ray: a revoke through one head is a 401 at
the other on the very next request, and ``--workers 2`` starts two heads that share the ports."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from cluster.settings import DEFAULT_POOL_MAX
from head.cpus import usable_cpus
from tests.servers import BIN, Server, assert_envelope, free_port


def test_a_revoke_at_one_head_is_a_401_at_the_other_on_the_next_request(ray_address: str, tmp_path: Path) -> None:
    first = Server(tmp_path / "data", ray_address, "hash").start()
    second = Server(tmp_path / "data", ray_address, "hash", {"MEMESH_RAY__NAMESPACE": first.namespace})
    second.log_path = tmp_path / "second.log"
    try:
        second.start()
        assert "bootstrap ServiceAdmin key written" not in second.output(), "the second head wrote a key again"
        deadline = time.monotonic() + 10  # /healthz answers from a cache of at most server.health_cache_s
        while httpx.get(f"{second.base_url}/healthz").json()["detail"]["heads"] != 2:
            assert time.monotonic() < deadline, "the second head never saw two heads"
            time.sleep(0.2)
        issued = first.issue("acme", "Writer", "w")
        key = issued["plaintext_secret"]
        with second.http(key) as http:
            for _ in range(3):  # cached at the second head from now on
                assert http.post("/v1/inbox:pull", json={}).status_code == 200
            first.admin("agents", "revoke", issued["agent_id"])
            assert_envelope(http.post("/v1/inbox:pull", json={}), 401, "unauthorized")
        rotated = first.issue("acme", "Writer", "r")
        with second.http(rotated["plaintext_secret"]) as http:
            assert http.post("/v1/inbox:pull", json={}).status_code == 200
            new_key = second.admin("agents", "rotate", rotated["agent_id"]).stdout  # through the other head
        with first.http(rotated["plaintext_secret"]) as http:
            assert_envelope(http.post("/v1/inbox:pull", json={}), 401, "unauthorized")
        assert rotated["plaintext_secret"] not in new_key
    finally:
        second.stop()
        first.stop()


def test_workers_start_heads_that_share_the_ports(ray_address: str, tmp_path: Path) -> None:
    port, grpc_port, data_port = free_port(), free_port(), free_port()
    log = (tmp_path / "workers.log").open("wb")
    proc = subprocess.Popen(
        [
            str(BIN / "memesh"),
            "serve",
            "--workers",
            "2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--grpc-port",
            str(grpc_port),
            "--grpc-data-port",
            str(data_port),
            "--data-dir",
            str(tmp_path / "data"),
            "--engine",
            "hash",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 240
        heads = 0
        while time.monotonic() < deadline and heads < 2:
            assert proc.poll() is None, (tmp_path / "workers.log").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                heads = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()["detail"].get("heads", 0)
            time.sleep(0.5)
        assert heads == 2, (tmp_path / "workers.log").read_text()[-3000:]
        pids = {httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).headers.get("x-memesh-head") for _ in range(40)}
        assert len(pids - {None}) == 2, f"connections reached {pids}: the kernel spreads them over both heads"
    finally:
        proc.terminate()
        assert proc.wait(90) == 0, (tmp_path / "workers.log").read_text()[-3000:]
        log.close()
    assert subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True).stdout == b"", "a head outlived the first"


def test_an_embedder_pool_embeds_for_the_heads(ray_address: str, tmp_path: Path) -> None:
    """``embedding.pool`` on the real Ray: writes and recalls work, and the embedder actors did the encoding."""
    import ray

    server = Server(tmp_path / "data", ray_address, "hash", {"MEMESH_EMBEDDING__POOL": "2"}).start()
    try:
        key = server.issue("pool", "Writer", "w")["plaintext_secret"]
        with server.http(key) as http:
            cell = http.post("/v1/cells", json={"content": "the payroll run finished late", "cell_type": "Fact"})
            assert cell.status_code == 201, cell.text
            found = http.post("/v1/recall", json={"text": "payroll run late", "k": 3}).json()
            assert cell.json()["id"] in str(found)
        texts = 0
        for i in range(2):
            health = ray.get(ray.get_actor(f"embedder:{i}", namespace=server.namespace).health.remote(), timeout=30)
            texts += health["embed_texts"]
        assert texts >= 3, "the head embedded on its own: the pool was not used"
    finally:
        server.stop()


def test_the_real_model_runs_in_one_embedder_actor_per_cpu_by_default(server: Server) -> None:
    """With no ``embedding.pool`` set, a model engine on Ray embeds in embedder actors, one per usable CPU
    (at most DEFAULT_POOL_MAX), each loaded before the server says it is up, and not in the head. The shared
    server runs the default engine: ONNX Runtime's (``minilm-onnx``)."""
    assert _embeds_in_its_pool(server) == "minilm-onnx-all-MiniLM-L6-v2"


def test_the_torch_engine_runs_in_the_pool_too(ray_address: str, tmp_path: Path) -> None:
    """``--engine minilm`` (torch, the default before ``minilm-onnx``): the same pool, each copy's torch on its
    share of the CPUs although Ray starts the actors with ``OMP_NUM_THREADS=1``."""
    server = Server(tmp_path / "data", ray_address, "minilm").start()
    try:
        assert _embeds_in_its_pool(server) == "minilm-all-MiniLM-L6-v2"
    finally:
        server.stop()


def _embeds_in_its_pool(server: Server) -> str:
    """Write and recall through ``server``, check its embedder actors did the encoding on their threads, and
    return the engine the written cell records."""
    import ray

    pool = min(usable_cpus(), DEFAULT_POOL_MAX)
    key = server.issue("pool-default", "Writer", "w")["plaintext_secret"]
    embedders = [ray.get_actor(f"embedder:{i}", namespace=server.namespace) for i in range(pool)]
    before = [ray.get(e.health.remote(), timeout=30) for e in embedders]
    assert all(h["embed_texts"] >= 1 for h in before), f"an actor's model was not loaded at start: {before}"
    with server.http(key) as http:
        cell = http.post("/v1/cells", json={"content": "the invoice batch was re-sent to the bank", "cell_type": "Fact"})
        assert cell.status_code == 201, cell.text
        found = http.post("/v1/recall", json={"text": "payment file sent again", "k": 3}).json()
        assert cell.json()["id"] in str(found)
    after = [ray.get(e.health.remote(), timeout=30) for e in embedders]
    assert sum(h["embed_texts"] for h in after) >= sum(h["embed_texts"] for h in before) + 2, "the head embedded on its own"
    # Ray starts the actors with OMP_NUM_THREADS=1; the usable CPUs are shared out over the copies instead
    assert all(h["model_threads"] == max(1, usable_cpus() // pool) for h in after), after
    assert len({h["pid"] for h in after}) == pool, "each copy of the model has its own process"
    with pytest.raises(ValueError):
        ray.get_actor(f"embedder:{pool}", namespace=server.namespace)
    return str(cell.json()["node_type"]["Cell"]["embedding_engine"])

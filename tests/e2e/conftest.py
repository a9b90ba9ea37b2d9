"""``memesh serve`` as a real subprocess on free loopback ports.

Each server joins the session's shared Ray (``--ray-address``) in a namespace
of its own, so a restart gets fresh actors that reload from storage.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, data_dir: Path, ray_address: str, engine: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.ray_address = ray_address
        self.engine = engine
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"server-{uuid.uuid4().hex[:6]}.log"

    @property
    def key_file(self) -> Path:
        return self.data_dir / "bootstrap-admin.key"

    def start(self, timeout_s: float = 180.0) -> Server:
        self.port, self.grpc_port = free_port(), free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MEMESH_RAY__NAMESPACE": f"e2e-{uuid.uuid4().hex[:8]}", **self.extra_env}
        args = [
            str(BIN / "memesh"),
            "serve",
            "--ray-address",
            self.ray_address,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--grpc-port",
            str(self.grpc_port),
            "--data-dir",
            str(self.data_dir),
            "--engine",
            self.engine,
        ]
        self.log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"memesh serve exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop(signal.SIGKILL)
        raise AssertionError(f"memesh serve not healthy after {timeout_s}s:\n{self.output()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return int(self.proc.returncode)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"x-service-key": key} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def admin(self, *args: str, key_file: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [
            str(BIN / "memesh"),
            "admin",
            "--address",
            f"127.0.0.1:{self.grpc_port}",
            "--key-file",
            str(key_file or self.key_file),
            *args,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def issue(self, tenant: str = "acme", role: str = "Writer", name: str = "agent", *extra: str) -> dict[str, Any]:
        out = self.admin("agents", "issue", "--tenant", tenant, "--role", role, "--display-name", name, *extra)
        issued: dict[str, Any] = json.loads(out.stdout)
        return issued


@pytest.fixture(scope="session")
def server(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with the real embedding model for the e2e tests that can share it."""
    # A small Read bucket (per caller) so the rate-limit test can reach 429 quickly.
    env = {"MEMESH_RATE_LIMITS__READ__RATE": "20", "MEMESH_RATE_LIMITS__READ__BURST": "60"}
    srv = Server(tmp_path_factory.mktemp("e2e") / "data", ray_address, "minilm", env).start()
    yield srv
    srv.stop()


def assert_envelope(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code

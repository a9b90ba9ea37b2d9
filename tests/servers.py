"""``memesh serve`` as a real subprocess on free loopback ports, for the e2e and adversarial tiers.

Each server joins the session's shared Ray (``--ray-address``) in a namespace
of its own, so a restart gets fresh actors that reload from storage. The
session fixtures here (``server``, ``oidc_provider``, ``admin_server``) are
registered for every tier by ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urljoin

import httpx
import pytest
from websockets.exceptions import InvalidStatus

BIN = Path(sys.executable).parent


RAY_WORKER_PORTS = range(10_002, 20_000)  # Ray's default min/max worker ports


def _ephemeral_ports() -> range:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32_768, 60_999
    return range(low, high + 1)


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on and never handed out before in this process, taken below the
    kernel's ephemeral range and above Ray's worker ports: a port the kernel hands out could be taken by
    any outgoing connection (Ray makes many) between this check and the server's bind, which failed a
    run with EADDRINUSE; and a server's three ports are chosen before it binds any, so a random pick
    could repeat within them (a CI run gave REST and the gRPC data plane the same port). Each
    pytest-xdist process draws from its own share of the range."""
    ephemeral = _ephemeral_ports()
    pool = range(RAY_WORKER_PORTS.stop, min(ephemeral.start, 65_536))
    # Under pytest-xdist each test process takes its own residue class, so two processes never hand out
    # the same port in the seconds between this check and their servers' binds.
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER", "gw0"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    pool = pool[int(worker.removeprefix("gw") or 0) % workers :: workers]
    for _ in range(200 if len(pool) else 0):
        port = random.choice(pool)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket() as s:  # no private range on this machine: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, data_dir: Path, ray_address: str, engine: str | None, env: dict[str, str] | None = None) -> None:
        """``engine`` None: the server's default engine (no ``--engine``)."""
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
        self.port, self.grpc_port, self.grpc_data_port = free_port(), free_port(), free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.grpc_data_address = f"127.0.0.1:{self.grpc_data_port}"
        self.namespace = f"e2e-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "MEMESH_RAY__NAMESPACE": self.namespace,
            "MEMESH_SERVER__GRPC_DATA_HOST": "127.0.0.1",
            **self.extra_env,
        }
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
            "--grpc-data-port",
            str(self.grpc_data_port),
            "--data-dir",
            str(self.data_dir),
            *(["--engine", self.engine] if self.engine else []),
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

    def kill9(self, timeout_s: float = 60.0) -> None:
        """SIGKILL the head (no shutdown at all), then wait until Ray has reaped the actors it owned, so
        the next start is the only writer of the data (as after a machine loses the whole server)."""
        import ray

        self.stop(signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get_actor("registry", namespace=self.namespace)
            except ValueError:
                return
            except Exception:  # mid-teardown, Ray's lookup can fail half-way (an AssertionError inside Ray when
                pass  # the actor's class record is already gone from the GCS): not gone yet, so ask again
            time.sleep(0.2)
        raise AssertionError(f"the killed head's actors in {self.namespace} are still alive after {timeout_s}s")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"x-service-key": key} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def admin(
        self, *args: str, key_file: Path | None = None, check: bool = True, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        cmd = [
            str(BIN / "memesh"),
            "admin",
            "--address",
            f"127.0.0.1:{self.grpc_port}",
            "--key-file",
            str(key_file or self.key_file),
            *args,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def issue(self, tenant: str = "acme", role: str = "Writer", name: str = "agent", *extra: str) -> dict[str, Any]:
        out = self.admin("agents", "issue", "--tenant", tenant, "--role", role, "--display-name", name, *extra)
        issued: dict[str, Any] = json.loads(out.stdout)
        return issued


def ack_first_delivery(http: httpx.Client, timeout_s: float = 60.0) -> int:
    """Pull (bounded) until the listener behind ``http`` holds a delivery, acknowledge the oldest; its seq."""
    deadline = time.monotonic() + timeout_s
    while not (page := http.post("/v1/inbox:pull", json={}).json())["items"]:
        assert time.monotonic() < deadline, "no delivery reached the listener"
        time.sleep(0.2)
    acked = int(min(i["delivery_seq"] for i in page["items"]))
    assert http.post("/v1/inbox:pull", json={"ack": acked}).json()["cursor"] == acked
    return acked


T = TypeVar("T")


def enter_when_admitted(stack: ExitStack, opener: Callable[[], AbstractContextManager[T]], timeout_s: float) -> T:
    """Open a WebSocket stream into ``stack``, again while the server answers 429: a slot a closed client held
    comes back once the server has seen it go. Anything else, or a 429 past ``timeout_s``, fails the test."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return stack.enter_context(opener())
        except InvalidStatus as exc:
            assert exc.response.status_code == 429 and time.monotonic() < deadline, exc
            time.sleep(0.2)


class SharedServers:
    """Servers that consecutive test modules share, each started at its first use and stopped as soon as
    the next test's file does not use it.

    A deployment alive and idle still costs CPU: Ray's timers took about 8 ms a second in each of its
    actor processes. Session-scoped, each of these servers lived from its first test to the end of the
    run on both pytest-xdist processes, and one run's process accounting found some 400 s of CPU (of
    2,100) spent by idle actors. ``make test`` sends every file in ``SHARED_SERVER_FILES`` to one
    process as one unit of work (``tests/conftest.py``), ordered so each server's files are consecutive:
    each server starts once in a run and stops after its last file. Whatever the scheduling, a test
    gets a running server: one stopped early is started again (on fresh data) by the next module."""

    def __init__(self) -> None:
        self._running: dict[str, Server] = {}
        self._failed: dict[str, BaseException] = {}  # a start that failed fails every later module at once
        self.users: dict[str, set[Path]] = {}  # fixture -> the test files using it (set at collection, tests/conftest.py)
        self.next_item: pytest.Item | None = None  # the test after the one being torn down (tests/conftest.py)

    def acquire(self, name: str, start: Callable[[], Server]) -> Server:
        """The running server ``name``, started now if none runs. A start that failed is not tried again:
        each of the fifteen files would wait out its own start timeout (the session fixture it replaced
        failed once, and pytest gave every later test that error)."""
        if name in self._failed:
            raise AssertionError(f"the shared server {name} failed to start earlier in this run") from self._failed[name]
        if name not in self._running:
            try:
                self._running[name] = start()
            except BaseException as exc:
                self._failed[name] = exc
                raise
        return self._running[name]

    def release(self, name: str) -> None:
        """Stop ``name`` unless the next test's file uses it too."""
        following = self.next_item
        if following is not None and following.path in self.users.get(name, ()):
            return
        srv = self._running.pop(name, None)
        if srv is not None:
            srv.stop()


SHARED = SharedServers()
SHARED_FIXTURES = ("server", "admin_server")
SHARED_SERVER_FILES = {  # every test file using one of SHARED_FIXTURES: one unit of work (tests/conftest.py checks)
    "tests/adversarial/test_stream_revocation.py",
    "tests/e2e/test_a2a.py",
    "tests/e2e/test_admin_api.py",
    "tests/e2e/test_agent_and_operator.py",
    "tests/e2e/test_cells.py",
    "tests/e2e/test_http_framing.py",
    "tests/e2e/test_console_browser.py",
    "tests/e2e/test_console_login.py",
    "tests/e2e/test_data_lifecycle_cli.py",
    "tests/e2e/test_grpc_data.py",
    "tests/e2e/test_heads.py",
    "tests/e2e/test_mcp.py",
    "tests/e2e/test_mcp_hosts.py",
    "tests/e2e/test_observatory.py",
    "tests/e2e/test_propagation.py",
    "tests/e2e/test_sdk.py",
}


@pytest.fixture(scope="module")
def server(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with the real embedding model, the default engine (``minilm-onnx``), for the e2e tests that can
    share it (``SharedServers``)."""
    # A small Read bucket (per caller) so the rate-limit test can reach 429 quickly; A2A on (tests/e2e/test_a2a.py).
    env = {"MEMESH_RATE_LIMITS__READ__RATE": "20", "MEMESH_RATE_LIMITS__READ__BURST": "60", "MEMESH_A2A__ENABLED": "1"}
    yield SHARED.acquire("server", lambda: Server(tmp_path_factory.mktemp("e2e") / "data", ray_address, None, env).start())
    SHARED.release("server")


def audit_rows(server: Server) -> list[dict[str, Any]]:
    """The server's audit table as stored, in chain order (read through LanceDB, as an auditor would)."""
    import lancedb

    table = lancedb.connect(str(server.data_dir / "lance")).open_table("audit_log")
    return sorted(table.to_arrow().to_pylist(), key=lambda r: r["seq"])


def assert_envelope(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code


# ---------------------------------------------------------------- operator console (OIDC)
# A real OpenID provider (npm oidc-provider, tests/oidc; `make test` runs `npm ci` there)
# on a free loopback port for the session, and a headless browser for its login pages.
OIDC_DIR = Path(__file__).resolve().parent / "oidc"
OIDC_CLIENT_ID = "memesh-console"
OIDC_CLIENT_SECRET = "memesh-console-test-secret"
BOOTSTRAP_SUBJECT = "root-operator"
_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


@dataclass(frozen=True)
class OidcProvider:
    issuer: str
    client_id: str = OIDC_CLIENT_ID
    client_secret: str = OIDC_CLIENT_SECRET

    def console_env(self, bootstrap_subject: str = BOOTSTRAP_SUBJECT) -> dict[str, str]:
        """The environment of a memesh server whose console logs in with this provider."""
        return {
            "MEMESH_ADMIN__CONSOLE_ENABLED": "true",
            "MEMESH_ADMIN__OIDC_ISSUER": self.issuer,
            "MEMESH_ADMIN__OIDC_CLIENT_ID": self.client_id,
            "MEMESH_ADMIN__OIDC_CLIENT_SECRET": self.client_secret,
            "MEMESH_ADMIN__BOOTSTRAP_OIDC_SUBJECT": bootstrap_subject,
        }


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """oidc-provider listening on 127.0.0.1 for the whole session; any login name is a subject."""
    node = shutil.which("node")
    if node is None or not (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("the test OpenID provider is not installed: run `npm ci --prefix tests/oidc` (make test does)")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("oidc") / "provider.log"
    env = {**os.environ, "OIDC_CLIENT_ID": OIDC_CLIENT_ID, "OIDC_CLIENT_SECRET": OIDC_CLIENT_SECRET}
    with log_path.open("ab") as log:
        proc = subprocess.Popen([node, "provider.mjs", str(port)], cwd=OIDC_DIR, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the OpenID provider exited with {proc.returncode}:\n{log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the OpenID provider did not start:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield OidcProvider(issuer)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass
class ConsoleLogin:
    """One headless login: the memesh client (holding its cookies) and the answers along the way."""

    client: httpx.Client
    login: httpx.Response  # GET /admin/auth/login
    callback: httpx.Response  # GET /admin/auth/callback


def console_login_steps(base_url: str, provider: OidcProvider, subject: str, max_steps: int = 12) -> ConsoleLogin:
    """/admin/auth/login -> the provider's /auth -> its login page (any password) -> consent ->
    the memesh callback. Returns whatever the callback answered; nothing is asserted about it."""
    client = httpx.Client(base_url=base_url, timeout=30)
    login = client.get("/admin/auth/login")
    assert login.status_code == 302, login.text
    url = login.headers["location"]
    assert url.startswith(provider.issuer + "/"), url
    with httpx.Client(timeout=30) as browser:  # the operator's browser at the provider (its own cookies)
        for _ in range(max_steps):
            if url.startswith(base_url + "/"):
                break
            page = browser.get(url)
            if page.status_code in (302, 303):
                url = urljoin(url, page.headers["location"])
                continue
            assert page.status_code == 200, page.text[-500:]
            action = _FORM_ACTION.search(page.text)
            assert action is not None, page.text[-500:]
            if 'name="login"' in page.text:
                form = {"prompt": "login", "login": subject, "password": "x"}
            else:
                form = {"prompt": "consent"}
            answer = browser.post(urljoin(url, action.group(1)), data=form)
            assert answer.status_code in (302, 303), answer.text[-500:]
            url = urljoin(url, answer.headers["location"])
        else:
            raise AssertionError(f"the provider did not send the browser back after {max_steps} steps")
    return ConsoleLogin(client, login, client.get(url))


def console_login(base_url: str, provider: OidcProvider, subject: str) -> httpx.Client:
    """An httpx client holding a ``service_admin_session`` cookie for ``subject`` (the login must succeed)."""
    steps = console_login_steps(base_url, provider, subject)
    assert steps.callback.status_code == 302, steps.callback.text
    assert steps.callback.headers["location"] == "/admin"
    assert steps.client.cookies.get("service_admin_session")
    return steps.client


@pytest.fixture(scope="module")
def admin_server(ray_address: str, tmp_path_factory: pytest.TempPathFactory, oidc_provider: OidcProvider) -> Iterator[Server]:
    """A server with the operator console on (hash engine), logging in with ``oidc_provider``;
    ``root-operator`` is its bootstrap ServiceAdmin subject. Shared as ``server`` is (``SharedServers``)."""
    # A batch is charged per cell: the reembed test writes 512 cells in a few seconds.
    env = {**oidc_provider.console_env(), "MEMESH_OBSERVATORY__ENABLED": "true", "MEMESH_RATE_LIMITS__WRITE__BURST": "1000"}
    yield SHARED.acquire(
        "admin_server", lambda: Server(tmp_path_factory.mktemp("console") / "data", ray_address, "hash", env).start()
    )
    SHARED.release("admin_server")

"""Shared parts of the benchmarks: a real ``memesh serve`` on loopback, keys,
text and vector generation, percentiles, CPU accounting and result tables.

Every wait here is bounded; everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.http_clients import AiohttpClient, StdlibClient

LoadClient = AiohttpClient | httpx.AsyncClient  # concurrent load: aiohttp, or httpx to compare (bench.http_clients)

REPO = Path(__file__).resolve().parent.parent
MEMESH = Path(sys.executable).parent / "memesh"
JSON_HEADERS = {"content-type": "application/json"}
DIMS = 384


# --------------------------------------------------------------------- machine
def machine_info() -> dict[str, Any]:
    """What the figures were measured on (the load average shows other work on the box)."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "git": git_state(),
    }


def git_state() -> str:
    """HEAD and how many files differ from it: the code measured (the tree may be mid-change)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    changed = [line for line in dirty.stdout.splitlines() if line.strip() and not line[3:].startswith(("bench/", "docs/"))]
    return f"{head.stdout.strip()} + {len(changed)} uncommitted changed files outside bench/ and docs/"


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class MemeshServer:
    """``memesh serve`` in a subprocess with a temporary data dir, rate limits off.

    Use as a context manager: it waits (bounded) for ``/healthz`` to answer 200
    and, on exit, sends SIGTERM and waits for a clean shutdown (SIGKILL only if
    that takes longer than ``stop_timeout_s``).
    """

    def __init__(
        self,
        engine: str,
        *,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 240.0,
        stop_timeout_s: float = 60.0,
        keep_data: bool = False,
    ) -> None:
        self.engine = engine
        self.extra_env = env or {}
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.keep_data = keep_data
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"memesh-bench-{engine}-"))
        self.port = free_port()
        self.grpc_port = free_port()
        while self.grpc_port == self.port:
            self.grpc_port = free_port()
        self.grpc_data_port = free_port()
        while self.grpc_data_port in (self.port, self.grpc_port):
            self.grpc_data_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0
        self.idle_busy = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def __enter__(self) -> MemeshServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        env = os.environ.copy()
        env.update(
            {
                "MEMESH_RATE_LIMITS__READ__RATE": "0",
                "MEMESH_RATE_LIMITS__WRITE__RATE": "0",
                "MEMESH_SERVER__LOG_LEVEL": "warning",
                "MEMESH_SERVER__GRPC_DATA_HOST": "127.0.0.1",
                "RAY_USAGE_STATS_ENABLED": "0",
                # a stray ./memesh.toml must not change what is measured: point at an empty one
                "MEMESH_CONFIG": str(self._empty_config()),
            }
        )
        env.update(self.extra_env)
        cmd = [
            str(MEMESH),
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--grpc-port",
            str(self.grpc_port),
            "--grpc-data-port",
            str(self.grpc_data_port),
            "--engine",
            self.engine,
        ]
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.data_dir)
        self._wait_healthy()
        self.startup_s = time.perf_counter() - started
        before = self.cpu()
        time.sleep(2.0)
        delta = self.cpu().since(before)
        # what the idle deployment keeps busy (Ray's own threads and idle actors): settle's floor
        self.idle_busy = sum(v for k, v in delta.items() if k != "wall") / max(delta["wall"], 1e-9)

    def _empty_config(self) -> Path:
        path = self.data_dir / "bench-memesh.toml"
        path.write_text("# memesh bench: defaults, overridden by MEMESH_* variables and flags\n")
        return path

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"memesh serve exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.base_url}/healthz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
        raise RuntimeError(f"memesh serve not healthy after {self.startup_timeout_s:.0f} s:\n{self.log_tail()}")

    def issue_key(self, tenant: str = "bench", role: str = "Writer", name: str = "bench") -> str:
        cmd = [
            str(MEMESH),
            "admin",
            "--address",
            f"127.0.0.1:{self.grpc_port}",
            "--key-file",
            str(self.data_dir / "bootstrap-admin.key"),
            "agents",
            "issue",
            "--tenant",
            tenant,
            "--role",
            role,
            "--display-name",
            name,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"issuing a key failed: {done.stderr.strip()}")
        secret: str = json.loads(done.stdout)["plaintext_secret"]
        return secret

    def client(self, key: str, timeout_s: float = 120.0) -> httpx.Client:
        """A keep-alive client carrying ``key``; loopback, no proxies from the environment."""
        return httpx.Client(base_url=self.base_url, headers={"x-service-key": key}, timeout=timeout_s, trust_env=False)

    def async_client(self, key: str, connections: int, timeout_s: float = 120.0) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(
            base_url=self.base_url, headers={"x-service-key": key}, timeout=timeout_s, limits=limits, trust_env=False
        )

    def lean_client(self, key: str, timeout_s: float = 120.0) -> StdlibClient:
        """A keep-alive ``http.client`` connection carrying ``key``: what times lone requests (``bench.http_clients``)."""
        return StdlibClient("127.0.0.1", self.port, {"x-service-key": key}, timeout_s)

    def load_client(self, key: str, connections: int, kind: str = "lean", timeout_s: float = 120.0) -> LoadClient:
        """Concurrent load carrying ``key`` on ``connections`` keep-alive connections: aiohttp (``lean``), or
        ``httpx`` to hold a figure against runs before the lean clients (``bench.http_clients``)."""
        if kind == "httpx":
            return self.async_client(key, connections, timeout_s)
        return AiohttpClient(self.base_url, {"x-service-key": key}, connections, timeout_s)

    def cpu(self) -> CpuSnapshot:
        return CpuSnapshot.of(self.proc.pid if self.proc else None)

    def settle(self, max_wait_s: float, idle_cores: float = 0.15, window_s: float = 1.0) -> tuple[float, bool]:
        """Wait (bounded) until the walks started by writes have drained (``memesh_walk_backlog`` 0)
        and the server's process tree is back near its idle level (the larger of ``idle_cores``
        and 1.5x what it kept busy just after start: idle actors cost CPU on a slow machine).
        Returns (seconds until the first of three quiet windows, settled)."""
        started = time.perf_counter()
        self.wait_walks(max_wait_s)
        floor = max(idle_cores, 1.5 * self.idle_busy + 0.05)
        quiet_since: float | None = None
        quiet = 0
        previous = self.cpu()
        while time.perf_counter() - started < max_wait_s:
            time.sleep(window_s)
            now = self.cpu()
            delta = now.since(previous)
            busy = sum(v for k, v in delta.items() if k != "wall") / max(delta["wall"], 1e-9)
            if busy < floor:
                quiet += 1
                quiet_since = previous.at if quiet_since is None else quiet_since
                if quiet >= 3:
                    return quiet_since - started, True
            else:
                quiet, quiet_since = 0, None
            previous = now
        return time.perf_counter() - started, False

    def wait_walks(self, max_wait_s: float) -> bool:
        """Wait (bounded) until ``/metrics`` shows no walk waiting; False when it did not drain in time."""
        deadline = time.monotonic() + max_wait_s
        with httpx.Client(trust_env=False, timeout=10.0) as client:
            while time.monotonic() < deadline:
                try:
                    text = client.get(f"{self.base_url}/metrics").text
                except httpx.HTTPError:
                    text = ""
                backlog = [line for line in text.splitlines() if line.startswith("memesh_walk_backlog ")]
                if backlog and float(backlog[0].split()[1]) == 0:
                    return True
                time.sleep(0.5)
        return False

    def walks_decided(self) -> float:
        """``memesh_walks_total`` on ``/metrics``: walks the walkers have finished since they started (as fresh
        as ``server.health_cache_s`` allows)."""
        text = httpx.get(f"{self.base_url}/metrics", trust_env=False, timeout=10.0).text
        return next((float(line.split()[1]) for line in text.splitlines() if line.startswith("memesh_walks_total ")), 0.0)

    def wait_walked(self, target: float, max_wait_s: float, poll_s: float = 0.05) -> tuple[float, bool]:
        """Wait (bounded) until ``memesh_walks_total`` reaches ``target`` (each written cell starts one walk, so
        the walks before the writes plus the cells written): returns (seconds waited, reached). To within
        ``poll_s`` plus ``server.health_cache_s``, the time until the last of those walks is done."""
        started = time.perf_counter()
        while time.perf_counter() - started < max_wait_s:
            if self.walks_decided() >= target:
                return time.perf_counter() - started, True
            time.sleep(poll_s)
        return time.perf_counter() - started, False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                print(
                    f"  ! memesh serve (pid {proc.pid}) ignored SIGTERM for {self.stop_timeout_s:.0f} s; killing it", flush=True
                )
                proc.kill()
                proc.wait(timeout=10)
        if not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


# ------------------------------------------------------------- CPU accounting
def _label(cmdline: list[str], root: int, pid: int) -> str:
    if pid == root:
        return "head"
    text = " ".join(cmdline)
    if "ray::" in text:
        name = text.split("ray::", 1)[1].split()[0].split(".")[0]
        return "Ray idle workers" if name.upper() == "IDLE" else f"{name} actors"
    return "Ray system"


@dataclass
class CpuSnapshot:
    """User+system CPU seconds of the server's process tree, grouped by role."""

    by_role: dict[str, float] = field(default_factory=dict)
    at: float = 0.0

    @classmethod
    def of(cls, root: int | None) -> CpuSnapshot:
        snap = cls(at=time.perf_counter())
        if root is None:
            return snap
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil comes with ray
            return snap
        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            return snap
        for proc in procs:
            try:
                times = proc.cpu_times()
                role = _label(proc.cmdline(), root, proc.pid)
            except psutil.Error:
                continue
            snap.by_role[role] = snap.by_role.get(role, 0.0) + times.user + times.system
        return snap

    def since(self, earlier: CpuSnapshot) -> dict[str, float]:
        """CPU seconds spent per role between ``earlier`` and this snapshot, plus wall seconds."""
        out = {role: max(0.0, secs - earlier.by_role.get(role, 0.0)) for role, secs in self.by_role.items()}
        out["wall"] = self.at - earlier.at
        return out


def cpu_line(delta: dict[str, float], requests: int) -> str:
    """One line: server CPU ms per request by role (and total cores busy)."""
    wall = delta.get("wall", 0.0) or 1e-9
    parts = [f"{role} {1000 * secs / max(requests, 1):.1f}" for role, secs in sorted(delta.items()) if role != "wall"]
    total = sum(secs for role, secs in delta.items() if role != "wall")
    return (
        f"server CPU ms/request: {', '.join(parts)}; total {1000 * total / max(requests, 1):.1f} ({total / wall:.2f} cores busy)"
    )


# ------------------------------------------------------------------ statistics
@dataclass(frozen=True)
class Stats:
    n: int
    p50_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Stats:
        ms = np.asarray(seconds, dtype=np.float64) * 1000.0
        if ms.size == 0:
            return cls(0, float("nan"), float("nan"), float("nan"))
        return cls(int(ms.size), percentile(ms, 50), percentile(ms, 99), float(ms.mean()))


def percentile(values: Sequence[float] | np.ndarray, p: float) -> float:
    """Linear-interpolated percentile (numpy's default); p99 of 200 samples lies between the two worst."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), p))


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` then ``t[0]`` holds the elapsed seconds."""
    box: list[float] = []
    started = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - started)


# --------------------------------------------------------------------- results
@dataclass
class Row:
    section: str
    metric: str
    value: float
    unit: str
    baseline: str = ""
    baseline_value: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline_value is None or not self.baseline_value:
            return None
        return self.value / self.baseline_value

    def ratio_text(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return ""
        return f"{100 * ratio:.0f}%" if self.unit.endswith("/s") else f"{ratio:.2f}x"


@dataclass
class Report:
    """Figures collected by the benchmarks, each beside its same-run baseline."""

    rows: list[Row] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def add(
        self,
        section: str,
        metric: str,
        value: float,
        unit: str,
        baseline: str = "",
        baseline_value: float | None = None,
        note: str = "",
    ) -> Row:
        row = Row(section, metric, value, unit, baseline, baseline_value, note)
        self.rows.append(row)
        print(
            f"  {metric}: {_num(value)} {unit}"
            + (f"  | {baseline}: {_num(baseline_value)}  -> {row.ratio_text()}" if baseline else "")
        )
        return row

    def print_table(self, section: str | None = None) -> None:
        rows = [r for r in self.rows if section is None or r.section == section]
        if not rows:
            return
        headers = ["section", "figure", "value", "baseline (same run)", "baseline value", "ratio"]
        body = [
            [
                r.section,
                r.metric,
                f"{_num(r.value)} {r.unit}",
                r.baseline,
                f"{_num(r.baseline_value)} {r.unit}" if r.baseline_value is not None else "",
                r.ratio_text(),
            ]
            for r in rows
        ]
        print_table(headers, body)

    def to_json(self, path: Path) -> None:
        data = {"info": self.info, "rows": [asdict(r) | {"ratio": r.ratio} for r in self.rows]}
        path.write_text(json.dumps(data, indent=2) + "\n")


def _num(value: float | None) -> str:
    if value is None:
        return ""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def banner(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


# ------------------------------------------------------------------ test data
_COMPONENTS = [
    "billing service", "auth gateway", "search indexer", "payment worker", "deploy pipeline", "metrics exporter",
    "session store", "feature flag service", "email dispatcher", "image resizer", "rate limiter", "job scheduler",
    "config loader", "audit logger", "cache layer", "message broker", "user profile API", "report generator",
    "webhook relay", "backup agent", "vector index", "inbox shard", "GraphQL layer", "mobile sync endpoint",
    "invoice exporter", "notification fan-out", "CI runner pool", "tenant router", "object store client", "SSO bridge",
]  # fmt: skip
_MODIFIERS = [
    "staging", "production", "nightly", "legacy", "new", "regional", "internal", "public", "canary", "batch",
    "EU", "US-east", "read-only", "primary", "replica",
]  # fmt: skip
_BEHAVIOURS = [
    "times out", "drops requests", "retries too aggressively", "leaks memory", "returns stale data",
    "needs a larger heap", "logs every payload", "double-charges some customers", "loses the trace context",
    "serialises writes", "falls back to the slow path", "reorders messages", "fills the disk with temp files",
    "opens a connection per request", "holds a lock across the network call", "skips validation",
]  # fmt: skip
_RELATIONS = [
    ("depends on", "depend on"), ("blocks on", "block on"), ("shares a database with", "share a database with"),
    ("is rate limited by", "be rate limited by"), ("caches results from", "cache results from"),
    ("writes audit rows to", "write audit rows to"), ("reads its secrets from", "read its secrets from"),
    ("calls", "call"), ("was split out of", "be split out of"), ("replays events into", "replay events into"),
]  # fmt: skip
_CONDITIONS = [
    "when the queue is full", "after a cold start", "under peak load", "during the nightly backup",
    "if the TTL exceeds {n} seconds", "when more than {n} clients connect", "on ARM hosts",
    "after the {month} upgrade", "while the index rebuilds", "when the disk is {p}% full",
    "if a tenant has more than {n} projects", "right after a failover", "when clocks drift by {n} ms",
]  # fmt: skip
_ACTIONS = [
    "use exponential backoff", "pin the client library to {v}", "move to a dedicated node pool", "batch its writes",
    "add an idempotency key", "shard by tenant", "cap the payload at {n} KB", "cache the token for {n} minutes",
    "drain connections before deploys", "keep a read replica warm", "verify signatures on every hop",
]  # fmt: skip
_REASONS = [
    "the last incident took {n} minutes to recover", "the vendor SLA only covers {p}% of requests",
    "the on-call team asked for it", "p99 latency doubled in {month}", "costs grew {p}% last quarter",
    "a customer audit requires it", "the old path cannot be traced",
]  # fmt: skip
_TAILS = [
    "", "", " (seen {n} times since {month})", " according to {person}", " in region {region}-{n}",
    " per the {month} postmortem", " on {n} of {m} hosts", " (build {v})", " for tenant t-{n}",
]  # fmt: skip
_REGIONS = ["eu-west", "us-east", "ap-south", "sa-east", "eu-north"]
_PEOPLE = ["Ana", "Bo", "Chen", "Dana", "Eli", "Farah", "Gus", "Hana", "Ivo", "Jules", "Kai", "Lena", "Mo", "Nia"]
_MONTHS = ["January", "March", "May", "July", "September", "November"]
_PROJECTS = ["ATLAS", "BORA", "CIRRUS", "DELTA", "EMBER", "FJORD"]
CELL_TYPES = ["Fact", "Lesson", "Risk", "Context", "Decision", "Task", "Preference"]


class SentenceGen:
    """Seeded, varied engineering-notes sentences built from word lists."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def _fill(self, text: str) -> str:
        r = self.rnd
        return text.format(
            n=r.randint(2, 500),
            m=r.randint(500, 900),
            p=r.randint(5, 99),
            month=r.choice(_MONTHS),
            v=f"{r.randint(1, 9)}.{r.randint(0, 30)}",
            person=r.choice(_PEOPLE),
            region=r.choice(_REGIONS),
        )

    def sentence(self) -> str:
        r = self.rnd
        comp, other = r.sample(_COMPONENTS, 2)
        mod = r.choice(_MODIFIERS)
        cond = self._fill(r.choice(_CONDITIONS))
        form = r.randrange(6)
        if form == 0:
            text = f"The {mod} {comp} {r.choice(_BEHAVIOURS)} {cond}."
        elif form == 1:
            text = f"Decision: the {comp} should {self._fill(r.choice(_ACTIONS))} because {self._fill(r.choice(_REASONS))}."
        elif form == 2:
            text = f"{r.choice(_PEOPLE)} noticed that the {mod} {comp} {r.choice(_RELATIONS)[0]} the {other} {cond}."
        elif form == 3:
            text = f"Lesson: never let the {comp} {r.choice(_RELATIONS)[1]} the {other}; it {r.choice(_BEHAVIOURS)} {cond}."
        elif form == 4:
            text = f"Ticket {r.choice(_PROJECTS)}-{r.randint(100, 9999)}: {mod} {comp} {r.choice(_BEHAVIOURS)} {cond}."
        else:
            text = f"Risk: if the {other} {r.choice(_BEHAVIOURS)}, the {comp} will {self._fill(r.choice(_ACTIONS))} too late."
        tail = self._fill(r.choice(_TAILS))
        return text[:-1] + tail + "." if tail else text

    def many(self, n: int) -> list[str]:
        return [self.sentence() for _ in range(n)]

    def cell(self, text: str, project_id: str, embedding: list[float] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "content": text,
            "cell_type": self.rnd.choice(CELL_TYPES),
            "salience": round(self.rnd.uniform(0.1, 0.9), 2),
            "project_id": project_id,
        }
        if embedding is not None:
            body["embedding"] = embedding
        return body


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)

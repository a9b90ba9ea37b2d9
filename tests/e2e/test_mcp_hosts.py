"""docs/mcp.md's host snippets, run as written by the hosts' own CLIs against a running server.

The CLIs are the real ones, pinned by ``tests/hosts/package-lock.json``
(``make test`` installs them). Each snippet is read from ``docs/mcp.md`` at
test time, so the doc is what is tested: only the example address is
replaced, and the key is the ``MEMESH_KEY`` variable the doc tells the user to
set. Each host runs in a home directory of its own with a clean environment
(no user config, no API key), stdin closed and a timeout on every call.

No model is ever called; every step is one the host performs against the MCP
server alone:

- Claude Code: the doc's ``claude mcp add`` line, then ``claude mcp list``
  (its health check connects: ``server/discover`` and ``tools/list``, 2026-07-28
  era) and ``claude -p /mcp``, a local slash command that runs no model turn:
  its stream-json ``init`` event names the tools the host loaded (the model
  address points at a closed loopback port, so nothing could leave anyway).
- Codex: the doc's ``config.toml``, checked with ``codex mcp get --json``
  (which only reads it), then ``codex app-server`` (its JSON-RPC over stdio),
  asked for ``mcpServerStatus/list`` (handshake era: ``initialize`` and
  ``tools/list``) and ``mcpServer/tool/call`` (a tool call with no turn).

A wrong key must make each host report memesh's 401, so none of these tests
passes unless the host's request reached memesh with the key.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from tests.e2e.test_mcp import TOOLS
from tests.servers import Server, free_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mcp.md"
HOSTS_BIN = ROOT / "tests" / "hosts" / "node_modules" / ".bin"
EXAMPLE = "https://memesh.example.com"  # the address the doc tells the user to replace
WRONG_KEY = "msh_not-a-key-memesh-issued"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def hosts_bin() -> Path:
    missing = [name for name in ("claude", "codex") if not (HOSTS_BIN / name).exists()]
    if missing:
        pytest.fail(f"the MCP host CLIs {missing} are not installed: run `npm ci --prefix tests/hosts` (make test does)")
    return HOSTS_BIN


def snippet(host: str) -> str:
    """The code block after the paragraph that starts with ``host`` in docs/mcp.md's "Configuring a host"."""
    section = DOC.read_text().split("\n## Configuring a host\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(rf"^{re.escape(host)}.*?\n\n```[a-z]*\n(.*?)\n```$", section, re.M | re.S)
    assert found, f"docs/mcp.md has no code block after {host!r} in 'Configuring a host'"
    return found.group(1)


def host_env(home: Path, key: str) -> dict[str, str]:
    """A clean environment: the pinned CLIs first on PATH, a fresh home, nothing inherited but PATH."""
    return {
        "PATH": f"{HOSTS_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "MEMESH_KEY": key,
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, update check or error reports
    }


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, encoding="utf-8", timeout=TIMEOUT_S
    )


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    return home, project


def claude_added(server: Server, tmp_path: Path, key: str) -> tuple[dict[str, str], Path]:
    """Runs the doc's Claude Code command in a fresh home; answers that home's environment and project."""
    home, project = dirs(tmp_path)
    env = host_env(home, key)
    command = snippet("Claude Code (").replace(EXAMPLE, server.base_url)
    assert command.startswith("claude mcp add "), command
    added = run(["sh", "-c", command], env, project)
    assert added.returncode == 0, added
    assert f"Added HTTP MCP server memesh with URL: {server.base_url}/mcp" in added.stdout, added.stdout
    return env, project


def test_claude_code_connects_and_loads_the_tools_with_the_documented_command(
    server: Server, hosts_bin: Path, tmp_path: Path
) -> None:
    key = server.issue("mcp-hosts", "Writer", "claude-code")["plaintext_secret"]
    env, project = claude_added(server, tmp_path, key)
    claude = str(hosts_bin / "claude")

    listed = run([claude, "mcp", "list"], env, project)
    assert listed.returncode == 0, listed
    assert f"memesh: {server.base_url}/mcp (HTTP) - ✔ Connected" in listed.stdout, listed.stdout

    no_model = {**env, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{free_port()}"}
    session = run([claude, "-p", "/mcp", "--output-format", "stream-json", "--verbose"], no_model, project)
    assert session.returncode == 0, session
    events = [json.loads(line) for line in session.stdout.splitlines() if line.startswith("{")]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert {s["name"]: s["status"] for s in init["mcp_servers"]} == {"memesh": "connected"}, init["mcp_servers"]
    assert {t for t in init["tools"] if t.startswith("mcp__memesh__")} == {f"mcp__memesh__{t}" for t in TOOLS}
    result = events[-1]
    assert result["type"] == "result" and result["num_turns"] == 0 and not result["is_error"], result


def test_claude_code_reports_memeshs_refusal_of_a_wrong_key(server: Server, hosts_bin: Path, tmp_path: Path) -> None:
    env, project = claude_added(server, tmp_path, WRONG_KEY)
    listed = run([str(hosts_bin / "claude"), "mcp", "list"], env, project)
    line = next((ln for ln in listed.stdout.splitlines() if ln.startswith("memesh: ")), "")
    assert line.startswith(f"memesh: {server.base_url}/mcp (HTTP) - ✘ Failed to connect"), listed.stdout
    assert "HTTP 401" in line and '"unauthorized"' in line, line


class AppServer:
    """``codex app-server`` on stdio: one JSON-RPC request at a time, each answer awaited with a timeout.

    A context manager: the process is started and initialized on entry and always ended on exit.
    """

    def __init__(self, codex: Path, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.args, self.env, self.cwd, self.log_path = [str(codex), "app-server"], env, cwd, log
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.next_id = 0

    def __enter__(self) -> AppServer:
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            self.args, env=self.env, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log
        )
        try:
            assert self.proc.stdout is not None
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
            self.request("initialize", {"clientInfo": {"name": "memesh-tests", "version": "1"}})
            self._send({"method": "initialized"})
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # end of input: the app server exits
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self.lines.put(line)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        self._send({"id": self.next_id, "method": method, "params": params})
        while True:  # notifications come in between; each wait is bounded by the timeout
            try:
                message = json.loads(self.lines.get(timeout=TIMEOUT_S))
            except queue.Empty:
                log = self.log_path.read_text(errors="replace")[-2000:]
                raise AssertionError(f"codex app-server did not answer {method} within {TIMEOUT_S} s:\n{log}") from None
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]


def codex_configured(server: Server, tmp_path: Path, key: str) -> tuple[dict[str, str], Path]:
    """Writes the doc's Codex config into a fresh home's ``~/.codex/config.toml``."""
    home, project = dirs(tmp_path)
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        snippet("Codex (`~/.codex/config.toml`").replace(EXAMPLE, server.base_url) + "\n"
    )
    return host_env(home, key), project


def memesh_status(codex: AppServer) -> dict[str, Any]:
    servers = codex.request("mcpServerStatus/list", {"serverName": "memesh", "detail": "toolsAndAuthOnly"})["data"]
    assert [s["name"] for s in servers] == ["memesh"], servers
    status: dict[str, Any] = servers[0]
    return status


def tool_answer(codex: AppServer, thread: str, tool: str, arguments: dict[str, Any]) -> Any:
    result = codex.request("mcpServer/tool/call", {"server": "memesh", "threadId": thread, "tool": tool, "arguments": arguments})
    assert result["isError"] is False, result
    return result["structuredContent"]  # what the tool's output schema describes


def test_codex_reads_the_documented_config_lists_the_tools_and_calls_them(
    server: Server, hosts_bin: Path, tmp_path: Path
) -> None:
    key = server.issue("mcp-hosts", "Writer", "codex")["plaintext_secret"]
    env, project = codex_configured(server, tmp_path, key)

    got = run([str(hosts_bin / "codex"), "mcp", "get", "memesh", "--json"], env, project)
    assert got.returncode == 0, got
    config = json.loads(got.stdout)
    transport = (config["transport"]["type"], config["transport"]["url"], config["transport"]["bearer_token_env_var"])
    assert config["enabled"] and transport == ("streamable_http", f"{server.base_url}/mcp", "MEMESH_KEY"), config

    with AppServer(hosts_bin / "codex", env, project, tmp_path / "app-server.log") as codex:
        status = memesh_status(codex)
        assert status["toolsError"] is None and status["authStatus"] == "bearerToken", status
        assert set(status["tools"]) == TOOLS
        thread = codex.request("thread/start", {"ephemeral": True, "cwd": str(project)})["thread"]["id"]
        content = "Codex wrote this through memesh: the nightly backup runs at 02:00 UTC."
        written = tool_answer(codex, thread, "write_cell", {"content": content, "cell_type": "Fact"})
        hits = tool_answer(codex, thread, "recall", {"text": "when does the nightly backup run", "k": 3})["result"]
        assert hits and hits[0]["node_id"] == written["node_id"], hits


def test_codex_reports_memeshs_refusal_of_a_wrong_key(server: Server, hosts_bin: Path, tmp_path: Path) -> None:
    env, project = codex_configured(server, tmp_path, WRONG_KEY)
    with AppServer(hosts_bin / "codex", env, project, tmp_path / "app-server.log") as codex:
        status = memesh_status(codex)
    assert status["tools"] == {} and "HTTP 401" in status["toolsError"] and '"unauthorized"' in status["toolsError"], status

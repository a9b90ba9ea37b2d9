"""The benchmarks' lean HTTP clients (bench.http_clients) against a real loopback server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.http_clients import AiohttpClient, StdlibClient


class Echo(BaseHTTPRequestHandler):
    """Answers every request with what it got, then closes the connection without saying so (as a server
    whose keep-alive timeout passed between two requests)."""

    protocol_version = "HTTP/1.1"
    connections = 0  # accepted so far (one handler per connection), read by the tests

    def setup(self) -> None:
        Echo.connections += 1
        super().setup()

    def _answer(self, status: int) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "key": self.headers.get("x-service-key"),
                "type": self.headers.get("content-type"),
                "body": self.rfile.read(length).decode(),
            }
        ).encode()
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.send_header("retry-after", "3")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_POST(self) -> None:
        self._answer(201 if self.path == "/made" else 429)

    def do_GET(self) -> None:
        self._answer(200)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture()
def echo() -> Iterator[ThreadingHTTPServer]:
    Echo.connections = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_the_stdlib_client_opens_a_new_connection_when_the_server_closed_the_idle_one(echo: ThreadingHTTPServer) -> None:
    with StdlibClient("127.0.0.1", echo.server_address[1], {"x-service-key": "k1"}, timeout_s=5) as client:
        first = client.post("/made", json={"a": 1}, headers={"content-type": "application/json"})
        time.sleep(0.1)  # the server has closed that connection by now
        second = client.get("/read")
    assert first.status_code == 201 and first.json() == {
        "method": "POST",
        "path": "/made",
        "key": "k1",
        "type": "application/json",
        "body": '{"a": 1}',
    }
    assert second.status_code == 200 and second.json()["method"] == "GET" and second.json()["body"] == ""
    assert Echo.connections == 2


async def test_the_aiohttp_client_answers_as_httpx_would(echo: ThreadingHTTPServer) -> None:
    base = f"http://127.0.0.1:{echo.server_address[1]}"
    async with AiohttpClient(base, {"x-service-key": "k2"}, connections=2, timeout_s=5) as client:
        made = await client.post("/made", content='{"b": 2}')
        await asyncio.sleep(0.1)  # the echo server closes each connection after its answer: let the client see it
        refused = await client.post("/other", json={"c": 3})
        await asyncio.sleep(0.1)
        read = await client.get("/read")
    assert made.status_code == 201 and made.json()["body"] == '{"b": 2}' and made.json()["type"] == "application/json"
    assert made.json()["key"] == "k2"
    assert refused.status_code == 429 and refused.headers["retry-after"] == "3"
    with pytest.raises(RuntimeError, match="answered 429"):
        refused.raise_for_status()
    assert read.status_code == 200 and read.text.startswith("{")


def test_the_stdlib_client_sends_a_json_body_as_json(echo: ThreadingHTTPServer) -> None:
    """``json=`` says what it sends, as httpx and aiohttp do (the server refuses an untyped body)."""
    with StdlibClient("127.0.0.1", echo.server_address[1], {"x-service-key": "k3"}, timeout_s=5) as client:
        sent = client.post("/made", json={"d": 4})
    assert sent.json()["type"] == "application/json" and sent.json()["body"] == '{"d": 4}'

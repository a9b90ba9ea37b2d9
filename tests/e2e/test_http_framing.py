"""Requests uvicorn itself refuses before the application sees them, over a real socket to ``memesh serve``:
spec section 7 holds for them too (every non-2xx answer is the error envelope)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.servers import Server


def raw(server: Server, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as bytes; (status, headers, body) of the answer, read until the server closes."""
    port = int(server.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):  # bounded by the socket timeout and the server's close
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/query HTTP/1.1\r\nHost: x\r\ncontent-length: abc\r\n\r\n{}",
        b"POST /v1/query HTTP/1.1\r\nHost: x\r\ncontent-length: -5\r\n\r\n{}",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n",
    ],
)
def test_a_request_the_server_cannot_parse_gets_the_envelope(server: Server, request_bytes: bytes) -> None:
    status, headers, body = raw(server, request_bytes)
    assert status == 400
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message"} and error["code"] == "validation" and error["message"]


def test_a_connection_whose_headers_do_not_arrive_is_closed(server: Server) -> None:
    """uvicorn kept a connection that sent nothing, or a header a byte at a time, open for ever: a socket each,
    without a key, until the head had none left. Both are closed HEADERS_TIMEOUT_S (10 s) on; a request whose
    headers arrive in time, on a connection that waited 8 s, is answered."""
    port = int(server.base_url.rsplit(":", 1)[1])
    silent = socket.create_connection(("127.0.0.1", port), timeout=20)
    dripping = socket.create_connection(("127.0.0.1", port), timeout=20)
    patient = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        opened = time.monotonic()
        dripping.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        time.sleep(8)
        patient.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert patient.recv(65536).startswith(b"HTTP/1.1 200")
        for sock in (silent, dripping):
            assert sock.recv(65536) == b""  # closed, with no answer (nothing was asked)
            assert 9 <= time.monotonic() - opened < 15
    finally:
        for sock in (silent, dripping, patient):
            sock.close()

"""Requests uvicorn itself refuses before the application sees them, over a real socket to ``memesh serve``:
spec section 7 holds for them too (every non-2xx answer is the error envelope)."""

from __future__ import annotations

import contextlib
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


def port_of(server: Server) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def answers(data: bytes) -> list[tuple[int, bytes]]:
    """The (status, body) of each answer in ``data``, several pipelined answers read off one connection."""
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = int(next(line.split(":", 1)[1] for line in lines if line.lower().startswith("content-length:")))
        found.append((int(lines[0].split()[1]), rest[:length]))
        data = rest[length:]
    return found


def test_headers_past_64_kib_are_refused_in_the_envelope(server: Server) -> None:
    """uvicorn set no bound on a request's headers: 400 MiB of header lines took the head to 1.2 GB."""
    lines = b"".join(b"x-filler-%d: %s\r\n" % (n, b"y" * 200) for n in range(340))  # about 72 KB
    status, headers, body = raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body)["error"] == {"code": "validation", "message": "the request line and headers exceed 65536 bytes"}
    just_under = b"".join(b"x-filler-%d: %s\r\n" % (n, b"y" * 200) for n in range(280))  # about 59 KB: served
    assert raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + just_under + b"\r\n")[0] == 200


def test_a_header_line_without_end_is_cut_off_and_holds_no_one_else_up(server: Server) -> None:
    """A header line that never ends, sent as fast as the socket takes it, made the parser copy what it held on
    every read: /healthz on another connection took 10 s (and failed) until the header timeout closed it."""
    flood = socket.create_connection(("127.0.0.1", port_of(server)), timeout=10)
    sent = 0
    try:
        flood.sendall(b"GET /v1/cells HTTP/1.1\r\nHost: x\r\nx-junk: ")
        piece = b"x" * 65536
        started = time.monotonic()
        with pytest.raises(OSError):  # the server closes it: a reset or a broken pipe
            while sent < 64 * 1024 * 1024 and time.monotonic() - started < 20:
                flood.sendall(piece)
                sent += len(piece)
        assert sent < 16 * 1024 * 1024  # cut off after 64 KiB (and what the kernel's buffers took), not at 10 s
    finally:
        flood.close()
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as other:
        asked = time.monotonic()
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert other.recv(65536).startswith(b"HTTP/1.1 200") and time.monotonic() - asked < 2


def test_a_write_pipelined_before_bytes_that_do_not_parse_is_answered_before_the_400(server: Server) -> None:
    """uvicorn answered the garbage at once and closed: the client read a 400 for a write that was applied."""
    key = server.issue("pipeline", "Writer", "pipeliner")["plaintext_secret"]
    body = json.dumps({"content": "pipelined before garbage", "cell_type": "Fact"}).encode()
    write = (
        b"POST /v1/cells HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"x-service-key: %s\r\ncontent-length: %d\r\n\r\n%s" % (key.encode(), len(body), body)
    )
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=30) as sock:
        sock.sendall(write + b"GARBAGE\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):  # bounded by the socket timeout and the server's close
            data += chunk
    (written, written_body), (refused, refused_body) = answers(data)
    assert written == 201 and json.loads(written_body)["content"] == "pipelined before garbage"
    assert refused == 400 and json.loads(refused_body)["error"]["code"] == "validation"


def handshake(server: Server, path: str, *lines: str) -> tuple[int, dict[str, str], bytes]:
    request = [f"GET {path} HTTP/1.1", "Host: x", "Upgrade: websocket", "Connection: Upgrade", *lines]
    return raw(server, ("\r\n".join(request) + "\r\n\r\n").encode())


def test_a_refused_websocket_handshake_is_answered_in_the_envelope(server: Server) -> None:
    """The WebSocket library's refusals were plain text, and a handshake to a path with no stream got 403 with
    no body (Starlette's router closed it unanswered)."""
    key = server.issue("handshakes", "Writer", "shaker")["plaintext_secret"]
    good = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
    cases = [
        ("/v1/inbox", [f"x-service-key: {key}", "Sec-WebSocket-Version: 13"], 400, "validation"),
        ("/v1/inbox", [f"x-service-key: {key}", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: no!"], 400, "validation"),
        ("/v1/inbox", [f"x-service-key: {key}", "Sec-WebSocket-Version: 8", good], 400, "validation"),
        ("/v1/cells", [f"x-service-key: {key}", "Sec-WebSocket-Version: 13", good], 404, "not_found"),
        ("/v1/nope", ["Sec-WebSocket-Version: 13", good], 401, "unauthorized"),
        ("/nope", ["Sec-WebSocket-Version: 13", good], 404, "not_found"),
    ]
    for path, lines, status, code in cases:
        got, headers, body = handshake(server, path, *lines)
        assert (got, headers["content-type"]) == (status, "application/json"), (path, lines, body)
        error = json.loads(body)["error"]
        assert error["code"] == code and error["message"], (path, lines)


def test_a_request_answered_before_its_body_arrived_ends_its_connection(server: Server) -> None:
    """A 401 (or a 400 for a declared length past the cap) goes out before the body is read. uvicorn then
    discarded the body, but each byte of it cancelled the keep-alive timer and nothing set it again: a client
    without a key that sent its body after the 401 and went quiet held the socket for ever."""
    key = server.issue("lingering", "Writer", "sender")["plaintext_secret"]
    for sent_key, declared, status in ((b"", 1 << 20, 401), (b"x-service-key: %s\r\n" % key.encode(), 64 << 20, 400)):
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=8) as sock:
            sock.sendall(b"POST /v1/cells HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n" + sent_key)
            sock.sendall(b"content-length: %d\r\n\r\n" % declared)
            answer = b""
            while b"\r\n\r\n" not in answer:  # bounded by the socket timeout
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 %d" % status)
            with contextlib.suppress(OSError):  # the server may already have shut its side
                sock.sendall(b" " * (256 * 1024))
            quiet = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(65536):  # the rest of the answer, then the end (a timeout fails the test)
                    pass
            assert time.monotonic() - quiet < 5

"""The HTTP and WebSocket protocols memesh serves with: uvicorn's, with its refusals mended.

A request uvicorn cannot parse (a ``Content-Length`` that is not a number, a
malformed request line, an invalid header) never reaches the application:
uvicorn answers it 400 itself, in plain text. Spec section 7 says every non-2xx
answer carries the error envelope, so :class:`EnvelopeHttpToolsProtocol`
answers those with ``{"error": {"code": "validation", "message": ...}}`` and
``content-type: application/json``, then closes the connection as uvicorn does,
but only once every request read whole before the refused bytes is answered.
It also closes a connection whose request headers have not all arrived
:data:`HEADERS_TIMEOUT_S` after it opened or after the request's first byte
(uvicorn waited for ever: a client that opened connections and sent nothing,
or a header a byte at a time, held a socket each, without a key, until the head
ran out of them), and refuses a request whose line and headers pass
:data:`HEAD_MAX_BYTES`. Nothing else of uvicorn's behaviour changes.
:class:`DenialAwareWebSocketProtocol` answers refused handshakes in the
envelope too, and keeps what a client can make the server log at INFO.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Response
from websockets.server import ServerProtocol
from websockets.typing import StatusLike

from api.errors import envelope
from mesh.errors import ErrorCode

HEADERS_TIMEOUT_S = 10.0  # a request's line and headers arrive within this of its first byte (or of the connection)
HEAD_MAX_BYTES = 64 * 1024
"""The most a request's line and headers may take. uvicorn set no bound: one connection could send a header of
hundreds of MiB, which the parser gathers by copying what it holds on every read, so one header line without
an end held the head's event loop (every other request) until the header timeout closed it."""


LINGER_S = 2.0  # the rest of a body already answered arrives within this, or the socket closes
_HEAD_TOO_LARGE = f"the request line and headers exceed {HEAD_MAX_BYTES} bytes"


class _HeadTooLarge(Exception):
    """Raised from the parser's callback for a head past :data:`HEAD_MAX_BYTES`."""


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    _headers_due: asyncio.TimerHandle | None = None
    _in_head = True  # the bytes read next belong to a request's line and headers
    _head_bytes = 0  # read so far of the current request's line and headers (reads that hold nothing else)
    _heads_done = 0  # requests whose headers completed during the current read
    _refusal: str | None = None  # a 400 held until the requests before it are answered
    _refusal_message: str | None = None  # what the next parser error is (uvicorn names them all alike)
    _body_due: asyncio.TimerHandle | None = None  # answered before its body was read: when the rest must be in
    _rearm_keep_alive = False  # that body ended during the current read: the idle timer is set again after it

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()

    def data_received(self, data: bytes) -> None:
        """Feeds the parser, and refuses a request whose line and headers pass :data:`HEAD_MAX_BYTES`. A read
        counts when it starts and ends within one request's head (one that starts in a body and ends in the next
        head is not counted, so the bound is loose by at most one read, 256 KiB, and never counts a body)."""
        if self._refusal is not None:
            return  # the connection ends once the answers owed are sent: nothing more of it is read
        in_head = self._in_head
        self._heads_done = 0
        super().data_received(data)
        if in_head and self._in_head and not self._heads_done and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_MAX_BYTES:
                self.send_400_response(_HEAD_TOO_LARGE)
        if self._rearm_keep_alive:
            self._rearm_keep_alive = False
            self._keep_alive_again()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._expect_headers()

    def on_headers_complete(self) -> None:
        """A head that arrived whole in one read is measured here (the reads' count sees only unfinished ones)."""
        self._headers_arrived()
        self._in_head, self._head_bytes = False, 0
        self._heads_done += 1
        if len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers) > HEAD_MAX_BYTES:
            self._refusal_message = _HEAD_TOO_LARGE
            raise _HeadTooLarge  # httptools stops and raises a parser error: the 400 below, no request started
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        if self._body_due is not None:  # the body of a request already answered is all in
            self._body_due.cancel()
            self._body_due = None
            self._rearm_keep_alive = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._refusal is not None and not self._answers_owed():
            self._refuse(self._refusal)
        elif self.cycle is not None and self.cycle.response_complete and not self.pipeline and not self._in_head:
            self._await_answered_body()

    def _await_answered_body(self) -> None:
        """An answer sent before its request's body was read (a refusal: 401, 400 for a declared length past the
        cap, 415, 429). uvicorn discards the rest of that body as it comes, but every read cancelled the
        keep-alive timer and nothing set it again, so a client without a key held the socket for ever by
        sending a body after its 401 and going quiet. Now the rest must arrive within :data:`LINGER_S`, or the
        socket is closed; once it has, the connection is idle as after any answer (the keep-alive timer is set
        again), so a client that sent its whole body reuses it as HTTP/1.1 lets it."""
        self._body_due = self.loop.call_later(LINGER_S, self._body_late)

    def _body_late(self) -> None:
        self._body_due = None
        if not self.transport.is_closing():
            self.transport.close()

    def _keep_alive_again(self) -> None:
        idle = (self.cycle is None or self.cycle.response_complete) and not self.pipeline
        if idle and self.timeout_keep_alive_task is None and not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        if self._body_due is not None:
            self._body_due.cancel()
        super().connection_lost(exc)

    def _expect_headers(self) -> None:
        self._headers_arrived()
        self._headers_due = self.loop.call_later(HEADERS_TIMEOUT_S, self._headers_late)

    def _headers_arrived(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        """No answer: nothing of a request was read that an answer could be to (a slow client's socket is freed)."""
        self._headers_due = None
        if not self.transport.is_closing():
            self.transport.close()

    def _answers_owed(self) -> bool:
        """Whether requests read whole before the bytes at hand are still to be answered (in order, first)."""
        cycle = self.cycle
        return bool(self.pipeline) or (cycle is not None and not cycle.response_complete and not cycle.more_body)

    def send_400_response(self, msg: str) -> None:
        """The envelope, after the answers to every request read whole before the bytes refused: uvicorn sent
        its 400 at once and closed, so a client that pipelined a write and then bytes that do not parse read
        the 400 as the write's answer while the write was applied. Bytes refused inside a request's own body
        are answered at once (that request is the one refused)."""
        msg, self._refusal_message = self._refusal_message or msg, None
        if self._answers_owed():
            self._refusal = msg
            self._headers_arrived()
            return
        self._refuse(msg)

    def _refuse(self, msg: str) -> None:
        body = json.dumps(envelope(ErrorCode.VALIDATION, msg)).encode()
        head = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


WS_MAX_MESSAGE_BYTES = 64 * 1024
"""The largest message a WebSocket client may send (uvicorn's default is 16 MiB). What clients send on memesh's
streams is an ack, ``{"ack": N}``, under 40 bytes; a larger message closes the connection (1009) before it is
read whole, so no key can make the head parse 16 MiB per reconnect."""


_HANDSHAKE_CODES = {400: ErrorCode.VALIDATION, 403: ErrorCode.FORBIDDEN, 404: ErrorCode.NOT_FOUND}


class _EnvelopeServerProtocol(ServerProtocol):
    """websockets' server side, whose handshake refusals (a missing or malformed ``Sec-WebSocket-Key``, a
    version other than 13) carry the error envelope: its own are plain text. A status outside the spec's table
    (426) is a 400 ``validation``; a 5xx a 500 ``internal``."""

    def reject(self, status: StatusLike, text: str) -> Response:
        given = int(status)
        code, error = (500, ErrorCode.INTERNAL) if given >= 500 else (given, _HANDSHAKE_CODES.get(given, ErrorCode.VALIDATION))
        if error is ErrorCode.VALIDATION:
            code = 400
        response = super().reject(code, text)
        body = json.dumps(envelope(error, text.strip() or response.reason_phrase)).encode()
        for name, value in (("Content-Type", "application/json"), ("Content-Length", str(len(body)))):
            del response.headers[name]  # a multidict: assigning would add a second header
            response.headers[name] = value
        response.body = body
        return response


class DenialAwareWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, with three things a client can cause answered as the spec answers them:

    - a handshake refused with an HTTP answer (the ASGI denial response: a 401 or 429 before the upgrade)
      counts as a completed handshake: uvicorn 0.54 logs every such refusal at ERROR ("ASGI callable returned
      without completing handshake"), so anyone without a key could fill the server's log;
    - a handshake the WebSocket library refuses (:class:`_EnvelopeServerProtocol`) is answered in the envelope;
    - a text message that is not UTF-8 closes the connection with 1007, as before, without the ERROR line and
      traceback uvicorn logged for each (a key could write them at the rate it can reconnect).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn.__class__ = _EnvelopeServerProtocol  # the same object, its refusals in the envelope

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()
            except UnicodeDecodeError:
                self.frames = []
                self.conn.send_close(1007)  # invalid frame payload data (RFC 6455 7.4.1)
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()

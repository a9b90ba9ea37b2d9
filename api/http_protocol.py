"""The HTTP and WebSocket protocols memesh serves with: uvicorn's, with two refusals mended.

A request uvicorn cannot parse (a ``Content-Length`` that is not a number, a
malformed request line, an invalid header) never reaches the application:
uvicorn answers it 400 itself, in plain text. Spec section 7 says every non-2xx
answer carries the error envelope, so :class:`EnvelopeHttpToolsProtocol`
answers those with ``{"error": {"code": "validation", "message": ...}}`` and
``content-type: application/json``, then closes the connection as uvicorn does.
It also closes a connection whose request headers have not all arrived
:data:`HEADERS_TIMEOUT_S` after it opened or after the request's first byte
(uvicorn waited for ever: a client that opened connections and sent nothing,
or a header a byte at a time, held a socket each, without a key, until the head
ran out of them). Nothing else of uvicorn's behaviour changes. :class:`DenialAwareWebSocketProtocol` stops
uvicorn logging an error for every WebSocket handshake the application refuses.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

HEADERS_TIMEOUT_S = 10.0  # a request's line and headers arrive within this of its first byte (or of the connection)


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    _headers_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._expect_headers()

    def on_headers_complete(self) -> None:
        self._headers_arrived()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
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

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": {"code": "validation", "message": msg}}).encode()
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


class DenialAwareWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, except that a handshake refused with an HTTP answer (the ASGI denial
    response: a 401 or 429 before the upgrade) counts as a completed handshake. uvicorn 0.54 logs every such
    refusal at ERROR ("ASGI callable returned without completing handshake"), so anyone without a key could
    fill the server's log; the answer the client gets is unchanged."""

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True

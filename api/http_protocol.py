"""The HTTP protocol memesh serves with: uvicorn's httptools protocol, whose own refusals use the spec's envelope.

A request uvicorn cannot parse (a ``Content-Length`` that is not a number, a
malformed request line, an invalid header) never reaches the application:
uvicorn answers it 400 itself, in plain text. Spec section 7 says every non-2xx
answer carries the error envelope, so :class:`EnvelopeHttpToolsProtocol`
answers those with ``{"error": {"code": "validation", "message": ...}}`` and
``content-type: application/json``, then closes the connection as uvicorn does.
Nothing else of uvicorn's behaviour changes.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": {"code": "validation", "message": msg}}).encode()
        head = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

"""The MCP SDK's own HTTP refusals of what is no request, as the spec's envelope.

The SDK's Streamable HTTP transport refuses some requests at the HTTP level with a JSON-RPC error object
as the body: 400 for a JSON body that is not one JSON-RPC message (a batch, a number, a wrong
``jsonrpc``; the error's message is then a pydantic dump), 406 for an ``Accept`` without
``application/json``. The spec says every non-2xx answer is ``{error: {code, message}}``, and MCP lets the
body of an HTTP error be anything, so :func:`enveloped` rewrites each answer of status 400 or more whose
JSON-RPC error answers no request (its ``id`` is null, or the body is no JSON-RPC error):

- the status stays the SDK's; the body becomes the envelope, its code from the status (404
  ``not_found``, any other 4xx ``validation``, 5xx ``internal``), its message the SDK's message, or a
  plain sentence in place of a pydantic dump; headers other than the body's length and type are kept;
- an error that answers a request (its ``id`` is the request's: an unsupported protocol version,
  ``-32022`` with the versions served, which clients read to pick one) stays the JSON-RPC error MCP
  clients read; answers below 400 pass untouched, streamed.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Message, Send

from api.errors import envelope
from mesh.errors import ErrorCode

NOT_A_MESSAGE = "the body is not one JSON-RPC 2.0 request, notification or response (a batch is not served)"
_BODY_HEADERS = {b"content-length", b"content-type"}


def _code(status: int) -> ErrorCode:
    if status == 404:
        return ErrorCode.NOT_FOUND
    return ErrorCode.VALIDATION if status < 500 else ErrorCode.INTERNAL


def _envelope_message(body: bytes, status: int) -> str | None:
    """The envelope's message for an SDK answer, or None when the answer is a request's JSON-RPC error."""
    try:
        answer: Any = json.loads(body)
        text = answer["error"]["message"]
        if answer.get("id") is not None:
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return f"the MCP transport refused the request (HTTP {status})"
    if not isinstance(text, str) or not text:
        return f"the MCP transport refused the request (HTTP {status})"
    return NOT_A_MESSAGE if text.startswith("Validation error") else text[:500]


def enveloped(send: Send) -> Send:
    """``send`` that turns an answer of status 400 or more into the spec's envelope."""
    held: Message | None = None
    chunks: list[bytes] = []

    async def sending(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and message["status"] >= 400:
            held = message
            return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        status, original = int(held["status"]), b"".join(chunks)
        text = _envelope_message(original, status)
        if text is None:
            await send(held)
            await send({"type": "http.response.body", "body": original})
            return
        body = json.dumps(envelope(_code(status), text)).encode()
        headers = [(k, v) for k, v in held.get("headers", []) if k.lower() not in _BODY_HEADERS]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({**held, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return sending

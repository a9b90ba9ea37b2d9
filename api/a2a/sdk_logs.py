"""The A2A SDK's log lines about a client's mistakes, kept at DEBUG.

The SDK logs a request it refuses for the client's own error at ERROR, most with a traceback (an empty
batch, an ``id`` of a wrong type, a ``method`` that is not a string, a streaming method this agent does
not serve), every error answer at WARNING, and a wrong ``A2A-Version`` at WARNING with the header copied
whole: any key could fill the log at its Read rate. The client is answered as before (``-32600``,
``-32601``, ``-32602``, ``-32004``, ``-32009``); only the log record changes.

Guarantees of :func:`quiet_client_mistakes`:
- Only the records listed in :data:`CLIENT_MISTAKES` (logger, message format) are lowered, to DEBUG and
  without their traceback; every other record of the SDK (an unhandled exception, an agent that failed,
  the dispatcher's line for an answer with ``-32603``) keeps its level.
- Idempotent: calling it again adds no second filter.
"""

from __future__ import annotations

import logging

REQUEST_ERROR = "Request Error (ID: %s): Code=%s, Message='%s'%s"  # every error answer, at WARNING (internal: ERROR)
INTERNAL = -32603
CLIENT_MISTAKES: dict[str, frozenset[str]] = {
    "a2a.server.routes.jsonrpc_dispatcher": frozenset(
        {"Failed to validate base JSON-RPC request", "Failed to parse request params", "Unhandled method: %s", REQUEST_ERROR}
    ),
    "a2a.compat.v0_3.jsonrpc_adapter": frozenset({"Failed to validate base JSON-RPC request for v0.3"}),
    "a2a.server.request_handlers.request_handler": frozenset({"Validation failure: %s"}),
    "a2a.utils.version_validator": frozenset({"Version mismatch: actual='%s', expected='%s'"}),
}


class _ClientMistakes(logging.Filter):
    def __init__(self, formats: frozenset[str]) -> None:
        super().__init__()
        self.formats = formats

    def filter(self, record: logging.LogRecord) -> bool:
        internal = record.msg == REQUEST_ERROR and isinstance(record.args, tuple) and INTERNAL in record.args[1:2]
        if record.msg in self.formats and not internal:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = record.exc_text = None
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def quiet_client_mistakes() -> None:
    for name, formats in CLIENT_MISTAKES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ClientMistakes) for f in logger.filters):
            logger.addFilter(_ClientMistakes(formats))

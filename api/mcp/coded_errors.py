"""SDK middleware: every JSON-RPC error ``/mcp`` answers starts with the spec's code, as memesh's own do.

The SDK answers some refusals itself, in its own words: params that do not fit a method's schema
(``-32602 Invalid request parameters``, or pydantic's text), a prompt that does not exist (a bare
``ValueError``, which its dispatcher answers with code ``0`` and logs at ERROR). Guarantees:

- A method's params that fail its schema: ``-32602 validation: <field>: <problem>``.
- ``prompts/get``: memesh serves no prompt, so every name is ``-32602 not_found: ...``.
- Any other ``-32602`` without a code: ``validation: `` is put before the SDK's message.
- Anything else a handler raises that is no ``MCPError``: logged, and answered
  ``-32603 internal: internal error`` (no exception text on the wire).
- Errors that already start with a spec code (memesh's own), ``-32601`` (an unknown method, the
  JSON-RPC code every client keys off) and the rest of the SDK's ``MCPError``\\ s pass unchanged.
- It runs inside the metering middleware (``api.mcp.tools``): a message it refuses has cost its Read token.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import MCPError
from mcp.server.context import HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import ValidationError

from api.errors import describe
from mesh.errors import ErrorCode

log = logging.getLogger(__name__)

CODES = tuple(f"{code.value}:" for code in ErrorCode)


def coded_errors() -> ServerMiddleware[Any]:
    async def coded(
        ctx: ServerRequestContext[Any, Any], call_next: Callable[[ServerRequestContext[Any, Any]], Awaitable[HandlerResult]]
    ) -> HandlerResult:
        if ctx.method == "prompts/get":
            name = str((ctx.params or {}).get("name", ""))[:200]
            raise MCPError(INVALID_PARAMS, f"not_found: no prompt named {name!r} (this server serves none)")
        try:
            return await call_next(ctx)
        except MCPError as exc:
            if exc.code != INVALID_PARAMS or exc.message.startswith(CODES):
                raise
            raise MCPError(INVALID_PARAMS, f"validation: {exc.message}", exc.data) from None
        except ValidationError as exc:
            raise MCPError(INVALID_PARAMS, f"validation: {describe(list(exc.errors()))}") from None
        except Exception:
            log.exception("MCP %s failed", ctx.method)
            raise MCPError(INTERNAL_ERROR, "internal: internal error") from None

    return coded

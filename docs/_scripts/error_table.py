"""Writes docs/errors.md from the one error mapping (api/errors.py::STATUS).

    .venv/bin/python docs/_scripts/error_table.py

tests/unit/test_error_table.py fails when docs/errors.md is not what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from api.errors import STATUS

DOC = Path(__file__).resolve().parents[1] / "errors.md"

HEAD = """# One error vocabulary, every surface

Every refusal memesh makes is one of the spec's error codes (`mesh.errors`),
mapped once (`api/errors.py::STATUS`) to each surface's own form. This file is
written by `docs/_scripts/error_table.py` from that mapping.

"""
COLUMNS = (
    "| Code | HTTP (`/v1`, `/admin/api`, `/mcp` admission) | gRPC status (admin service) | MCP tool error "
    "| WebSocket (`/v1/inbox`, observatory) |\n|---|---|---|---|---|\n"
)

NOTES = """
Notes:
- Every non-2xx HTTP answer is the envelope `{"error": {"code", "message"}}`;
  `rate_limited` carries `Retry-After` (seconds). A body without a required
  field (for `/v1/query` and `/v1/recall`: neither `text` nor `embedding`) or
  with a wrong type is 422 `validation`; a malformed or out-of-range value is
  400 `validation`.
- On `/mcp`, a key that is missing, unknown, revoked, rotated or suspended is
  the HTTP 401 envelope (too many refused keys from one address: the HTTP 429
  envelope) before the request reaches MCP; a refusal inside a tool is a tool
  result with `isError: true` whose text starts with the code, also for
  arguments that do not match a tool's input schema ([mcp.md](mcp.md#errors)).
- A WebSocket stream refused at the handshake gets the HTTP status of its
  code; an open stream whose key stops working gets an `unauthorized` frame
  and close 1008.
- Not served yet: the gRPC data plane (`google.rpc.Status` with `ErrorInfo`
  and `RetryInfo`) and the A2A binding.
"""


def render() -> str:
    rows = []
    for code, (http, grpc) in STATUS.items():
        mcp = "HTTP 401 envelope, before MCP" if code.value == "unauthorized" else f"`isError`, text `{code.value}: …`"
        close = 1008 if http < 500 else 1011
        rows.append(f"| `{code.value}` | {http} | `{grpc.name}` | {mcp} | error frame, close {close} |\n")
    return HEAD + COLUMNS + "".join(rows) + NOTES


if __name__ == "__main__":
    DOC.write_text(render())
    sys.stdout.write(f"wrote {DOC}\n")

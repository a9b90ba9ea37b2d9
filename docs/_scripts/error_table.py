"""Writes docs/errors.md from the one error mapping (api/errors.py::STATUS).

    .venv/bin/python docs/_scripts/error_table.py

tests/unit/test_error_table.py fails when docs/errors.md is not what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from api.errors import STATUS
from api.grpc_data.status import reason

DOC = Path(__file__).resolve().parents[1] / "errors.md"

HEAD = """# One error vocabulary, every surface

Every refusal memesh makes is one of the spec's error codes (`mesh.errors`),
mapped once (`api/errors.py::STATUS`) to each surface's own form. This file is
written by `docs/_scripts/error_table.py` from that mapping.

"""
COLUMNS = (
    "| Code | HTTP (`/v1`, `/admin/api`; admission of `/mcp` and `/a2a/v1`) | gRPC status, `ErrorInfo.reason` "
    "(data plane; the admin service has the status) | MCP | A2A (`/a2a/v1`) | WebSocket (`/v1/inbox`, observatory) |\n"
    "|---|---|---|---|---|---|\n"
)

NOTES = """
Notes:
- Every non-2xx HTTP answer is the envelope `{"error": {"code", "message"}}`;
  `rate_limited` carries `Retry-After` (seconds). A body without a required
  field (for `/v1/query` and `/v1/recall`: neither `text` nor `embedding`) or
  with a wrong type is 422 `validation`; a malformed or out-of-range value is
  400 `validation`.
- gRPC data plane (`memesh.data.v1`, [grpc.md](grpc.md)): every refusal is a
  `google.rpc.Status` in `grpc-status-details-bin` whose `ErrorInfo` has the
  reason above and domain `memesh`; `validation` with a known field adds
  `BadRequest` field violations (`dimension_mismatch`: the `embedding`
  field); `rate_limited` alone adds `RetryInfo` and the trailing metadata
  `retry-after` (seconds). The admin service answers the same status codes
  with the text `code: message`.
- MCP ([mcp.md](mcp.md#errors)): a key that is missing, unknown, revoked,
  rotated or suspended is the HTTP 401 envelope (too many refused keys from
  one address: the HTTP 429 envelope) before the request reaches MCP. A
  refusal inside a tool is a tool result with `isError: true` whose text
  starts with the code, also for arguments that do not match a tool's input
  schema. Outside a tool (a listen stream, a resource read, a message over
  its rate), the JSON-RPC error's message starts with the code: code -32029
  for `rate_limited` and `quota_exceeded`, -32001 for `unauthorized` (an open
  listen stream whose key failed), -32602 for other client faults, -32603
  for server faults.
- A2A ([a2a.md](a2a.md#errors)): `unauthorized`, and `rate_limited` for a
  call that is not a message send, are the HTTP envelope before any
  JSON-RPC. A message whose operation is refused gets a normal reply whose one
  data part is the envelope `{"error": {"code", "message"}}` (a rate limit's
  message ends `; retry in N s`). Malformed requests get JSON-RPC errors
  (-32602 with the message `validation: field: problem`; -32700, -32600,
  -32601; the A2A codes -32001 task not found, -32009 version not supported).
- A WebSocket stream refused at the handshake gets the HTTP status of its
  code; an open stream whose key stops working gets an `unauthorized` frame
  and close 1008.
"""

_AT_THE_DOOR = "HTTP 401 envelope, before the protocol"


def render() -> str:
    rows = []
    for code, (http, grpc) in STATUS.items():
        value = code.value
        mcp = _AT_THE_DOOR if value == "unauthorized" else f"`isError`, text `{value}: …`"
        a2a = _AT_THE_DOOR if value == "unauthorized" else f'reply data part `{{"error": {{"code": "{value}", …}}}}`'
        close = 1008 if http < 500 else 1011
        rows.append(f"| `{value}` | {http} | `{grpc.name}`, `{reason(code)}` | {mcp} | {a2a} | error frame, close {close} |\n")
    return HEAD + COLUMNS + "".join(rows) + NOTES


if __name__ == "__main__":
    DOC.write_text(render())
    sys.stdout.write(f"wrote {DOC}\n")

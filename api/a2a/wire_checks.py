"""What the A2A door refuses in a message before the SDK converts it, because the SDK's conversions fail on it
as an internal error (``-32603`` with the library's own words, and an ERROR traceback) instead of the client's.

Guarantees:
- :func:`loads` parses a body as strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON and are a
  parse error (``-32700``); protobuf's ``Value`` cannot hold them and failed as ``-32603``.
- :func:`invalid_params` names the first value that cannot be converted, as ``validation: <where>: <problem>``
  (answered ``-32602``): a string holding a lone surrogate (not Unicode text; protobuf refuses to encode
  it) or a v0.3 file part whose ``bytes`` are not base64. It walks a message already held to
  :func:`api.gate_common.json_shape_refusal`'s bound, so it costs at most that many steps.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(body: bytes) -> Any:
    """``json.loads`` without the non-JSON constants; ValueError (or RecursionError) when it is no JSON."""
    return json.loads(body, parse_constant=_no_constant)


def invalid_params(request: object) -> str | None:
    if not isinstance(request, dict):
        return None
    stack: list[tuple[object, str]] = [(request.get("params"), "params")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if not is_text(value):
                return f"validation: {where}: a string holds a lone surrogate, which is not Unicode text"
        elif isinstance(value, dict):
            for key, child in value.items():
                if not is_text(key):
                    return f"validation: {where}: a key holds a lone surrogate, which is not Unicode text"
                stack.append((child, f"{where}.{key}"))
        elif isinstance(value, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(value))
    return _file_bytes_refusal(request.get("params"))


def is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _file_bytes_refusal(params: object) -> str | None:
    """A v0.3 ``file`` part whose ``bytes`` the SDK's conversion cannot decode."""
    message = params.get("message") if isinstance(params, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    for i, part in enumerate(parts if isinstance(parts, list) else []):
        file = part.get("file") if isinstance(part, dict) else None
        data = file.get("bytes") if isinstance(file, dict) else None
        if isinstance(data, str):
            try:
                base64.b64decode(data)
            except (binascii.Error, ValueError):
                return f"validation: params.message.parts[{i}].file.bytes: not base64"
    return None

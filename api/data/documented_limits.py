"""The deployment's limits, as the /v1 document states them (:class:`api.openapi.Refinements`).

Every bound here is one the use cases enforce (``head.memory_service``,
``head.inbox_service``, ``head.cell_service``) with a 400; the document says
it so that a request it calls valid is one the service accepts. Checked by
``tests/unit/test_openapi_limits.py``, which sends each bound and one past it.
"""

from __future__ import annotations

from typing import Any

from api.data.schemas import INT64_MAX
from api.openapi import Refinements
from head.inbox_service import InboxLimits
from head.memory_service import MemoryLimits
from mesh.ids import NAME_EXCLUDED

# At least one character that is not white space by ``str.isspace`` (the use cases refuse a text that
# ``strip()`` empties). Spelt as literal characters, not ``\S``: ECMA-262's ``\s`` (the dialect OpenAPI
# names) differs from Python's (U+001C to U+001F, U+0085, U+FEFF), and RE2's is ASCII only.
NOT_BLANK = "[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
FLOAT_MAX = 1.7976931348623157e308  # a JSON number past it parses to infinity, which a vector may not hold


def _vector(dims: int) -> dict[str, Any]:
    """A caller's vector: exactly ``dims`` finite numbers, not all zero (a zero vector has no direction)."""
    return {
        "minItems": dims,
        "maxItems": dims,
        "items": {"type": "number", "minimum": -FLOAT_MAX, "maximum": FLOAT_MAX},
        "not": {"type": "array", "items": {"enum": [0]}},
    }


def documented_limits(memory: MemoryLimits, inbox: InboxLimits, dims: int) -> Refinements:
    """The refinements of the /v1 document for these limits and this embedding dimension."""
    text = {"maxLength": memory.max_text_chars, "pattern": NOT_BLANK}
    query = {
        "properties": {"text": text, "embedding": _vector(dims), "k": {"maximum": memory.max_k}},
        # exactly one of them (null is "not given"): both is a 400, neither a 422
        "oneOf": [
            {"required": ["text"], "properties": {"text": {"type": "string"}}},
            {"required": ["embedding"], "properties": {"embedding": {"type": "array"}}},
        ],
    }
    project = {
        "maxLength": min(memory.max_project_chars, 128),  # the models refuse past 128 whatever the limit
        # anchored, and ``$`` is safe: the class holds the newline, so Python's "$ before a final newline" cannot
        # let one through (hypothesis-jsonschema generates none there either)
        "pattern": f"^[^{NAME_EXCLUDED}]*$",
    }
    sequence = {"maximum": INT64_MAX}  # FastAPI's document writes 2**63 - 1 as the float 2**63, one past the bound
    cell = {
        "properties": {
            "content": {"maxLength": memory.max_content_chars, "pattern": NOT_BLANK},
            "embedding": _vector(dims),
            "project_id": project,
        }
    }
    beacon = {
        "properties": {
            "interest": {"maxLength": inbox.max_interest_chars, "pattern": NOT_BLANK},
            "ttl_s": {"minimum": inbox.min_beacon_ttl_s, "exclusiveMinimum": None, "maximum": inbox.max_beacon_ttl_s},
        },
        "not": {
            "required": ["expires_at", "ttl_s"],
            "properties": {"expires_at": {"type": "string"}, "ttl_s": {"type": "number"}},
        },
    }
    listing = {"maximum": memory.max_list}
    return Refinements(
        schemas={
            "QueryIn": query,
            "CellIn": cell,
            "CellBatchIn": {
                "properties": {"cells": {"maxItems": memory.max_batch_cells}},
                "description": "The whole body is at most server.max_body_bytes (4 MiB by default): 400 past it.",
            },
            "BeaconIn": beacon,
            "SessionIn": {"properties": {"project_id": project}},
            "PullIn": {"properties": {"since": sequence, "ack": sequence}},
        },
        parameters={
            ("/v1/cells", "get", "limit"): listing,
            ("/v1/cells", "get", "project_id"): project,
            ("/v1/scenes", "get", "limit"): listing,
            ("/v1/scenes", "get", "project_id"): project,
        },
    )

"""Keyset cursors: opaque to clients, the last id of the previous page to the service."""

from __future__ import annotations

import base64
import binascii
from uuid import UUID

from mesh.errors import ValidationFailed


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The id a cursor stands for; ValidationFailed for anything not of the form this service issues. A cursor is
    a position, not a capability: a well-formed one made by hand only moves where a page of the caller's own
    tenant and scope starts."""
    if cursor is None:
        return None
    try:
        value = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        canonical = str(UUID(value)) == value
    except (binascii.Error, UnicodeDecodeError, ValueError):
        canonical = False
    if not canonical or encode_cursor(value) != cursor:  # padding, stray characters, another spelling of the id
        raise ValidationFailed("cursor is not one this service issued")
    return value

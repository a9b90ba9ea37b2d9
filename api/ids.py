"""An id given in a tool's or an operation's arguments (MCP, A2A): a UUID, as REST's path parameters and
gRPC's fields take it, so a malformed id is ``validation`` on every door (never a ``not_found`` nor an empty
answer), and any spelling a UUID parser reads (upper case, braces, ``urn:uuid:``) names the same node."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from pydantic import AfterValidator, StrictStr, WithJsonSchema
from pydantic_core import PydanticCustomError


def canonical_id(value: str) -> str:
    """``value`` as memesh writes ids (lower case, hyphenated); PydanticCustomError if it is no UUID."""
    try:
        return str(UUID(value))
    except ValueError:
        raise PydanticCustomError("uuid_parsing", "Input should be a valid UUID") from None


Id = Annotated[StrictStr, AfterValidator(canonical_id), WithJsonSchema({"type": "string", "format": "uuid"})]

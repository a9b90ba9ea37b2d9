"""Typed access to the fields of a parsed JSON document, for the descriptor parsers.

Each function reads one field of a ``dict`` that ``json.loads`` produced and
returns it with its Python type, or raises :class:`~mesh.errors.ValidationFailed`: with ``shape`` for a
missing field or a wrong JSON type (422 over REST), without it for an empty array where one is needed (400).
Guarantees: an error message names only the field's path (``at``, then the
key) and what it must be, never a value from the document, so it is safe to
return to the caller and to log. Absent optional fields read as ``None`` or as
an empty array; nothing here recurses or copies a document.
"""

from __future__ import annotations

from typing import Any

from mesh.errors import ValidationFailed


def as_object(value: object, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(f"{at} must be an object", shape=True)
    return value


def required_field(obj: dict[str, Any], key: str, at: str) -> object:
    if key not in obj:
        raise ValidationFailed(f"{at}.{key} is required", shape=True)
    return obj[key]


def string(obj: dict[str, Any], key: str, at: str, *, default: str | None = None) -> str:
    value = obj.get(key, default) if default is not None else required_field(obj, key, at)
    if not isinstance(value, str):
        raise ValidationFailed(f"{at}.{key} must be a string", shape=True)
    return value


def optional_string(obj: dict[str, Any], key: str, at: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ValidationFailed(f"{at}.{key} must be a string", shape=True)
    return value


def optional_bool(obj: dict[str, Any], key: str, at: str) -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValidationFailed(f"{at}.{key} must be a boolean", shape=True)
    return value


def _array(obj: dict[str, Any], key: str, at: str, required: bool, non_empty: bool) -> list[Any]:
    value = required_field(obj, key, at) if required else obj.get(key, [])
    if not isinstance(value, list):
        raise ValidationFailed(f"{at}.{key} must be an array", shape=True)
    if non_empty and not value:
        raise ValidationFailed(f"{at}.{key} must not be empty")
    return value


def strings(obj: dict[str, Any], key: str, at: str, *, required: bool = False, non_empty: bool = False) -> tuple[str, ...]:
    values = _array(obj, key, at, required, non_empty)
    if not all(isinstance(v, str) for v in values):
        raise ValidationFailed(f"{at}.{key} must be an array of strings", shape=True)
    return tuple(values)


def objects(
    obj: dict[str, Any], key: str, at: str, *, required: bool = False, non_empty: bool = False
) -> list[tuple[int, dict[str, Any]]]:
    """The array's objects with their positions (for error paths such as ``card.skills[3]``)."""
    return [(n, as_object(v, f"{at}.{key}[{n}]")) for n, v in enumerate(_array(obj, key, at, required, non_empty))]


__all__ = ["as_object", "objects", "optional_bool", "optional_string", "required_field", "string", "strings"]

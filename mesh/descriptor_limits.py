"""The limits every agent descriptor and every imported document must stay within.

This module holds the numbers (:data:`NAME_MAX`, :data:`MAX_SKILLS`,
:data:`MAX_DOCUMENT_BYTES`, ...) and the checks of single values against them:
a text's length, an array's size, a label list, an absolute http(s) URL, and
the nesting depth of a whole document (:func:`check_depth`). Guarantees: each
check either returns nothing or raises :class:`~mesh.errors.ValidationFailed`
with a message that names the field and the limit but never quotes the value;
:func:`check_depth` walks any parsed JSON without recursing, so a hostile
document cannot exhaust the stack.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mesh.errors import ValidationFailed

NAME_MAX = 128
LABEL_MAX = 128  # versions, ids, tags, media types, bindings, organisations
TEXT_MAX = 4096  # descriptions
URL_MAX = 2048
MAX_SKILLS = 64
MAX_INTERFACES = 16
MAX_TAGS = 32
MAX_MODES = 32
MAX_CAPABILITIES = 16
MAX_DOCUMENT_BYTES = 64 * 1024  # of the RFC 8785 canonical form
MAX_DEPTH = 32  # nested objects and arrays; real cards stay under 10


def check_depth(document: object) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` without recursing (safe on any parsed JSON)."""
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > MAX_DEPTH:
            raise ValidationFailed(f"document nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def check_length(value: str, at: str, low: int, high: int) -> None:
    if not low <= len(value) <= high:
        raise ValidationFailed(f"{at} must be {low} to {high} characters")


def check_count(values: tuple[object, ...] | dict[str, bool], at: str, most: int) -> None:
    if len(values) > most:
        raise ValidationFailed(f"{at} holds more than {most} entries")


def check_labels(values: tuple[str, ...], at: str, most: int) -> None:
    check_count(values, at, most)
    for value in values:
        check_length(value, f"{at} entry", 1, LABEL_MAX)


def check_url(value: str, at: str) -> None:
    try:
        parts = urlsplit(value)
    except ValueError:
        raise ValidationFailed(f"{at} is not a valid URL") from None
    if (
        len(value) > URL_MAX
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or not value.isprintable()
        or " " in value
    ):
        raise ValidationFailed(f"{at} must be an absolute http or https URL of at most {URL_MAX} characters")


__all__ = [
    "LABEL_MAX",
    "MAX_CAPABILITIES",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_INTERFACES",
    "MAX_MODES",
    "MAX_SKILLS",
    "MAX_TAGS",
    "NAME_MAX",
    "TEXT_MAX",
    "URL_MAX",
    "check_count",
    "check_depth",
    "check_labels",
    "check_length",
    "check_url",
]

"""Typed errors: one class per code of the service's error envelope ``{"error": {"code", "message"}}``."""

from __future__ import annotations

from typing import Any


class MemeshError(Exception):
    """A refusal or failure the service answered. ``code`` is the spec's error code, ``status`` the HTTP status
    (0 when the connection failed before an answer), ``retry_after`` the seconds the service asked to wait."""

    code = "internal"

    def __init__(self, message: str, status: int = 0, retry_after: float | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class NotFound(MemeshError):
    code = "not_found"


class ValidationFailed(MemeshError):
    code = "validation"


class DimensionMismatch(ValidationFailed):
    code = "dimension_mismatch"


class Unauthorized(MemeshError):
    code = "unauthorized"


class Forbidden(MemeshError):
    code = "forbidden"


class Conflict(MemeshError):
    code = "conflict"


class QuotaExceeded(MemeshError):
    code = "quota_exceeded"


class RateLimited(MemeshError):
    code = "rate_limited"


class TimedOut(MemeshError):
    code = "timeout"


class Unavailable(MemeshError):
    code = "unavailable"


class ConnectionFailed(Unavailable):
    """No answer at all: the service could not be reached, or the connection broke."""


ERRORS: dict[str, type[MemeshError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        ValidationFailed,
        DimensionMismatch,
        Unauthorized,
        Forbidden,
        Conflict,
        QuotaExceeded,
        RateLimited,
        TimedOut,
        Unavailable,
    )
}


def error_of(status: int, body: Any, retry_after: float | None) -> MemeshError:
    """The typed error of an answer's envelope (a code this client does not know keeps it, as MemeshError)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return MemeshError(f"HTTP {status} without the error envelope", status, retry_after)
    code, message = error["code"], str(error.get("message", ""))
    cls = ERRORS.get(code)
    return cls(message, status, retry_after) if cls is not None else MemeshError(message, status, retry_after, code)

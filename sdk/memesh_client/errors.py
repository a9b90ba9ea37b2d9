"""Typed errors: one class per code of the service's error envelope ``{"error": {"code", "message"}}``."""

from __future__ import annotations

from typing import Any


class MemeshError(Exception):
    """A refusal or failure the service answered. ``code`` is the spec's error code, ``status`` the HTTP status
    (for an error frame of the inbox stream, the status its code has over HTTP; 0 when there was no answer:
    the connection failed, or the client refused the call before sending it), ``retry_after`` the seconds the
    service asked to wait."""

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


class TransactionFailed(Conflict):
    code = "transaction"


class QuotaExceeded(MemeshError):
    code = "quota_exceeded"


class RateLimited(MemeshError):
    code = "rate_limited"


class TimedOut(MemeshError):
    code = "timeout"


class Unavailable(MemeshError):
    code = "unavailable"


class StorageUnavailable(Unavailable):
    code = "storage"


class ConnectionFailed(Unavailable):
    """No answer at all: the service could not be reached, or the connection broke (an inbox stream that
    ended without saying why, too)."""


class ServiceFailed(MemeshError):
    """A failure inside the service (500): ``internal``, or ``embedding`` and ``config``."""

    code = "internal"


class UnreadableAnswer(ServiceFailed):
    """An answer this client cannot read: a 2xx whose body is not JSON or not the documented shape, a
    listing that hands back the cursor it was given, an inbox frame that is not JSON."""


ERRORS: dict[str, type[MemeshError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        ValidationFailed,
        DimensionMismatch,
        Unauthorized,
        Forbidden,
        Conflict,
        TransactionFailed,
        QuotaExceeded,
        RateLimited,
        TimedOut,
        Unavailable,
        StorageUnavailable,
        ServiceFailed,
    )
}
ERRORS["embedding"] = ERRORS["config"] = ServiceFailed
BY_STATUS: dict[int, type[MemeshError]] = {  # a code this client does not know: its HTTP status's class (spec 7)
    400: ValidationFailed,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    415: ValidationFailed,
    422: ValidationFailed,
    429: RateLimited,
    500: ServiceFailed,
    503: Unavailable,
    504: TimedOut,
}
STATUS_OF: dict[str, int] = {  # each code's HTTP status (spec 7), for the inbox stream's error frames
    "validation": 400,
    "dimension_mismatch": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "transaction": 409,
    "quota_exceeded": 429,
    "rate_limited": 429,
    "internal": 500,
    "embedding": 500,
    "config": 500,
    "unavailable": 503,
    "storage": 503,
    "timeout": 504,
}


def error_of(status: int, body: Any, retry_after: float | None) -> MemeshError:
    """The typed error of an answer's envelope (``status`` 0: an inbox stream's error frame). A code this
    client does not know keeps it, as the class of its HTTP status (else MemeshError)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return BY_STATUS.get(status, MemeshError)(f"HTTP {status} without the error envelope", status, retry_after)
    code, message = error["code"], str(error.get("message", ""))
    status = status or STATUS_OF.get(code, 0)
    cls = ERRORS.get(code) or BY_STATUS.get(status, MemeshError)
    return cls(message, status, retry_after, code)

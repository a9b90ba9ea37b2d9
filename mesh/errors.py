"""The one error vocabulary of memesh: the interface spec's error codes.

Every failure a caller can see is a :class:`MemeshError` carrying one of the
spec's codes. The tree::

    MemeshError
    ├── NotFound            not_found
    ├── ValidationFailed    validation          (400; the API maps shape errors to 422)
    ├── DimensionMismatch   dimension_mismatch
    ├── Unauthorized        unauthorized
    ├── Forbidden           forbidden
    ├── Conflict            conflict
    ├── TransactionFailed   transaction
    ├── QuotaExceeded       quota_exceeded
    ├── RateLimited         rate_limited        (carries retry_after seconds)
    ├── TimedOut            timeout
    ├── Unavailable         unavailable
    ├── StorageUnavailable  storage
    ├── EmbeddingFailed     embedding
    ├── ConfigInvalid       config
    └── InternalError       internal

The classes are picklable (they survive a Ray hop with their code, message and
retry hint intact). Transports map them to HTTP and gRPC status in exactly one
table (``api.errors``); nothing else chooses a status code.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """The spec's full code set (section 7)."""

    NOT_FOUND = "not_found"
    VALIDATION = "validation"
    DIMENSION_MISMATCH = "dimension_mismatch"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    CONFLICT = "conflict"
    TRANSACTION = "transaction"
    QUOTA_EXCEEDED = "quota_exceeded"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    STORAGE = "storage"
    EMBEDDING = "embedding"
    CONFIG = "config"
    INTERNAL = "internal"


class MemeshError(Exception):
    """Base of every caller-visible failure. ``message`` must be redaction-safe."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[type[MemeshError], tuple[str]]:
        return (type(self), (self.message,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class NotFound(MemeshError):
    code = ErrorCode.NOT_FOUND


class ValidationFailed(MemeshError):
    """``shape``: parsed JSON that is not the expected shape (a missing field, a wrong JSON type, an unknown
    key), found by a hand-written parser; REST answers it 422, as pydantic's shape errors, and 400 otherwise."""

    code = ErrorCode.VALIDATION

    def __init__(self, message: str, shape: bool = False) -> None:
        super().__init__(message)
        self.shape = shape

    def __reduce__(self) -> tuple[type[MemeshError], tuple[str, bool]]:  # type: ignore[override]
        return (type(self), (self.message, self.shape))


class DimensionMismatch(MemeshError):
    code = ErrorCode.DIMENSION_MISMATCH


class Unauthorized(MemeshError):
    code = ErrorCode.UNAUTHORIZED


class Forbidden(MemeshError):
    code = ErrorCode.FORBIDDEN


class Conflict(MemeshError):
    code = ErrorCode.CONFLICT


class TransactionFailed(MemeshError):
    code = ErrorCode.TRANSACTION


class QuotaExceeded(MemeshError):
    code = ErrorCode.QUOTA_EXCEEDED


class RateLimited(MemeshError):
    """Too many requests; ``retry_after`` is whole seconds, at least 1."""

    code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))

    def __reduce__(self) -> tuple[type[MemeshError], tuple[str, int]]:  # type: ignore[override]
        return (type(self), (self.message, self.retry_after))


class TimedOut(MemeshError):
    code = ErrorCode.TIMEOUT


class Unavailable(MemeshError):
    code = ErrorCode.UNAVAILABLE


class StorageUnavailable(MemeshError):
    code = ErrorCode.STORAGE


class EmbeddingFailed(MemeshError):
    code = ErrorCode.EMBEDDING


class ConfigInvalid(MemeshError):
    code = ErrorCode.CONFIG


class InternalError(MemeshError):
    code = ErrorCode.INTERNAL


__all__ = [
    "ConfigInvalid",
    "Conflict",
    "DimensionMismatch",
    "EmbeddingFailed",
    "ErrorCode",
    "Forbidden",
    "InternalError",
    "MemeshError",
    "NotFound",
    "QuotaExceeded",
    "RateLimited",
    "StorageUnavailable",
    "TimedOut",
    "TransactionFailed",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
]

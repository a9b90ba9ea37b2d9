"""Rich gRPC errors: every refusal as a ``google.rpc.Status`` (AIP-193), from the one table in :mod:`api.errors`.

Guarantees:
- The gRPC status code is :data:`api.errors.STATUS`'s for the error's spec
  code; nothing here chooses another. The message is the mesh error's
  (redaction-safe) message, without any prefix.
- Every status carries an ``ErrorInfo`` whose ``reason`` is the spec code in
  upper case (``RATE_LIMITED``) and whose ``domain`` is :data:`DOMAIN`.
- A validation failure whose field is known adds a ``BadRequest`` with one
  field violation per field (a ``dimension_mismatch`` names ``embedding``).
- ``rate_limited`` alone adds ``RetryInfo`` (its whole seconds, at least 1) and
  the ``retry-after`` trailing metadata with the same number, as REST's
  ``Retry-After``; ``quota_exceeded`` adds neither, as on REST.
- Everything goes out in ONE ``context.abort`` call: ``abort_with_status``
  would drop trailing metadata set before it.
- :func:`guarded` runs a call's work so that no exception reaches gRPC (which
  would answer UNKNOWN): anything but a MemeshError is logged and answered
  INTERNAL with reason ``INTERNAL``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from api.errors import STATUS
from mesh.errors import DimensionMismatch, ErrorCode, InternalError, MemeshError, RateLimited, ValidationFailed

log = logging.getLogger(__name__)
T = TypeVar("T")

DOMAIN = "memesh"
RETRY_AFTER = "retry-after"
Violation = tuple[str, str]  # (field path, description)
Metadata = tuple[tuple[str, str | bytes], ...]


def reason(code: ErrorCode | str) -> str:
    """``ErrorInfo.reason`` of a spec code: ``rate_limited`` -> ``RATE_LIMITED``."""
    return str(code).upper()


def field_path(loc: Sequence[str | int], prefix: str = "") -> str:
    """A pydantic error location as a proto field path: ``("cells", 0, "content")`` -> ``cells[0].content``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


class InvalidRequest(ValidationFailed):
    """A request refused for its fields (``validation``), with the fields at fault."""

    def __init__(self, message: str, violations: Sequence[Violation] = ()) -> None:
        super().__init__(message)
        self.violations = tuple(violations)

    def __reduce__(self) -> tuple[type[InvalidRequest], tuple[str, tuple[Violation, ...]]]:  # type: ignore[override]
        return (type(self), (self.message, self.violations))


def status_of(exc: MemeshError) -> tuple[grpc.StatusCode, str, Metadata]:
    """What :func:`abort` sends for ``exc``: the status code, the details text and the trailing metadata
    (``grpc-status-details-bin`` with the packed ``google.rpc.Status``, plus ``retry-after`` when limited)."""
    code = STATUS[exc.code][1]
    status = status_pb2.Status(code=code.value[0], message=exc.message)
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason(exc.code), domain=DOMAIN))
    violations: Sequence[Violation] = exc.violations if isinstance(exc, InvalidRequest) else ()
    if isinstance(exc, DimensionMismatch):
        violations = [("embedding", exc.message)]
    if violations:
        status.details.add().Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
                    for field, description in violations
                ]
            )
        )
    extra: Metadata = ()
    if isinstance(exc, RateLimited):
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=Duration(seconds=exc.retry_after)))
        extra = ((RETRY_AFTER, str(exc.retry_after)),)
    rich = rpc_status.to_status(status)
    return rich.code, rich.details, tuple(rich.trailing_metadata) + extra


async def guarded(context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` for a call; a MemeshError ends the call as its rich status, anything else
    (logged) as INTERNAL: no exception reaches gRPC, which would answer UNKNOWN."""
    try:
        return await work()
    except MemeshError as exc:
        await abort(context, exc)
    except grpc.aio.AbortError:
        raise
    except Exception:
        log.exception("gRPC data plane call failed")
        await abort(context, InternalError("internal error"))


async def abort(context: grpc.aio.ServicerContext, exc: MemeshError) -> NoReturn:
    """End the call with ``exc`` as a rich status (raises ``grpc.aio.AbortError``, as ``context.abort`` does)."""
    code, details, metadata = status_of(exc)
    await context.abort(code, details, metadata)
    raise AssertionError("context.abort returned")  # unreachable: abort raises

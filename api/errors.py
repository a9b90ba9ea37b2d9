"""The one mapping from memesh error codes to HTTP and gRPC status.

Routes and servicers never choose a status themselves: they raise
:class:`mesh.errors.MemeshError` and the handlers installed here encode it as
the spec's envelope ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from mesh.errors import ErrorCode, MemeshError, RateLimited, ValidationFailed

log = logging.getLogger(__name__)

STATUS: dict[ErrorCode, tuple[int, grpc.StatusCode]] = {
    ErrorCode.VALIDATION: (400, grpc.StatusCode.INVALID_ARGUMENT),
    ErrorCode.DIMENSION_MISMATCH: (400, grpc.StatusCode.INVALID_ARGUMENT),
    ErrorCode.UNAUTHORIZED: (401, grpc.StatusCode.UNAUTHENTICATED),
    ErrorCode.FORBIDDEN: (403, grpc.StatusCode.PERMISSION_DENIED),
    ErrorCode.NOT_FOUND: (404, grpc.StatusCode.NOT_FOUND),
    ErrorCode.CONFLICT: (409, grpc.StatusCode.FAILED_PRECONDITION),
    ErrorCode.TRANSACTION: (409, grpc.StatusCode.ABORTED),
    ErrorCode.QUOTA_EXCEEDED: (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ErrorCode.RATE_LIMITED: (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ErrorCode.INTERNAL: (500, grpc.StatusCode.INTERNAL),
    ErrorCode.EMBEDDING: (500, grpc.StatusCode.INTERNAL),
    ErrorCode.CONFIG: (500, grpc.StatusCode.INTERNAL),
    ErrorCode.UNAVAILABLE: (503, grpc.StatusCode.UNAVAILABLE),
    ErrorCode.STORAGE: (503, grpc.StatusCode.UNAVAILABLE),
    ErrorCode.TIMEOUT: (504, grpc.StatusCode.DEADLINE_EXCEEDED),
}

# Pydantic error types that mean "the JSON has the wrong shape" (422); any
# other validation failure is a malformed or out-of-range value (400).
_SHAPE_ERRORS = {"missing", "extra_forbidden", "model_type", "model_attributes_type", "dataclass_type"}


def envelope(code: ErrorCode | str, message: str) -> dict[str, Any]:
    return {"error": {"code": str(code), "message": message}}


def error_response(status: int, code: ErrorCode | str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(envelope(code, message), status_code=status, headers=headers)


def memesh_error_response(exc: MemeshError) -> JSONResponse:
    status = 422 if isinstance(exc, ValidationFailed) and exc.shape else STATUS[exc.code][0]
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else None
    if status >= 500:
        log.error("request failed: %s: %s", exc.code, exc.message)
    return error_response(status, exc.code, exc.message, headers)


def _wrong_choice_type(error: Any) -> bool:
    """An enum or literal refused for its JSON type, not its value: ``"cell_type": 5`` or ``null`` where one of
    some strings is expected (pydantic reports both as ``enum``/``literal_error``; only the value's case is 400)."""
    if error.get("type") not in ("enum", "literal_error"):
        return False
    value = error.get("input")
    strings = "'" in str((error.get("ctx") or {}).get("expected", ""))
    return isinstance(value, bool) or not isinstance(value, str if strings else int)


def validation_status(errors: list[Any]) -> int:
    """422 when the parsed JSON has the wrong shape (a missing field, a wrong type, a choice given as another
    JSON type); 400 otherwise (a value out of range, or not among the choices)."""
    types = [str(e.get("type", "")) for e in errors]
    if any(t == "json_invalid" for t in types):
        return 400
    if any(t in _SHAPE_ERRORS or t.endswith("_type") for t in types) or any(_wrong_choice_type(e) for e in errors):
        return 422
    return 400


def describe(errors: list[Any]) -> str:
    parts = []
    for e in errors[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MemeshError)
    async def _memesh(_: Request, exc: MemeshError) -> JSONResponse:
        return memesh_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        return error_response(validation_status(errors), ErrorCode.VALIDATION, describe(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = ErrorCode.NOT_FOUND if exc.status_code == 404 else ErrorCode.VALIDATION
        if exc.status_code >= 500:
            code = ErrorCode.INTERNAL
        message = str(exc.detail) if exc.status_code != 404 else "not found"
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:  # Starlette's own Allow stays where no top-level route matched (a mounted app's)
            headers["Allow"] = ", ".join(allowed_methods(request)) or headers.get("Allow", "")
        return error_response(exc.status_code, code, message, headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, ErrorCode.INTERNAL, "internal error")


HTTP_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (RFC 9110: a 405's ``Allow``). Starlette's own
    405 names only the first route whose path matched, so ``GET`` and ``POST /v1/cells`` gave ``Allow: POST``.
    Each method is tried against the app's routes with Starlette's public ``matches``."""
    routes = request.app.router.routes
    return [
        method
        for method in HTTP_METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]


def grpc_status(exc: MemeshError) -> grpc.StatusCode:
    return STATUS[exc.code][1]

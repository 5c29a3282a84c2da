"""Errors as HTTP answers: every failure is JSON ``{"error": {"type", "message"}}`` with the status
its cause deserves, and never a stack trace for a client's mistake.

A ``ChangelakeError`` keeps its class name as ``type``; its status comes from ``STATUS_OF`` (the
first entry the error is an instance of). Problems the service finds itself (a missing token, a
body too large) are ``HttpProblem``. Anything else is a bug of the service: 500, logged in full.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from changelake.errors import (
    BackpressureError,
    ChangelakeError,
    ChannelClosedError,
    ConflictError,
    ExpressionError,
    IngestTimeoutError,
    InsertRejectedError,
    JavaNotFoundError,
    ObjectExistsError,
    ObjectNotFoundError,
    SourceError,
    SparkStartError,
    StaleStreamError,
    StatementCancelledError,
    TransactionError,
)
from changelake.ingest import InsertError

log = logging.getLogger("changelake.server")

# Longest rendering of a rejected value sent back; a 16 MiB string is not echoed whole.
MAX_VALUE_CHARS = 1000

STATUS_OF: tuple[tuple[type[BaseException], int], ...] = (
    (InsertRejectedError, 422),
    (ObjectNotFoundError, 404),
    (ObjectExistsError, 409),
    (ConflictError, 409),  # ChannelFencedError, StreamConsumedError
    (ChannelClosedError, 409),
    (TransactionError, 409),  # COMMIT without BEGIN, BEGIN twice
    (StatementCancelledError, 409),
    (StaleStreamError, 409),
    (BackpressureError, 503),
    (JavaNotFoundError, 503),  # the service cannot run statements
    (SparkStartError, 503),
    (SourceError, 502),  # an external table's source failed
    (IngestTimeoutError, 504),
    (ExpressionError, 400),  # a statement's own expression failed (division by zero, ...)
    (ValueError, 400),  # ConfigurationError, IngestValidationError, ...
    (TypeError, 400),
    (NotImplementedError, 400),
)


class HttpProblem(Exception):
    """A request the service refuses on its own account (401, 413, 415, ...)."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.headers = headers or {}


def render_value(value: Any) -> str | None:
    """A rejected value as JSON-safe text: bytes as hex, text as is, rows as JSON, anything
    else by ``str``."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        text = bytes(value).hex()
    elif isinstance(value, str):
        text = value
    elif isinstance(value, dict | list | tuple):  # a row, or keys that match no column
        text = json.dumps(value, default=render_value, ensure_ascii=False)
    else:
        try:
            text = str(value)
        except ValueError:  # an int with more digits than str() allows
            text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[: MAX_VALUE_CHARS - 3]}..."


def error_items(errors: tuple[InsertError, ...]) -> list[dict[str, Any]]:
    return [
        {
            "row_index": e.row_index,
            "column": e.column,
            "value": render_value(e.value),
            "message": e.message,
        }
        for e in errors
    ]


def _answer(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(
        {"error": {"type": kind, "message": message, **extra}}, status_code=status, headers=headers
    )


def status_of(error: ChangelakeError) -> int:
    return next((status for kind, status in STATUS_OF if isinstance(error, kind)), 500)


def install(app: FastAPI, *, retry_after_seconds: float) -> None:
    """Register the handlers that turn exceptions into JSON answers."""
    retry_after = str(max(1, math.ceil(retry_after_seconds)))

    @app.exception_handler(ChangelakeError)
    async def changelake_error(request: Request, e: ChangelakeError) -> JSONResponse:
        status = status_of(e)
        if status >= 500 and not isinstance(e, BackpressureError | IngestTimeoutError):
            log.error("%s %s failed", request.method, request.url.path, exc_info=e)
        headers = {"Retry-After": retry_after} if isinstance(e, BackpressureError) else None
        if isinstance(e, InsertRejectedError):
            return _answer(status, type(e).__name__, str(e), errors=error_items(e.errors))
        return _answer(status, type(e).__name__, str(e), headers)

    @app.exception_handler(HttpProblem)
    async def http_problem(request: Request, e: HttpProblem) -> JSONResponse:
        return _answer(e.status, e.kind, e.message, e.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, e: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', '')}"
            for error in e.errors()
        )
        return _answer(400, "RequestValidationError", f"Invalid request: {problems}.")

    @app.exception_handler(HTTPException)
    async def http_exception(request: Request, e: HTTPException) -> JSONResponse:
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(e.status_code, "HTTPError")
        message = (
            f"No route {request.method} {request.url.path}; see /openapi.json."
            if e.status_code in (404, 405)
            else str(e.detail)
        )
        return _answer(e.status_code, kind, message, dict(e.headers or {}))

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=e)
        return _answer(
            500, "InternalError", "The service failed on this request; its log has the details."
        )

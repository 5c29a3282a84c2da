"""``POST /v1/sql``: one statement per request, run by the service's Spark, answered as JSON rows
with column types or as an Arrow IPC stream; ``/v1/sessions`` for a transaction that spans
requests. The service hands in what runs them (``changelake.sql.service``)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Body, Request, Response
from fastapi.params import Depends
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from changelake.server.models import error_responses

ARROW_STREAM = "application/vnd.apache.arrow.stream"
DEFAULT_MAX_ROWS = 10_000
MAX_ROWS = 1_000_000


class Statements(Protocol):
    def run(
        self, text: str, *, max_rows: int, session: str | None, arrow: bool, request: str | None
    ) -> dict[str, Any] | bytes: ...

    def cancel(self, request: str) -> dict[str, Any]: ...

    def open_session(self) -> str: ...

    def close_session(self, session: str) -> dict[str, Any]: ...


class SqlRequest(BaseModel):
    statement: str = Field(description="One SQL statement (a trailing ';' is allowed).")
    max_rows: int = Field(
        DEFAULT_MAX_ROWS, ge=0, le=MAX_ROWS, description="Rows answered at most; see truncated."
    )
    session: str | None = Field(
        None,
        description="A session from POST /v1/sessions: its open transaction (BEGIN ... COMMIT)"
        " spans the requests that name it. Without one, the statement runs on its own.",
    )
    request_id: str | None = Field(
        None,
        max_length=200,
        description="The client's id for this call: POST /v1/sql/cancel with it stops the"
        " statement (its Spark jobs; nothing is committed).",
    )


class CancelRequest(BaseModel):
    request_id: str


class Cancelled(BaseModel):
    request_id: str
    cancelled: bool


class Column(BaseModel):
    name: str
    type: str = Field(description="Spark SQL type, e.g. bigint, decimal(10,2), timestamp.")


class SqlResult(BaseModel):
    columns: list[Column]
    rows: list[list[Any]] = Field(
        description="Values as JSON: DECIMAL, DATE and TIMESTAMP as strings, BINARY as base64."
    )
    truncated: bool = Field(description="Whether the result had more than max_rows rows.")
    total_rows: int | None = Field(description="All rows of the result, when truncated.")
    session: str | None


class Session(BaseModel):
    session: str
    transaction: bool = Field(False, description="Whether a transaction was open (rolled back).")


def sql_routes(statements: Statements, dependencies: Sequence[Depends]) -> APIRouter:
    api = APIRouter(dependencies=list(dependencies), tags=["sql"])

    @api.post(
        "/v1/sql",
        summary="Run one SQL statement",
        responses={
            **error_responses(404, 409),
            200: {"content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}}},
        },
    )
    async def run(request: Request, body: Annotated[SqlRequest, Body()]) -> SqlResult:
        """Runs the statement in its own statement context (or in the session's transaction)
        and answers its result: a query's rows, a write's (statement id, operation, object,
        version, row counts). With `Accept: application/vnd.apache.arrow.stream` the rows come
        as an Arrow IPC stream instead (no truncation flag: at most max_rows rows). Errors are
        JSON problems, as ingest's are."""
        arrow = ARROW_STREAM in request.headers.get("accept", "")
        answer = await run_in_threadpool(
            partial(
                statements.run,
                body.statement,
                max_rows=body.max_rows,
                session=body.session,
                arrow=arrow,
                request=body.request_id,
            )
        )
        if isinstance(answer, bytes):
            return Response(answer, media_type=ARROW_STREAM)  # type: ignore[return-value]
        return SqlResult(**answer)

    @api.post(
        "/v1/sql/cancel", summary="Cancel a running statement", responses=error_responses(404)
    )
    async def cancel(body: Annotated[CancelRequest, Body()]) -> Cancelled:
        """Stops the Spark jobs of the statement sent with this `request_id` and answers once
        it ended; that request is answered 409 (StatementCancelledError) and committed nothing.
        A statement whose jobs had all finished may still commit and answer as usual."""
        return Cancelled(**await run_in_threadpool(statements.cancel, body.request_id))

    @api.post("/v1/sessions", summary="Open a session for a transaction across requests")
    async def open_session() -> Session:
        """A session holds at most one open transaction. It ends with DELETE, or after it was
        idle (no request) for the service's session timeout; an open transaction is then
        rolled back."""
        return Session(session=await run_in_threadpool(statements.open_session))

    @api.delete("/v1/sessions/{session}", summary="End a session", responses=error_responses(404))
    async def close_session(session: str) -> Session:
        """Rolls back the session's open transaction, if any."""
        return Session(**await run_in_threadpool(statements.close_session, session))

    return api

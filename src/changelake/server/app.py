"""The HTTP API of ``changelake serve``: the ingest channels of one ``changelake.ingest.Client``,
and the routes of what the caller hands in: SQL with sessions, dynamic tables, tasks and the
web dashboard.

Every call of the SDK that may block (catalog queries, flushes, waiting for a commit, validating a
request's rows) runs in a worker thread, so the event loop keeps serving other requests.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware

from changelake.errors import ChannelFencedError
from changelake.ingest import Channel, ChannelStatus, Client, InsertResponse
from changelake.server import problems
from changelake.server.auth import LOOPBACK_HOSTS, bearer_auth
from changelake.server.body import RowFormat, arrow_table, json_rows, read_body, row_format
from changelake.server.channels import OpenChannels
from changelake.server.dashboard import Dashboard, dashboard_routes
from changelake.server.dynamic_tables import DynamicTables, dynamic_table_routes
from changelake.server.models import (
    ClosedChannel,
    ErrorBody,
    Flushed,
    Health,
    InsertResult,
    OffsetToken,
    OpenChannelRequest,
    OpenedChannel,
    RowError,
)
from changelake.server.sql import Statements, sql_routes
from changelake.server.tasks import Tasks, task_routes

MiB = 1 << 20
DEFAULT_MAX_REQUEST_BYTES = 64 * MiB
MAX_WAIT_SECONDS = 3600.0
# Waits hold a thread each; they get their own pool so they never starve inserts of threads.
MAX_CONCURRENT_WAITS = 64

CHANNEL = "/v1/tables/{table}/channels/{channel}"


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorBody} for status in (400, 401, *statuses)}


_ROWS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            RowFormat.JSON_LINES.value: {
                "schema": {"type": "string"},
                "example": '{"id": 1, "amount": 12.50, "ts": "2026-01-01T00:00:00Z"}\n',
            },
            RowFormat.ARROW_STREAM.value: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


def create_app(
    client: Client,
    *,
    token: str | None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    dynamic_tables: DynamicTables | None = None,
    tasks: Tasks | None = None,
    statements: Statements | None = None,
    dashboard: Dashboard | None = None,
) -> FastAPI:
    """The ASGI app serving ``client``'s channels (and ``dynamic_tables``', ``tasks``' and
    ``statements``' routes: ``POST /v1/sql``; ``dashboard``'s web pages at ``/``). The app owns
    the client: it closes it (which commits every buffered row) when the server shuts down. With
    ``token`` every request but ``/v1/health`` and the OpenAPI description must carry
    ``Authorization: Bearer <token>``."""
    channels = OpenChannels()
    waits: list[anyio.CapacityLimiter] = []  # made inside the event loop, by the lifespan

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        waits.append(anyio.CapacityLimiter(MAX_CONCURRENT_WAITS))
        try:
            yield
        finally:
            await run_in_threadpool(client.close)

    served = (
        ("stream rows into tables through ingest channels with offset tokens", True),
        ("run SQL, in sessions that hold a transaction across requests", statements is not None),
        ("list, refresh, suspend and resume dynamic tables", dynamic_tables is not None),
        ("list, execute, suspend and resume tasks", tasks is not None),
        ("browse the warehouse in the read-only web dashboard at `/`", dashboard is not None),
    )
    app = FastAPI(
        title="changelake serve",
        version=importlib.metadata.version("changelake"),
        description="A changelake warehouse over HTTP: "
        + "; ".join(what for what, here in served if here)
        + ".",
        lifespan=lifespan,
    )
    problems.install(app, retry_after_seconds=client.max_client_lag)
    if token is None:
        # Without a token the service listens on loopback only (auth.check_exposure); a page
        # of another site that resolves its own host name to 127.0.0.1 (DNS rebinding) must
        # not reach it either: only requests addressed to a loopback name are served.
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK_HOSTS))
    api = APIRouter(dependencies=[Depends(bearer_auth(token))])

    @app.get("/v1/health", summary="Whether the service is up (no token needed)")
    async def health() -> Health:
        return Health()

    @api.put(CHANNEL, summary="Open (or reopen) a channel", responses=_errors(404))
    async def open_channel(
        table: str, channel: str, options: Annotated[OpenChannelRequest | None, Body()] = None
    ) -> OpenedChannel:
        """Opens the channel in this service, creating it on first open. Every open bumps the
        channel's epoch, so any earlier holder (this service's or another client's) can no longer
        commit. Resend the rows after `committed_offset_token`."""
        options = options or OpenChannelRequest()
        opened = await run_in_threadpool(
            client.open_channel,
            channel,
            table=table,
            on_error=options.on_error,
            offset_token=options.offset_token,
            error_table=options.error_table,
        )
        channels.add(opened)
        return OpenedChannel(
            table=opened.table,
            channel=opened.name,
            epoch=opened.epoch,
            committed_offset_token=opened.status().committed_offset_token,
        )

    @api.post(
        f"{CHANNEL}/rows",
        summary="Insert rows (JSON lines or an Arrow IPC stream)",
        responses=_errors(404, 409, 413, 415, 422, 503),
        openapi_extra=_ROWS_BODY,
    )
    async def insert_rows(
        table: str,
        channel: str,
        request: Request,
        start_offset_token: Annotated[
            str | None, Query(description="The first row's token (kept with rejected rows).")
        ] = None,
        end_offset_token: Annotated[
            str | None, Query(description="The last row's token; committed with the rows.")
        ] = None,
    ) -> InsertResult:
        """Validates the rows and buffers them in the channel; a flush (every max client lag, or
        POST /v1/flush) commits them with `end_offset_token`. Bad rows are reported per value;
        with on_error=abort one bad row rejects the request (422).

        Idempotent for retries: a request whose `end_offset_token` equals the token of the last
        request this channel accepted (in the same channel epoch: since it was opened here) is
        a resend of it; it is answered with `duplicate: true` and nothing is buffered again.
        Without `end_offset_token` every request is new."""
        handle = channels.get(table, channel)
        kind = row_format(request)
        body = await read_body(request, limit=max_request_bytes)
        response = await run_in_threadpool(
            _insert, handle, kind, body, start=start_offset_token, end=end_offset_token
        )
        return InsertResult(
            rows_inserted=response.rows_inserted,
            rows_errored=response.rows_errored,
            errors=[RowError(**item) for item in problems.error_items(response.errors)],
            duplicate=response.duplicate,
        )

    @api.get(
        f"{CHANNEL}/offset", summary="The channel's committed offset token", responses=_errors(404)
    )
    async def offset(table: str, channel: str) -> OffsetToken:
        """From the catalog: the token of the last row committed by any holder of the channel,
        whether or not it is open in this service."""
        handle = channels.find(table, channel)
        if handle is not None:
            token = await run_in_threadpool(handle.latest_committed_offset_token)
        else:
            tokens = await run_in_threadpool(
                client.latest_committed_offset_tokens, [channel], table=table
            )
            token = tokens[channel]
        return OffsetToken(committed_offset_token=token)

    @api.get(
        f"{CHANNEL}/status", summary="The channel's state in this service", responses=_errors(404)
    )
    async def status(table: str, channel: str) -> ChannelStatus:
        """Rows inserted, errored and buffered, tokens, the last error, and whether the channel
        is still valid (false once it was reopened elsewhere)."""
        return channels.get(table, channel).status()

    @api.post(
        f"{CHANNEL}/wait",
        summary="Wait until an offset token is committed",
        responses=_errors(404, 409, 504),
    )
    async def wait(
        table: str,
        channel: str,
        offset_token: Annotated[
            str, Query(description="Wait until the committed token is at or past it.")
        ],
        timeout: Annotated[
            float, Query(gt=0, le=MAX_WAIT_SECONDS, description="Seconds; 504 after.")
        ] = 30.0,
    ) -> OffsetToken:
        """Returns once the channel's committed token is at or past `offset_token` (tokens
        compare as integers when both are, else as strings)."""
        handle = channels.get(table, channel)
        await anyio.to_thread.run_sync(
            partial(handle.wait_for_commit, offset_token, timeout=timeout), limiter=waits[0]
        )
        return OffsetToken(committed_offset_token=handle.status().committed_offset_token)

    @api.post("/v1/flush", summary="Commit every buffered row now", responses=_errors(409))
    async def flush() -> Flushed:
        """Returns when the rows buffered in every channel are committed. 409 when a channel lost
        its rows because it was reopened (or dropped) elsewhere."""
        before = [c for c in channels.all() if c.is_valid]
        await run_in_threadpool(client.flush)
        fenced = [s for c in before if not (s := c.status()).valid]
        if fenced:
            raise ChannelFencedError(" ".join(s.last_error or "" for s in fenced))
        return Flushed(channels=len(before))

    @api.delete(CHANNEL, summary="Close (or drop) a channel", responses=_errors(404, 409))
    async def close_channel(
        table: str,
        channel: str,
        drop: Annotated[bool, Query(description="Also remove the channel and its token.")] = False,
    ) -> ClosedChannel:
        """Commits the channel's buffered rows and closes it here. With `drop=true` the channel
        and its committed token are removed from the catalog too (also when it is not open in
        this service); any holder can no longer commit."""
        handle = channels.find(table, channel)
        if handle is None:
            if not drop:
                channels.get(table, channel)  # raises: not open here
            await run_in_threadpool(client.drop_channel, channel, table=table)
            return ClosedChannel(table=table.lower(), channel=channel, dropped=True)
        try:
            await run_in_threadpool(partial(handle.close, drop=drop))
        finally:
            if not handle.is_valid:
                channels.remove(handle)
        return ClosedChannel(table=handle.table, channel=channel, dropped=drop)

    app.include_router(api)
    if dynamic_tables is not None:
        app.include_router(dynamic_table_routes(dynamic_tables, [Depends(bearer_auth(token))]))
    if tasks is not None:
        app.include_router(task_routes(tasks, [Depends(bearer_auth(token))]))
    if statements is not None:
        app.include_router(sql_routes(statements, [Depends(bearer_auth(token))]))
    if dashboard is not None:
        app.include_router(dashboard_routes(dashboard, token, "pipeline", live=channels.rates))
    return app


def _insert(
    channel: Channel, kind: RowFormat, body: bytes, *, start: str | None, end: str | None
) -> InsertResponse:
    tokens = {"start_offset_token": start, "end_offset_token": end, "skip_resend": True}
    if kind is RowFormat.ARROW_STREAM:
        return channel.insert_arrow(arrow_table(body), **tokens)
    return channel.insert_rows(json_rows(body), **tokens)

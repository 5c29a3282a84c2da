"""``/v1/tables/{table}/channels/{channel}`` and ``/v1/flush``: the ingest channels of one
``changelake.ingest.Client``, opened, written, waited on and closed over HTTP; and the channels
the service has opened, by table and name.

Every call of the client that may block (catalog queries, flushes, waiting for a commit,
validating a request's rows) runs in a worker thread, so the event loop keeps serving other
requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import APIRouter, Body, Query, Request
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from changelake.errors import ChannelFencedError, ChannelNotFoundError, did_you_mean
from changelake.ingest import Channel, ChannelStatus, Client, InsertResponse
from changelake.server import problems
from changelake.server.body import RowFormat, arrow_table, json_rows, read_body, row_format
from changelake.server.models import (
    ClosedChannel,
    Flushed,
    InsertResult,
    OffsetToken,
    OpenChannelRequest,
    OpenedChannel,
    RowError,
    error_responses,
)

ROUTE = "/v1/tables/{table}/channels/{channel}"
MAX_WAIT_SECONDS = 3600.0

T = TypeVar("T")

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


class OpenChannels:
    """Channel handles by (table, channel name). Table names match case-insensitively, as in
    SQL; channel names exactly. When two opens of one channel race, the later epoch stays."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, str], Channel] = {}
        self._opened: dict[tuple[str, str], float] = {}  # monotonic seconds

    def add(self, channel: Channel) -> None:
        key = (channel.table.lower(), channel.name)
        with self._lock:
            held = self._by_key.get(key)
            if held is None or channel.epoch >= held.epoch:
                self._by_key[key] = channel
                self._opened[key] = time.monotonic()

    def rates(self) -> dict[tuple[str, str], dict[str, float | int | None]]:
        """Per open channel (lower-case table, name): rows inserted, buffered and per second
        since it was opened in this service, and the wall-clock time of its last commit."""
        with self._lock:
            held = [(k, c, self._opened[k]) for k, c in self._by_key.items()]
        now = time.monotonic()
        found: dict[tuple[str, str], dict[str, float | int | None]] = {}
        for key, channel, opened in held:
            status = channel.status()
            found[key] = {
                "rows_inserted": status.rows_inserted,
                "rows_buffered": status.rows_buffered,
                "rows_per_second": status.rows_inserted / max(now - opened, 1e-3),
                "last_commit_at": status.last_commit_at,
            }
        return found

    def remove(self, channel: Channel) -> None:
        key = (channel.table.lower(), channel.name)
        with self._lock:
            if self._by_key.get(key) is channel:
                del self._by_key[key]
                del self._opened[key]

    def find(self, table: str, name: str) -> Channel | None:
        with self._lock:
            return self._by_key.get((table.lower(), name))

    def get(self, table: str, name: str) -> Channel:
        """The open channel, or ChannelNotFoundError saying how to open it."""
        found = self.find(table, name)
        if found is not None:
            return found
        with self._lock:
            names = [n for t, n in self._by_key if t == table.lower()]
        raise ChannelNotFoundError(
            f"Channel {name!r} on table {table} is not open in this service; open it with"
            f" PUT /v1/tables/{table}/channels/{name}.{did_you_mean(name, names)}"
        )

    def all(self) -> list[Channel]:
        with self._lock:
            return list(self._by_key.values())


class WaitThreads:
    """The worker threads of waits for a commit. A wait holds its thread until the commit, so
    waits get a pool of their own and never starve inserts of threads. The pool belongs to an
    event loop: ``start`` makes it, in the app's lifespan."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._limiter: anyio.CapacityLimiter | None = None

    def start(self) -> None:
        self._limiter = anyio.CapacityLimiter(self.most)

    async def run(self, call: Callable[[], T]) -> T:
        if self._limiter is None:
            raise RuntimeError("The wait threads are not started; the app's lifespan starts them.")
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)


def channel_routes(
    client: Client,
    dependencies: Sequence[Depends],
    *,
    channels: OpenChannels,
    waits: WaitThreads,
    max_request_bytes: int,
) -> APIRouter:
    """The routes of ``client``'s channels; those opened here are kept in ``channels``."""
    api = APIRouter(dependencies=list(dependencies))

    @api.put(ROUTE, summary="Open (or reopen) a channel", responses=error_responses(404))
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
        f"{ROUTE}/rows",
        summary="Insert rows (JSON lines or an Arrow IPC stream)",
        responses=error_responses(404, 409, 413, 415, 422, 503),
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
        f"{ROUTE}/offset",
        summary="The channel's committed offset token",
        responses=error_responses(404),
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
        f"{ROUTE}/status",
        summary="The channel's state in this service",
        responses=error_responses(404),
    )
    async def status(table: str, channel: str) -> ChannelStatus:
        """Rows inserted, errored and buffered, tokens, the last error, and whether the channel
        is still valid (false once it was reopened elsewhere)."""
        return channels.get(table, channel).status()

    @api.post(
        f"{ROUTE}/wait",
        summary="Wait until an offset token is committed",
        responses=error_responses(404, 409, 504),
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
        await waits.run(partial(handle.wait_for_commit, offset_token, timeout=timeout))
        return OffsetToken(committed_offset_token=handle.status().committed_offset_token)

    @api.post("/v1/flush", summary="Commit every buffered row now", responses=error_responses(409))
    async def flush() -> Flushed:
        """Returns when the rows buffered in every channel are committed. 409 when a channel lost
        its rows because it was reopened (or dropped) elsewhere."""
        before = [c for c in channels.all() if c.is_valid]
        await run_in_threadpool(client.flush)
        fenced = [s for c in before if not (s := c.status()).valid]
        if fenced:
            raise ChannelFencedError(" ".join(s.last_error or "" for s in fenced))
        return Flushed(channels=len(before))

    @api.delete(ROUTE, summary="Close (or drop) a channel", responses=error_responses(404, 409))
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

    return api


def _insert(
    channel: Channel, kind: RowFormat, body: bytes, *, start: str | None, end: str | None
) -> InsertResponse:
    tokens = {"start_offset_token": start, "end_offset_token": end, "skip_resend": True}
    if kind is RowFormat.ARROW_STREAM:
        return channel.insert_arrow(arrow_table(body), **tokens)
    return channel.insert_rows(json_rows(body), **tokens)

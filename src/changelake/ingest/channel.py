"""An ingest channel: an ordered producer of rows into one table, held by one client at a time.

Rows are validated when inserted and buffered in the channel; the client's flusher writes the
buffer as Parquet and commits it with the channel's offset token. The channel's epoch (from its
open) is checked at every commit, so a holder whose channel was reopened elsewhere commits nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import pyarrow as pa

from changelake.catalog.model import DataFile, TableInfo
from changelake.errors import (
    ChannelClosedError,
    ChannelFencedError,
    ConfigurationError,
    IngestTimeoutError,
    InsertRejectedError,
)
from changelake.ingest.rejects import Rejects
from changelake.ingest.tokens import TokenOrder, covers
from changelake.ingest.validate import InsertError, RowValidator, Validated
from changelake.schema import Column


class Owner(Protocol):
    """What a channel needs of the client that holds it."""

    max_channel_bytes: int

    def _reserve(self, nbytes: int) -> None: ...

    def _release(self, nbytes: int) -> None: ...

    def _wake_flusher(self) -> None: ...

    def _committed_token(self, channel: Channel) -> str | None: ...

    def _close_channel(self, channel: Channel, *, drop: bool) -> None: ...


class OnError(Enum):
    """What an insert call does with a bad row (Snowpipe Streaming's ON_ERROR)."""

    CONTINUE = "continue"  # keep the good rows, report the bad ones, advance the token
    ABORT = "abort"  # nothing of the call is kept; raise InsertRejectedError
    SKIP_BATCH = "skip_batch"  # nothing of the call is kept, report, the token stays

    @staticmethod
    def of(value: str | OnError) -> OnError:
        if isinstance(value, OnError):
            return value
        try:
            return OnError(str(value).lower())
        except ValueError:
            raise ConfigurationError(
                f"on_error={value!r} is not one of 'continue', 'abort', 'skip_batch'."
            ) from None


@dataclass(frozen=True)
class InsertResponse:
    """What one insert call did: rows buffered, and every rejected value; ``duplicate``: the
    call resent the last accepted one (see ``skip_resend``) and nothing was buffered."""

    rows_inserted: int
    errors: tuple[InsertError, ...] = ()
    duplicate: bool = False

    @property
    def has_errors(self) -> bool:
        return bool(self.errors)

    @property
    def rows_errored(self) -> int:
        return len({e.row_index for e in self.errors})


@dataclass(frozen=True)
class ChannelStatus:
    """A channel's state as its holder sees it."""

    table: str
    channel: str
    epoch: int
    valid: bool
    closed: bool
    rows_inserted: int  # accepted by insert calls since open
    rows_errored: int
    rows_buffered: int  # accepted but not yet committed
    committed_offset_token: str | None
    latest_offset_token: str | None  # the token of the last accepted insert
    last_error: str | None
    last_commit_at: float | None  # wall-clock seconds
    lag_seconds: float  # age of the oldest uncommitted row (0 when all are committed)


@dataclass
class Chunk:
    """Rows of a channel taken by a flush: written to files, then committed with ``token``."""

    tables: list[pa.Table] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    files: list[DataFile] = field(default_factory=list)
    reject_files: list[DataFile] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    token: str | None = None
    previous_token: str | None = None


class Channel:
    """A named channel on one table. Thread-safe. Obtain it from ``Client.open_channel``."""

    def __init__(
        self,
        client: Owner,
        *,
        name: str,
        table: TableInfo,
        epoch: int,
        committed_token: str | None,
        validator: RowValidator,
        on_error: OnError,
        token_order: TokenOrder,
        rejects: Rejects | None,
    ):
        self.name = name
        self.table = table.name
        self.table_id = table.table_id
        self.epoch = epoch
        self.on_error = on_error
        self._client = client
        self._validator = validator
        self._order = token_order
        self._rejects = rejects
        self._lock = threading.Condition()
        self._buffer = Chunk(token=committed_token)
        self._since: float | None = None  # monotonic time of the oldest uncommitted row
        self._pending: Chunk | None = None  # taken by a flush, not yet committed
        self._committed = committed_token
        self._token_moved = False
        self._fenced: str | None = None
        self._closed = False
        self._inserted = self._errored = 0
        self._last_error: str | None = None
        self._last_commit_at: float | None = None

    @property
    def columns(self) -> tuple[Column, ...]:
        """The table's columns when the channel was opened: the ones its rows hold."""
        return self._validator.columns

    @property
    def error_table(self) -> str | None:
        return self._rejects.table if self._rejects else None

    # -- inserts ------------------------------------------------------------------------------

    def insert_row(self, row: Mapping[str, Any], offset_token: str | None = None) -> InsertResponse:
        """Validate and buffer one row (a mapping of column name to value); ``offset_token``
        becomes the channel's token once the row is committed."""
        return self.insert_rows([row], end_offset_token=offset_token)

    def insert_rows(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        start_offset_token: str | None = None,
        end_offset_token: str | None = None,
        skip_resend: bool = False,
    ) -> InsertResponse:
        """Validate and buffer rows in order. ``end_offset_token`` is the token of the last row
        (committed with it); ``start_offset_token``, the first row's, is kept with rejected rows.

        With ``skip_resend``, a call whose ``end_offset_token`` equals the token of the last
        insert this channel accepted (or, before any, its committed token) is a resend of that
        insert: nothing is buffered and the response says ``duplicate`` (an HTTP client that
        retries a request it got no answer to does not land its rows twice)."""
        self._check_usable()
        rows = rows if isinstance(rows, list) else list(rows)
        checked = self._validator.rows(rows)
        return self._accept(checked, start_offset_token, end_offset_token, skip_resend)

    def insert_arrow(
        self,
        data: Any,
        *,
        start_offset_token: str | None = None,
        end_offset_token: str | None = None,
        skip_resend: bool = False,
    ) -> InsertResponse:
        """Like :meth:`insert_rows` for a ``pyarrow.Table``, ``RecordBatch`` or pandas
        DataFrame whose column names are the table's (case-insensitive)."""
        self._check_usable()
        checked = self._validator.arrow(data)
        return self._accept(checked, start_offset_token, end_offset_token, skip_resend)

    def _accept(
        self, checked: Validated, start: str | None, end: str | None, skip_resend: bool
    ) -> InsertResponse:
        errors = checked.errors
        if errors and self.on_error is OnError.ABORT:
            first = errors[0]
            raise InsertRejectedError(
                f"Row {first.row_index} of the insert into channel {self.name!r} (table"
                f" {self.table}) was rejected: {first.message} ON_ERROR=ABORT: nothing of this"
                f" call was buffered ({len(errors)} bad value(s)); fix the rows and send the"
                " call again.",
                errors,
            )
        good = checked.good if not errors or self.on_error is OnError.CONTINUE else None
        nbytes = good.nbytes if good is not None else 0
        self._client._reserve(nbytes)
        try:
            with self._lock:
                self._check_usable()
                if skip_resend and end is not None and end == self._buffer.token:
                    self._client._release(nbytes)
                    return InsertResponse(0, (), duplicate=True)
                self._add(good, errors, start, end)
        except BaseException:
            self._client._release(nbytes)
            raise
        if self._buffer.nbytes >= self._client.max_channel_bytes:
            self._client._wake_flusher()
        return InsertResponse(good.num_rows if good is not None else 0, errors)

    def _add(
        self,
        good: pa.Table | None,
        errors: tuple[InsertError, ...],
        start: str | None,
        end: str | None,
    ) -> None:
        buffer = self._buffer
        if errors:
            self._errored += len({e.row_index for e in errors})
            self._last_error = errors[-1].message
            if self._rejects is not None:
                buffer.rejects.extend(self._rejects.records(self.name, errors, start, end))
        if good is not None:
            if good.num_rows:
                buffer.tables.append(good)
                buffer.rows += good.num_rows
                buffer.nbytes += good.nbytes
                self._inserted += good.num_rows
            if end is not None:
                buffer.token = end
                self._token_moved = True
        if self._since is None and (buffer.rows or buffer.rejects or self._token_moved):
            self._since = time.monotonic()

    # -- what the flusher does ----------------------------------------------------------------

    def _due(self, *, now: float, lag: float) -> bool:
        with self._lock:
            if self._pending is not None:
                return True
            waiting = self._buffer.rows or self._buffer.rejects or self._token_moved
            return bool(waiting) and self._since is not None and now - self._since >= lag

    def _take(self) -> Chunk | None:
        """The rows to commit next: a chunk a failed commit left, plus everything buffered."""
        with self._lock:
            if self._fenced is not None:
                return None
            buffer, pending = self._buffer, self._pending
            if buffer.rows or buffer.rejects or self._token_moved:
                if pending is None:
                    pending = Chunk(previous_token=self._committed)
                pending.tables += buffer.tables
                pending.rejects += buffer.rejects
                pending.rows += buffer.rows
                pending.nbytes += buffer.nbytes
                pending.token = buffer.token
                self._buffer = Chunk(token=buffer.token)
                self._token_moved = False
            self._pending = pending
            return pending

    def _committed_chunk(self, chunk: Chunk, *, at: float) -> None:
        with self._lock:
            self._committed = chunk.token
            self._pending = None
            self._last_commit_at = at
            idle = not (self._buffer.rows or self._buffer.rejects or self._token_moved)
            self._since = None if idle else time.monotonic()
            self._lock.notify_all()

    def _failed(self, message: str) -> None:
        with self._lock:
            self._last_error = message

    def _fence(self, message: str) -> int:
        """Invalidate the channel; its uncommitted rows are dropped. Returns their bytes."""
        with self._lock:
            self._fenced = self._fenced or message
            self._last_error = message
            dropped = self._buffer.nbytes + (self._pending.nbytes if self._pending else 0)
            self._buffer, self._pending, self._since = Chunk(token=self._committed), None, None
            self._lock.notify_all()
            return dropped

    # -- offsets and status -------------------------------------------------------------------

    def latest_committed_offset_token(self) -> str | None:
        """The offset token last committed on this channel, as the catalog has it (any holder's;
        after a crash, resend from the row after it)."""
        return self._client._committed_token(self)

    def wait_for_commit(self, offset_token: str, *, timeout: float | None = None) -> None:
        """Block until ``offset_token`` is committed: the committed token is at or past it by the
        channel's token order (tokens are committed in batches). Raises IngestTimeoutError after
        ``timeout`` seconds, ChannelFencedError if the channel was reopened elsewhere."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not covers(self._committed, offset_token, self._order):
                if self._fenced is not None:
                    raise ChannelFencedError(self._fenced)
                if self._closed:
                    raise ChannelClosedError(f"Channel {self.name!r} is closed.")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise IngestTimeoutError(
                        f"Offset token {offset_token!r} of channel {self.name!r} (table"
                        f" {self.table}) was not committed within {timeout} s; the committed"
                        f" token is {self._committed!r}. See status().last_error."
                    )
                self._lock.wait(0.05 if left is None else min(left, 0.05))

    def status(self) -> ChannelStatus:
        with self._lock:
            pending = self._pending
            buffered = self._buffer.rows + (pending.rows if pending else 0)
            return ChannelStatus(
                table=self.table,
                channel=self.name,
                epoch=self.epoch,
                valid=self._fenced is None,
                closed=self._closed,
                rows_inserted=self._inserted,
                rows_errored=self._errored,
                rows_buffered=buffered,
                committed_offset_token=self._committed,
                latest_offset_token=self._buffer.token,
                last_error=self._last_error,
                last_commit_at=self._last_commit_at,
                lag_seconds=0.0 if self._since is None else time.monotonic() - self._since,
            )

    @property
    def is_valid(self) -> bool:
        return self._fenced is None and not self._closed

    def close(self, *, drop: bool = False) -> None:
        """Commit everything buffered, then close the channel; ``drop`` also removes it (and its
        committed token) from the catalog. Raises ChannelFencedError if rows could not be
        committed because the channel was reopened elsewhere."""
        if self._closed:
            return
        self._client._close_channel(self, drop=drop)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _mark_closed(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def _check_usable(self) -> None:
        if self._fenced is not None:
            raise ChannelFencedError(self._fenced)
        if self._closed:
            raise ChannelClosedError(
                f"Channel {self.name!r} on table {self.table} is closed; open it again with"
                " client.open_channel()."
            )

    def __repr__(self) -> str:
        return f"Channel({self.name!r}, table={self.table!r}, epoch={self.epoch})"

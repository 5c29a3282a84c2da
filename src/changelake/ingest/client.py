"""The ingest client: opens channels on tables of a warehouse and flushes their rows in the
background. A client is a plain Python object: it writes Parquet with PyArrow and talks to the
catalog database; it never starts a JVM."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from changelake.catalog import Catalog
from changelake.catalog.internal import check_user_may_change
from changelake.catalog.requests import ChannelHeld, CommitRequest, DropChannel, OpenChannel
from changelake.clock import Clock, SystemClock
from changelake.errors import (
    BackpressureError,
    ChannelFencedError,
    ChannelNotFoundError,
    ConfigurationError,
    did_you_mean,
)
from changelake.ingest.channel import Channel, OnError
from changelake.ingest.compact import COMPACT_AFTER_FILES
from changelake.ingest.flush import Flusher
from changelake.ingest.rejects import error_table as open_error_table
from changelake.ingest.tokens import TokenOrder, default_order
from changelake.ingest.validate import RowValidator
from changelake.storage.warehouse import Warehouse

MiB = 1 << 20


class Client:
    """A streaming-ingest client on one warehouse. Thread-safe; use it as a context manager (or
    call :meth:`close`) so buffered rows are committed before the process exits.

    ``max_client_lag`` is how long (seconds) a row may wait in a buffer before its flush;
    ``max_buffer_bytes`` bounds the memory of all buffered rows: past it an insert blocks until
    a flush frees room (``on_full="block"``, at most ``block_timeout`` seconds) or raises
    BackpressureError at once (``on_full="raise"``); either way the rows of that call are not
    buffered and can be sent again. ``max_channel_bytes`` flushes a channel early when its buffer
    reaches that size. Naive datetimes are read in ``default_timezone``. After its flushes have
    added ``compact_after_files`` files to a table, the client merges the table's small files
    (keeping row identity; None: never, leave it to OPTIMIZE).
    """

    def __init__(
        self,
        warehouse: str,
        *,
        catalog: str | None = None,
        max_client_lag: float = 1.0,
        max_buffer_bytes: int = 256 * MiB,
        max_channel_bytes: int = 32 * MiB,
        on_full: str = "block",
        block_timeout: float = 60.0,
        default_timezone: str = "UTC",
        compact_after_files: int | None = COMPACT_AFTER_FILES,
        clock: Clock | None = None,
    ):
        if max_client_lag <= 0 or max_buffer_bytes <= 0 or max_channel_bytes <= 0:
            raise ConfigurationError(
                "max_client_lag, max_buffer_bytes and max_channel_bytes must be positive."
            )
        if on_full not in ("block", "raise"):
            raise ConfigurationError(f"on_full={on_full!r} is not 'block' or 'raise'.")
        self._warehouse = Warehouse.at(warehouse)
        self._catalog = Catalog(self._warehouse.catalog_url(catalog))
        self._clock = clock or SystemClock()
        self.max_client_lag = max_client_lag
        self.max_buffer_bytes = max_buffer_bytes
        self.max_channel_bytes = max_channel_bytes
        self.default_timezone = default_timezone
        self._on_full = on_full
        self._block_timeout = block_timeout
        self._lock = threading.Lock()
        self._channels: dict[tuple[int, str], Channel] = {}
        self._memory = threading.Condition()
        self._buffered_bytes = 0
        self._closed = False
        self._flusher = Flusher(
            self._catalog,
            self._warehouse,
            self._clock,
            channels=self._open_channels,
            lag=max_client_lag,
            released=self._release,
            compact_after_files=compact_after_files,
        )

    # -- channels -----------------------------------------------------------------------------

    def open_channel(
        self,
        name: str,
        *,
        table: str,
        on_error: str | OnError = "continue",
        offset_token: str | None = None,
        error_table: str | None = None,
        token_order: TokenOrder = default_order,
    ) -> Channel:
        """Open channel ``name`` on ``table`` (created on first open). Opening bumps the
        channel's epoch: an earlier holder, in this or any process, can no longer commit.

        The channel continues from its committed offset token (see
        :meth:`Channel.latest_committed_offset_token`); ``offset_token`` given sets it instead.
        ``on_error``: ``"continue"`` keeps the good rows of a call and advances the token,
        ``"abort"`` raises InsertRejectedError and keeps nothing of the call, ``"skip_batch"``
        keeps nothing of a call with a bad row and leaves the token. ``error_table`` names a
        table (created if missing) that receives every rejected row.
        """
        self._check_open()
        mode = OnError.of(on_error)
        info = self._catalog.table(table)
        check_user_may_change(self._catalog, info, action="open an ingest channel on")
        schema = self._catalog.schema_at(info.table_id, info.current_version)
        rejects = (
            open_error_table(self._catalog, error_table, source_table=info.name, clock=self._clock)
            if error_table
            else None
        )
        result = self._catalog.commit(
            [
                CommitRequest(
                    f"ingest-open-{uuid.uuid4().hex}",
                    "OPEN CHANNEL",
                    updates=(
                        OpenChannel(
                            info.table_id,
                            name,
                            offset_token=offset_token,
                            reset_token=offset_token is not None,
                        ),
                    ),
                )
            ],
            clock=self._clock,
        )
        opened = result.channels[(info.table_id, name)]
        channel = Channel(
            self,
            name=name,
            table=info,
            epoch=opened.epoch,
            committed_token=opened.offset_token,
            validator=RowValidator(schema, table=info.name, default_timezone=self.default_timezone),
            on_error=mode,
            token_order=token_order,
            rejects=rejects,
        )
        with self._lock:
            earlier = self._channels.get((info.table_id, name))
            self._channels[(info.table_id, name)] = channel
        if earlier is not None:
            self._release(
                earlier._fence(
                    f"Ingest channel {name!r} on table {info.name} was reopened by this client"
                    f" (epoch {opened.epoch}); this handle's uncommitted rows were dropped."
                )
            )
        return channel

    def channel(self, name: str, *, table: str | None = None) -> Channel:
        """An open channel of this client by name (``table`` when two tables have one)."""
        with self._lock:
            found = [
                c
                for (_, n), c in self._channels.items()
                if n == name and (table is None or c.table == table.lower())
            ]
            names = sorted({n for _, n in self._channels})
        if len(found) == 1:
            return found[0]
        if not found:
            raise ChannelNotFoundError(
                f"This client has no open channel {name!r}"
                f"{'' if table is None else f' on table {table}'}.{did_you_mean(name, names)}"
            )
        raise ChannelNotFoundError(
            f"Channel {name!r} is open on several tables ({', '.join(c.table for c in found)});"
            " pass table=."
        )

    def latest_committed_offset_tokens(
        self, names: Iterable[str], *, table: str | None = None
    ) -> dict[str, str | None]:
        """The committed offset token of each named channel, from the catalog. With ``table``
        any channel of that table may be named; without it, this client's open channels."""
        if table is None:
            return {name: self.channel(name).latest_committed_offset_token() for name in names}
        info = self._catalog.table(table)
        committed = {c.name: c.offset_token for c in self._catalog.list_channels(info.table_id)}
        found: dict[str, str | None] = {}
        for name in names:
            if name not in committed:
                raise ChannelNotFoundError(
                    f"Table {info.name} has no ingest channel {name!r}."
                    f"{did_you_mean(name, committed)}"
                )
            found[name] = committed[name]
        return found

    def drop_channel(self, name: str, *, table: str | None = None) -> None:
        """Remove channel ``name`` and its committed token from the catalog; a holder of it (in
        any process) can no longer commit. Rows this client buffered for it are dropped."""
        info = self._catalog.table(table) if table is not None else None
        if info is None:
            info = self._catalog.table_by_id(self.channel(name).table_id)
        self._catalog.commit(
            [
                CommitRequest(
                    f"ingest-drop-{uuid.uuid4().hex}",
                    "DROP CHANNEL",
                    updates=(DropChannel(info.table_id, name),),
                )
            ],
            clock=self._clock,
        )
        with self._lock:
            held = self._channels.pop((info.table_id, name), None)
        if held is not None:
            self._release(held._fence(f"Ingest channel {name!r} on table {info.name} was dropped."))
            held._mark_closed()

    def _close_channel(self, channel: Channel, *, drop: bool) -> None:
        try:
            self._flusher.flush(table_id=channel.table_id)
            if channel._fenced is not None:
                raise ChannelFencedError(channel._fenced)
            if drop:
                self._catalog.commit(
                    [
                        CommitRequest(
                            f"ingest-drop-{uuid.uuid4().hex}",
                            "DROP CHANNEL",
                            updates=(DropChannel(channel.table_id, channel.name),),
                            requirements=(
                                ChannelHeld(
                                    channel.table_id,
                                    channel.table,
                                    channel.name,
                                    channel.epoch,
                                    channel._committed,
                                ),
                            ),
                        )
                    ],
                    clock=self._clock,
                )
        finally:
            if channel._fenced is not None or not channel.status().rows_buffered:
                with self._lock:
                    if self._channels.get((channel.table_id, channel.name)) is channel:
                        del self._channels[(channel.table_id, channel.name)]
                channel._mark_closed()

    def _committed_token(self, channel: Channel) -> str | None:
        found = self._catalog.find_channel(channel.table_id, channel.name)
        return found.offset_token if found else None

    def _open_channels(self) -> list[Channel]:
        with self._lock:
            return list(self._channels.values())

    # -- flushing and memory ------------------------------------------------------------------

    def flush(self) -> None:
        """Commit every buffered row of every channel now; returns when they are committed.
        Raises the first failure (e.g. ChannelFencedError) after trying every table."""
        self._flusher.flush()

    def _wake_flusher(self) -> None:
        self._flusher.wake()

    def _reserve(self, nbytes: int) -> None:
        deadline = time.monotonic() + self._block_timeout
        with self._memory:
            while self._buffered_bytes and self._buffered_bytes + nbytes > self.max_buffer_bytes:
                self._flusher.wake()
                left = deadline - time.monotonic()
                if self._on_full == "raise" or left <= 0:
                    raise BackpressureError(
                        f"The ingest client's buffers hold {self._buffered_bytes} bytes, and"
                        f" {nbytes} more would pass max_buffer_bytes={self.max_buffer_bytes};"
                        " nothing of this call was buffered. Retry it after a flush commits"
                        " (or raise max_buffer_bytes / lower max_client_lag)."
                    )
                self._memory.wait(min(left, 0.05))
            self._buffered_bytes += nbytes

    def _release(self, nbytes: int) -> None:
        if nbytes:
            with self._memory:
                self._buffered_bytes -= nbytes
                self._memory.notify_all()

    @property
    def buffered_bytes(self) -> int:
        """Bytes of rows accepted and not yet committed, over all channels."""
        return self._buffered_bytes

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what is buffered, stop the background flush, release the catalog."""
        if self._closed:
            return
        try:
            self._flusher.flush()
        finally:
            self._closed = True
            self._flusher.stop()
            for channel in self._open_channels():
                channel._mark_closed()
            self._catalog.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("This ingest client is closed; create a new Client.")

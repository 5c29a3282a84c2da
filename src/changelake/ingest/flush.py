"""The flusher: every ``max_client_lag`` (or sooner, when a channel's buffer is large) it writes
each channel's buffered rows as a Parquet file and commits the files of all channels of a table in
one catalog transaction, together with every channel's new offset token.

Each channel's commit requires the channel's epoch and previous token (compare-and-set): a holder
whose channel was reopened elsewhere commits nothing. A commit that fails for a transient reason
(the database unreachable, a full disk) keeps its chunk, which the next flush commits first, so
the rows of a channel are committed in order.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence

import pyarrow as pa

from changelake.catalog import Catalog
from changelake.catalog.model import DataFile
from changelake.catalog.requests import AdvanceChannel, ChannelHeld, Requirement, Update
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.clock import Clock
from changelake.errors import ChangelakeError, ChannelFencedError
from changelake.ingest.channel import Channel, Chunk
from changelake.ingest.compact import compact
from changelake.ingest.files import delete_files, new_directory, write_file
from changelake.schema import Column
from changelake.storage.warehouse import Warehouse

_TICK_SECONDS = 0.02


class Flusher:
    """Flushes a client's channels, from a background thread or on demand."""

    def __init__(
        self,
        catalog: Catalog,
        warehouse: Warehouse,
        clock: Clock,
        *,
        channels: Callable[[], Sequence[Channel]],
        lag: float,
        released: Callable[[int], None],
        compact_after_files: int | None,
    ):
        self._catalog = catalog
        self._warehouse = warehouse
        self._clock = clock
        self._channels = channels
        self._lag = lag
        self._released = released
        self._compact_after = compact_after_files
        self._files_since_compaction: dict[int, int] = defaultdict(int)
        self._lock = threading.Lock()  # one flush at a time: chunks commit in order
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="changelake-ingest-flush", daemon=True
        )
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            forced = self._wake.wait(_TICK_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.flush(force=forced, only_due=not forced)
            except Exception:  # noqa: BLE001 - recorded on the channels; the next tick retries
                pass

    def flush(
        self, *, force: bool = True, only_due: bool = False, table_id: int | None = None
    ) -> None:
        """Commit what the channels hold: all of it (``force``), or only what is due (older than
        the lag, large, or left by a failed commit). Raises the first failure after trying every
        table."""
        first: Exception | None = None
        with self._lock:
            now = time.monotonic()
            by_table: dict[int, list[Channel]] = defaultdict(list)
            for channel in self._channels():
                if table_id is not None and channel.table_id != table_id:
                    continue
                if not only_due or channel._due(now=now, lag=self._lag):
                    by_table[channel.table_id].append(channel)
            for channels in by_table.values():
                try:
                    self._flush_table(channels)
                except Exception as e:  # noqa: BLE001 - raised below, after the other tables
                    first = first or e
        if first is not None and force:
            raise first

    def _flush_table(self, channels: list[Channel]) -> None:
        taken = [(c, chunk) for c in channels if (chunk := c._take()) is not None]
        fenced: list[str] = []
        while taken:
            try:
                self._write(taken)
                at = self._commit(taken)
            except ChannelFencedError:
                taken = self._drop_fenced(taken, fenced)
                continue
            except ChangelakeError as e:
                # The table was dropped or replaced: nothing these channels hold can commit.
                for channel, chunk in taken:
                    self._discard(channel, chunk, str(e))
                raise
            except Exception as e:
                for channel, _ in taken:
                    channel._failed(f"Commit failed, retried at the next flush: {e}")
                raise
            for channel, chunk in taken:
                channel._committed_chunk(chunk, at=at)
                self._released(chunk.nbytes)
            self._maybe_compact(taken[0][0].table_id, sum(len(c.files) for _, c in taken))
            break
        if fenced:
            raise ChannelFencedError(fenced[0])

    def _maybe_compact(self, table_id: int, added: int) -> None:
        """Merge the table's small files once this client has added enough of them. A failure
        (a concurrent DELETE touched one of them) is left for the next time."""
        if self._compact_after is None:
            return
        self._files_since_compaction[table_id] += added
        if self._files_since_compaction[table_id] < self._compact_after:
            return
        self._files_since_compaction[table_id] = 0
        try:
            compact(self._catalog, self._warehouse, self._clock, table_id)
        except ChangelakeError:
            pass

    def _write(self, taken: list[tuple[Channel, Chunk]]) -> None:
        directory = new_directory()
        for part, (channel, chunk) in enumerate(taken):
            if chunk.tables:
                data = pa.concat_tables(chunk.tables)
                chunk.files.append(
                    write_file(self._warehouse, data, directory=directory, part=part)
                )
                chunk.tables = []
            if chunk.rejects and channel._rejects is not None:
                data = channel._rejects.to_arrow(chunk.rejects)
                part_ = len(taken) + part
                chunk.reject_files.append(
                    write_file(self._warehouse, data, directory=directory, part=part_)
                )
                chunk.rejects = []

    def _commit(self, taken: list[tuple[Channel, Chunk]]) -> float:
        table_id = taken[0][0].table_id
        writes: list[TableWrite] = []
        updates: list[Update] = []
        requirements: list[Requirement] = []
        for c, chunk in taken:
            # a channel's write requires its table even when it adds no rows: its token moves
            writes.append(_appended(c.table_id, c.table, chunk.files, c.columns))
            if chunk.reject_files and c._rejects is not None:
                r = c._rejects
                writes.append(_appended(r.table_id, r.table, chunk.reject_files, r.columns))
            updates.append(AdvanceChannel(table_id, c.name, chunk.token))
            requirements.append(
                ChannelHeld(table_id, c.table, c.name, c.epoch, chunk.previous_token)
            )
        request = write_request(
            f"ingest-{uuid.uuid4().hex}",
            "INGEST",
            writes,
            updates=updates,
            requirements=requirements,
        )
        result = self._catalog.commit([request], clock=self._clock)
        assert result.commit is not None
        return result.commit.committed_at

    def _drop_fenced(
        self, taken: list[tuple[Channel, Chunk]], fenced: list[str]
    ) -> list[tuple[Channel, Chunk]]:
        """After a refused commit: fence the channels whose epoch or token moved (or that were
        dropped); a chunk whose token the catalog already has was committed by an earlier try
        whose answer was lost. Returns the chunks still to commit."""
        keep = []
        for channel, chunk in taken:
            found = self._catalog.find_channel(channel.table_id, channel.name)
            if found is not None and found.epoch == channel.epoch:
                if found.offset_token == chunk.previous_token:
                    keep.append((channel, chunk))
                    continue
                if found.offset_token == chunk.token:
                    channel._committed_chunk(chunk, at=self._clock.now())
                    self._released(chunk.nbytes)
                    continue
            reason = (
                f"Ingest channel {channel.name!r} on table {channel.table} was reopened elsewhere"
                f" (epoch {found.epoch}, this holder has {channel.epoch})"
                if found is not None and found.epoch != channel.epoch
                else f"Ingest channel {channel.name!r} on table {channel.table} was dropped"
                if found is None
                else f"Ingest channel {channel.name!r} on table {channel.table} moved to offset"
                f" token {found.offset_token!r} behind this holder's back"
            )
            message = (
                f"{reason}; its {chunk.rows} uncommitted rows were not committed. Resend from"
                " latest_committed_offset_token() through the current holder."
            )
            fenced.append(message)
            self._discard(channel, chunk, message)
        return keep

    def _discard(self, channel: Channel, chunk: Chunk, message: str) -> None:
        delete_files(self._warehouse, chunk.files + chunk.reject_files)
        self._released(channel._fence(message))


def _appended(
    table_id: int, table: str, files: Sequence[DataFile], columns: tuple[Column, ...]
) -> TableWrite:
    """A channel's append of ``files`` (holding ``columns``) to a table."""
    inserted = sum(f.row_count for f in files)
    return TableWrite(
        table_id,
        table,
        None,
        WriteKind.CHANNEL,
        added=tuple(files),
        inserted=inserted,
        columns=columns,
    )

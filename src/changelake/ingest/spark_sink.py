"""A Structured Streaming sink that lands each micro-batch in a table exactly once.

``df.writeStream.foreachBatch(sink)`` hands the sink every micro-batch with its batch id. The sink
holds an ingest channel on the table whose offset token is the id of the last batch it landed, and
commits a batch's files together with the token in one catalog transaction. Spark records a batch
in its checkpoint only after ``foreachBatch`` returns, so a process that dies between the two
commits replays a batch the catalog already has: its id equals the token and the sink skips it.
Opening the channel fences its earlier holder (the sink of an older run of the query, still
alive): every commit of that one is refused with ChannelFencedError.
"""

from __future__ import annotations

import uuid

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from changelake.catalog import Catalog
from changelake.catalog.internal import check_user_may_change
from changelake.catalog.model import ChannelInfo, DataFile
from changelake.catalog.requests import AdvanceChannel, ChannelHeld, CommitRequest, OpenChannel
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.clock import Clock
from changelake.errors import (
    ChangelakeError,
    ChannelFencedError,
    ColumnNotFoundError,
    InvalidStatementError,
    did_you_mean,
)
from changelake.schema import TableSchema, quoted
from changelake.spark.errors import spark_errors
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import write_data

OPERATION = "STREAMING APPEND"


class SparkSink:
    """A ``foreachBatch`` function appending each micro-batch to ``table`` exactly once, through
    ingest channel ``channel`` (opened here, fencing any earlier holder of it).

    Batch columns are matched to the table's by name, case-insensitively; table columns the
    batch lacks get NULL. Rows get fresh row ids, so change queries see them as inserts. An
    empty batch advances the channel and makes no table version.

    The channel's token is a batch id of the query's checkpoint: give each checkpoint location a
    channel of its own (a query started on a new checkpoint restarts at batch 0, which the sink
    refuses on a channel that has landed later batches).
    """

    def __init__(
        self, catalog: Catalog, warehouse: Warehouse, clock: Clock, *, table: str, channel: str
    ):
        info = catalog.table(table)
        check_user_may_change(catalog, info, action="open an ingest channel on")
        result = catalog.commit(
            [
                CommitRequest(
                    f"sink-open-{uuid.uuid4().hex}",
                    "OPEN CHANNEL",
                    updates=(OpenChannel(info.table_id, channel),),
                )
            ],
            clock=clock,
        )
        opened = result.channels[(info.table_id, channel)]
        self.table = info.name
        self.table_id = info.table_id
        self.channel = channel
        self.epoch = opened.epoch
        self._catalog = catalog
        self._warehouse = warehouse
        self._clock = clock

    def landed_batch_id(self) -> int | None:
        """The id of the last micro-batch landed through the channel (by any holder)."""
        return self._landed(self._held(batch_id=None))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        held = self._held(batch_id=batch_id)
        landed = self._landed(held)
        if landed is not None and batch_id <= landed:
            if batch_id < landed:
                raise InvalidStatementError(
                    f"Micro-batch {batch_id} arrived at ingest channel {self.channel!r} of table"
                    f" {self.table}, which already landed batch {landed}: the query runs on a"
                    " checkpoint other than the one that wrote this channel. Give a new"
                    " checkpoint location a new channel name."
                )
            return  # a replay after a restart: this batch is in the table already
        read_version = self._catalog.table_by_id(self.table_id).current_version
        schema = self._catalog.schema_at(self.table_id, read_version)
        statement_id = f"sink-{uuid.uuid4().hex}"
        directory = Warehouse.data_dir(statement_id)
        try:
            with spark_errors(f"Micro-batch {batch_id} of channel {self.channel!r}"):
                files = write_data(
                    self._warehouse,
                    in_table_order(df, schema, table=self.table),
                    schema=schema,
                    table=self.table,
                    directory=directory,
                )
        except BaseException:
            self._delete(directory)  # nothing was committed
            raise
        files = [f for f in files if f.row_count]
        try:
            self._commit(
                statement_id, files, batch_id=batch_id, held=held, read_version=read_version
            )
        except ChangelakeError:
            # Refused: the commit rolled back. Other failures (the catalog unreachable) may hide
            # a commit that happened, so their files stay for VACUUM to judge.
            self._delete(directory)
            raise
        if not files:
            self._delete(directory)

    def _commit(
        self,
        statement_id: str,
        files: list[DataFile],
        *,
        batch_id: int,
        held: ChannelInfo,
        read_version: int,
    ) -> None:
        inserted = sum(f.row_count for f in files)
        write = TableWrite(
            self.table_id,
            self.table,
            read_version,
            WriteKind.APPEND,
            added=tuple(files),
            inserted=inserted,
        )
        request = write_request(
            statement_id,
            OPERATION,
            [write],
            updates=(AdvanceChannel(self.table_id, self.channel, str(batch_id)),),
            requirements=(
                ChannelHeld(self.table_id, self.table, self.channel, self.epoch, held.offset_token),
            ),
        )
        try:
            self._catalog.commit([request], clock=self._clock)
        except ChannelFencedError as e:
            raise ChannelFencedError(self._fenced_message(batch_id)) from e

    def _held(self, *, batch_id: int | None) -> ChannelInfo:
        """The channel as committed, if this sink still holds it (else ChannelFencedError)."""
        found = self._catalog.find_channel(self.table_id, self.channel)
        if found is None or found.epoch != self.epoch:
            raise ChannelFencedError(self._fenced_message(batch_id))
        return found

    def _landed(self, held: ChannelInfo) -> int | None:
        if held.offset_token is None:
            return None
        try:
            return int(held.offset_token)
        except ValueError:
            raise InvalidStatementError(
                f"Ingest channel {self.channel!r} of table {self.table} has offset token"
                f" {held.offset_token!r}, not a micro-batch id: another kind of writer uses it."
                " Give the streaming query a channel of its own."
            ) from None

    def _fenced_message(self, batch_id: int | None) -> str:
        found = self._catalog.find_channel(self.table_id, self.channel)
        what = f"Micro-batch {batch_id} was not written to" if batch_id is not None else "For"
        why = (
            "was dropped, or its table was"
            if found is None
            else f"was opened again (epoch {found.epoch}; this sink holds epoch {self.epoch}),"
            " by a newer run of this streaming query or another sink"
        )
        return (
            f"{what} table {self.table}: ingest channel {self.channel!r} {why}. This sink may no"
            " longer write; stop this query (the channel's current holder continues from its"
            " last landed batch)."
        )

    def _delete(self, directory: str) -> None:
        try:
            self._warehouse.fs.delete_dir(self._warehouse.fs_path(directory))
        except OSError:
            pass  # VACUUM removes orphan files

    def __repr__(self) -> str:
        return f"SparkSink(table={self.table!r}, channel={self.channel!r}, epoch={self.epoch})"


def in_table_order(df: DataFrame, schema: TableSchema, *, table: str) -> DataFrame:
    """``df``'s columns matched to the table's by name (case-insensitive), in table order, NULL
    for the table columns ``df`` lacks; a ``df`` column matching none is an error."""
    given: dict[str, str] = {}
    for name in df.columns:
        if schema.find(name) is None:
            raise ColumnNotFoundError(
                f"The micro-batch has column {name!r}, which table {table} does not have."
                f"{did_you_mean(name, schema.names)} Its columns are: {', '.join(schema.names)};"
                " rename or drop the column in the streaming query."
            )
        if name.lower() in given:
            raise InvalidStatementError(
                f"The micro-batch has columns {given[name.lower()]!r} and {name!r}, which both"
                f" match column {schema.column(name, table=table).name} of table {table}."
            )
        given[name.lower()] = name
    return df.select(
        *[
            (
                F.col(quoted(given[c.name.lower()]))
                if c.name.lower() in given
                else F.lit(None).cast(c.type)
            ).alias(c.name)
            for c in schema.columns
        ]
    )

"""DESCRIBE TABLE, DESCRIBE HISTORY, SHOW [INTERNAL] TABLES / VIEWS / CHANNELS: catalog metadata
as small DataFrames."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame

from changelake.catalog.internal import InternalTable
from changelake.catalog.model import TableInfo
from changelake.runtime.env import Context
from changelake.txn.context import StatementContext


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch)


def describe_table(ctx: Context, name: str) -> DataFrame:
    info = ctx.catalog.table(name)
    schema = ctx.catalog.schema_at(info.table_id, ctx.read_version(info))
    rows = [(c.name, c.type.upper(), c.nullable) for c in schema.visible]
    return ctx.spark.createDataFrame(rows, "name string, type string, nullable boolean")


def describe_history(ctx: Context, name: str) -> DataFrame:
    info = ctx.catalog.table(name)
    rows = [
        (
            v.version,
            _ts(v.committed_at),
            v.operation,
            v.statement_id,
            v.rows_inserted,
            v.rows_updated,
            v.rows_deleted,
            v.files_added,
            v.files_removed,
        )
        for v in ctx.catalog.versions(info.table_id)
    ]
    return ctx.spark.createDataFrame(
        rows,
        "version bigint, committed_at timestamp, operation string, statement_id string,"
        " rows_inserted bigint, rows_updated bigint, rows_deleted bigint,"
        " files_added int, files_removed int",
    )


_TABLE_COLUMNS = (
    "created_at timestamp, version bigint, rows bigint, files int, retention_days double"
)


def _table_row(ctx: StatementContext, info: TableInfo) -> tuple:
    files = ctx.catalog.snapshot_files(info.table_id, info.current_version)
    return (
        _ts(info.created_at),
        info.current_version,
        sum(f.live_rows for f in files),
        len(files),
        float(info.retention_days()),
    )


def show_tables(ctx: Context) -> DataFrame:
    """The user's tables (internal ones: ``show_internal_tables``)."""
    rows = [
        (info.name, *_table_row(ctx, info))
        for info in ctx.catalog.list_tables()
        if InternalTable.of(info.name) is None
    ]
    return ctx.spark.createDataFrame(rows, f"name string, {_TABLE_COLUMNS}")


def show_internal_tables(ctx: Context, owner: str | None) -> DataFrame:
    """SHOW INTERNAL TABLES [IN TABLE owner]: the tables changelake keeps for itself (for
    ``owner``), each with its owner table and purpose."""
    tables = ctx.catalog.list_tables()
    names = {info.table_id: info.name for info in tables}
    owner_id = ctx.table(owner).table_id if owner is not None else None
    rows = []
    for info in tables:
        internal = InternalTable.of(info.name)
        if internal is None or owner_id not in (None, internal.owner_id):
            continue
        owner_name = names.get(internal.owner_id)
        rows.append((info.name, owner_name, internal.purpose.label, *_table_row(ctx, info)))
    return ctx.spark.createDataFrame(
        rows, f"name string, owner string, purpose string, {_TABLE_COLUMNS}"
    )


def show_views(ctx: Context) -> DataFrame:
    rows = [(name, _ts(created), sql) for name, sql, created in ctx.catalog.list_views()]
    return ctx.spark.createDataFrame(rows, "name string, created_at timestamp, text string")


def show_channels(ctx: Context, table: str | None) -> DataFrame:
    """The ingest channels of ``table`` (every table's without): who holds each (epoch) and the
    offset token committed, with the version that committed it."""
    tables = [ctx.table(table)] if table is not None else ctx.catalog.list_tables()
    rows = [
        (
            c.name,
            info.name,
            c.epoch,
            c.offset_token,
            c.committed_version,
            _ts(c.created_at),
            _ts(c.updated_at),
        )
        for info in tables
        for c in ctx.catalog.list_channels(info.table_id)
    ]
    return ctx.spark.createDataFrame(
        rows,
        "name string, table_name string, epoch bigint, offset_token string,"
        " committed_version bigint, created_at timestamp, updated_at timestamp",
    )

"""DESCRIBE TABLE, DESCRIBE HISTORY, SHOW TABLES / VIEWS: catalog metadata as small DataFrames."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, SparkSession

from changelake.txn.context import StatementContext


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch)


def describe_table(ctx: StatementContext, spark: SparkSession, name: str) -> DataFrame:
    info = ctx.catalog.table(name)
    schema = ctx.catalog.schema_at(info.table_id, ctx.read_version(info))
    rows = [(c.name, c.type.upper(), c.nullable) for c in schema.columns]
    return spark.createDataFrame(rows, "name string, type string, nullable boolean")


def describe_history(ctx: StatementContext, spark: SparkSession, name: str) -> DataFrame:
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
    return spark.createDataFrame(
        rows,
        "version bigint, committed_at timestamp, operation string, statement_id string,"
        " rows_inserted bigint, rows_updated bigint, rows_deleted bigint,"
        " files_added int, files_removed int",
    )


def show_tables(ctx: StatementContext, spark: SparkSession) -> DataFrame:
    rows = []
    for info in ctx.catalog.list_tables():
        files = ctx.catalog.snapshot_files(info.table_id, info.current_version)
        rows.append(
            (
                info.name,
                _ts(info.created_at),
                info.current_version,
                sum(f.live_rows for f in files),
                len(files),
                float(info.retention_days()),
            )
        )
    return spark.createDataFrame(
        rows,
        "name string, created_at timestamp, version bigint, rows bigint, files int,"
        " retention_days double",
    )


def show_views(ctx: StatementContext, spark: SparkSession) -> DataFrame:
    rows = [(name, _ts(created), sql) for name, sql, created in ctx.catalog.list_views()]
    return spark.createDataFrame(rows, "name string, created_at timestamp, text string")


def show_channels(ctx: StatementContext, spark: SparkSession, table: str | None) -> DataFrame:
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
    return spark.createDataFrame(
        rows,
        "name string, table_name string, epoch bigint, offset_token string,"
        " committed_version bigint, created_at timestamp, updated_at timestamp",
    )

"""Statements about STREAM objects: CREATE / SHOW / DESCRIBE STREAM (DROP is in ``ddl``)."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, SparkSession

from changelake.catalog.model import StreamInfo
from changelake.catalog.requests import CommitRequest, CreateStream, IfExists
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.plan.points import point_of
from changelake.sql import statements as s
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext
from changelake.txn.points import resolve
from changelake.txn.retention import is_stale, stale_after

STREAM_COLUMNS = (
    "name string, table_name string, mode string, frontier_version bigint, stale boolean,"
    " stale_after timestamp, show_initial_rows boolean, comment string, created_at timestamp"
)


def create_stream(
    ctx: StatementContext, spark: SparkSession, warehouse: Warehouse, stmt: s.CreateStream
) -> StatementResult:
    ctx.require_no_transaction("CREATE STREAM")
    name = stmt.name
    if stmt.replace and stmt.if_not_exists:
        raise InvalidStatementError(
            f"CREATE OR REPLACE STREAM IF NOT EXISTS {name}: OR REPLACE and IF NOT EXISTS exclude"
            " each other; use one."
        )
    if stmt.on_view:
        raise UnsupportedError(
            f"Streams on views are not supported yet; create {name} ON TABLE of a base table."
        )
    info = ctx.table(stmt.table)
    frontier = (
        resolve(ctx, info, point_of(spark, stmt.point))
        if stmt.point is not None
        else info.current_version
    )
    if_exists = IfExists.of(replace=stmt.replace, if_not_exists=stmt.if_not_exists)
    ctx.commit(
        CommitRequest(
            ctx.statement_id,
            "CREATE STREAM",
            (
                CreateStream(
                    name.lower(),
                    info.table_id,
                    frontier,
                    append_only=stmt.append_only,
                    show_initial_rows=stmt.show_initial_rows,
                    comment=stmt.comment,
                    if_exists=if_exists,
                ),
            ),
        )
    )
    stream = ctx.catalog.stream(name)
    return StatementResult(
        ctx.statement_id,
        "CREATE STREAM",
        stream.name,
        stream.frontier_version,
        message=f"Stream {stream.name} created on {info.name} at version {stream.frontier_version}.",
    )


def _row(ctx: StatementContext, stream: StreamInfo) -> tuple:
    info = ctx.catalog.table_by_id(stream.table_id)
    deadline = stale_after(ctx.catalog, stream, info)
    return (
        stream.name,
        info.name,
        stream.mode,
        stream.frontier_version,
        is_stale(ctx.catalog, stream, info, now=ctx.now()),
        dt.datetime.fromtimestamp(deadline) if deadline is not None else None,
        stream.show_initial_rows,
        stream.comment,
        dt.datetime.fromtimestamp(stream.created_at),
    )


def show_streams(ctx: StatementContext, spark: SparkSession) -> DataFrame:
    rows = [_row(ctx, stream) for stream in ctx.catalog.list_streams()]
    return spark.createDataFrame(rows, STREAM_COLUMNS)


def describe_stream(ctx: StatementContext, spark: SparkSession, name: str) -> DataFrame:
    return spark.createDataFrame([_row(ctx, ctx.stream(name))], STREAM_COLUMNS)

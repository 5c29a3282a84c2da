"""Statements about STREAM objects: CREATE / SHOW / DESCRIBE STREAM (DROP is in ``ddl``)."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame

from changelake.catalog.internal import check_user_may_change, check_user_name
from changelake.catalog.model import StreamInfo, TableInfo
from changelake.catalog.requests import CommitRequest, CreateStream, IfExists
from changelake.dml.result import StatementResult
from changelake.errors import (
    InvalidStatementError,
    StaleStreamError,
    TableNotFoundError,
    did_you_mean,
)
from changelake.plan.points import point_of
from changelake.plan.streams import view_stream_source
from changelake.plan.views import check_view_stream
from changelake.runtime.env import Context
from changelake.sql import statements as s
from changelake.txn.context import StatementContext
from changelake.txn.points import Point, resolve
from changelake.txn.retention import is_stale, stale_after

STREAM_COLUMNS = (
    "name string, table_name string, mode string, frontier_version bigint, stale boolean,"
    " stale_after timestamp, source_type string, base_tables string, show_initial_rows boolean,"
    " comment string, created_at timestamp"
)


def create_stream(ctx: Context, stmt: s.CreateStream) -> StatementResult:
    ctx.require_no_transaction("CREATE STREAM")
    name = stmt.name
    check_user_name(name, kind="stream")
    if stmt.replace and stmt.if_not_exists:
        raise InvalidStatementError(
            f"CREATE OR REPLACE STREAM IF NOT EXISTS {name}: OR REPLACE and IF NOT EXISTS exclude"
            " each other; use one."
        )
    kept = ctx.catalog.find_stream(name) if stmt.if_not_exists else None
    point = point_of(ctx.spark, stmt.point) if stmt.point is not None else None
    if stmt.on_view:
        create = _on_view(ctx, stmt, point)
    else:
        create = _on_table(ctx, stmt, point)
    ctx.commit(CommitRequest(ctx.statement_id, "CREATE STREAM", (create,)))
    stream = ctx.catalog.stream(name)
    done = "kept (it exists)" if kept is not None else "created"
    if stream.on_view:
        at = ", ".join(
            f"{ctx.catalog.table_by_id(t).name} at version {v}" for t, v in stream.frontiers
        )
        message = f"Stream {stream.name} {done} on view {stream.view} ({at})."
        version = None
    else:
        info = ctx.catalog.table_by_id(stream.table_id)
        version = stream.frontier_version
        message = f"Stream {stream.name} {done} on {info.name} at version {version}."
    return StatementResult(ctx.statement_id, "CREATE STREAM", stream.name, version, message=message)


def _on_table(ctx: StatementContext, stmt: s.CreateStream, point: Point | None) -> CreateStream:
    if ctx.catalog.find_table(stmt.table) is None and ctx.catalog.view_sql(stmt.table) is not None:
        raise InvalidStatementError(
            f"{stmt.table} is a view: write CREATE STREAM {stmt.name} ON VIEW {stmt.table}."
        )
    info = ctx.table(stmt.table)
    check_user_may_change(ctx.catalog, info, action=f"create stream {stmt.name} on")
    if stmt.on_external and not info.is_external():
        raise InvalidStatementError(
            f"{info.name} is not an external table: write CREATE STREAM {stmt.name} ON TABLE"
            f" {info.name}."
        )
    frontier = resolve(ctx, info, point) if point is not None else info.current_version
    return CreateStream(
        stmt.name.lower(),
        info.table_id,
        ((info.table_id, frontier),),
        append_only=stmt.append_only,
        show_initial_rows=stmt.show_initial_rows,
        comment=stmt.comment,
        if_exists=_if_exists(stmt),
    )


def _on_view(ctx: StatementContext, stmt: s.CreateStream, point: Point | None) -> CreateStream:
    if ctx.catalog.view_sql(stmt.table) is None:
        if ctx.catalog.find_table(stmt.table) is not None:
            raise InvalidStatementError(
                f"{stmt.table} is a table: write CREATE STREAM {stmt.name} ON TABLE {stmt.table}."
            )
        known = ctx.catalog.object_names()
        raise TableNotFoundError(
            f"View {stmt.table!r} does not exist.{did_you_mean(stmt.table, known)}"
        )
    source = view_stream_source(
        ctx, stmt.table, stmt.name, point=point, append_only=stmt.append_only
    )
    return CreateStream(
        stmt.name.lower(),
        None,
        source.frontiers,
        view=source.view,
        view_definition=source.definition,
        append_only=stmt.append_only,
        show_initial_rows=stmt.show_initial_rows,
        comment=stmt.comment,
        if_exists=_if_exists(stmt),
    )


def _if_exists(stmt: s.CreateStream) -> IfExists:
    return IfExists.of(replace=stmt.replace, if_not_exists=stmt.if_not_exists)


def _row(ctx: StatementContext, stream: StreamInfo) -> tuple:
    tables = [ctx.catalog.table_by_id(t) for t, _ in stream.frontiers]
    now = ctx.now()
    deadlines = [d for d in (stale_after(ctx.catalog, stream, i) for i in tables) if d is not None]
    return (
        stream.name,
        stream.view if stream.on_view else tables[0].name,
        stream.mode,
        None if stream.on_view else stream.frontier_version,
        _stale(ctx, stream, tables, now),
        dt.datetime.fromtimestamp(min(deadlines)) if deadlines else None,
        stream.source,
        ", ".join(sorted(i.name for i in tables)),
        stream.show_initial_rows,
        stream.comment,
        dt.datetime.fromtimestamp(stream.created_at),
    )


def _stale(ctx: StatementContext, stream: StreamInfo, tables: list[TableInfo], now: float) -> bool:
    if stream.on_view:
        try:
            check_view_stream(ctx, stream)
        except StaleStreamError:
            return True
        return False
    return any(is_stale(ctx.catalog, stream, info, now=now) for info in tables)


def show_streams(ctx: Context) -> DataFrame:
    rows = [_row(ctx, stream) for stream in ctx.catalog.list_streams()]
    return ctx.spark.createDataFrame(rows, STREAM_COLUMNS)


def describe_stream(ctx: Context, name: str) -> DataFrame:
    return ctx.spark.createDataFrame([_row(ctx, ctx.stream(name))], STREAM_COLUMNS)

"""Dynamic-table statements: their typed values, and SHOW / DESCRIBE / refresh history as small
DataFrames. The work is in ``changelake.dynamic``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import DataFrame

from changelake.catalog.model import DynamicTableInfo, RefreshInfo
from changelake.catalog.requests import IfExists
from changelake.dialect import dynamic as d
from changelake.dynamic.create import NewDynamicTable
from changelake.dynamic.dag import dynamic_table
from changelake.dynamic.spec import describe_lag, spec_of
from changelake.runtime.env import Context
from changelake.txn.context import StatementContext


@dataclass(frozen=True)
class CreateDynamicTable:
    new: NewDynamicTable


class ScheduledTableAction(StrEnum):
    """What ALTER DYNAMIC TABLE and ALTER EXTERNAL TABLE do to a table the scheduler keeps up to
    date."""

    REFRESH = "REFRESH"
    SUSPEND = "SUSPEND"
    RESUME = "RESUME"
    SET = "SET"


@dataclass(frozen=True)
class AlterDynamicTable:
    name: str
    action: ScheduledTableAction
    options: dict[str, str]  # SET: option (upper case) -> value as written


@dataclass(frozen=True)
class DropDynamicTable:
    name: str
    if_exists: bool


@dataclass(frozen=True)
class DescribeDynamicTable:
    name: str


DynamicStatement = CreateDynamicTable | AlterDynamicTable | DropDynamicTable | DescribeDynamicTable


def _create(tree: d.CreateDynamicTableSyntax) -> CreateDynamicTable:
    name = tree.this.name
    columns = tree.args.get("columns")
    return CreateDynamicTable(
        NewDynamicTable(
            name=name,
            columns=tuple(c.name for c in columns) if columns else None,
            sql=tree.args["text"],
            spec=spec_of(tree.args["options"], about=f"CREATE DYNAMIC TABLE {name}"),
            if_exists=IfExists.of(
                replace=bool(tree.args.get("replace")), if_not_exists=bool(tree.args.get("exists"))
            ),
        )
    )


BUILDERS: dict[type, Callable[..., DynamicStatement]] = {
    d.CreateDynamicTableSyntax: _create,
    d.AlterDynamicTableSyntax: lambda t: AlterDynamicTable(
        t.this.name, ScheduledTableAction(t.args["action"]), t.args.get("options") or {}
    ),
    d.DropDynamicTableSyntax: lambda t: DropDynamicTable(t.this.name, bool(t.args.get("exists"))),
    d.DescribeDynamicTableSyntax: lambda t: DescribeDynamicTable(t.this.name),
}


def _ts(epoch: float | None) -> dt.datetime | None:
    return None if epoch is None else dt.datetime.fromtimestamp(epoch)


_SHOW_COLUMNS = (
    "name string, target_lag string, refresh_mode string, effective_mode string,"
    " mode_reason string, scheduling_state string, suspended_reason string,"
    " data_timestamp timestamp, lag_seconds double, last_refresh_action string,"
    " last_refresh_state string, rows bigint, text string"
)


def _row(ctx: StatementContext, dyn: DynamicTableInfo) -> tuple:
    last = ctx.catalog.refresh_history(dyn.table_id, limit=1)
    lag = None if dyn.data_timestamp is None else max(0.0, ctx.now() - dyn.data_timestamp)
    files = ctx.catalog.snapshot_files(dyn.table_id, dyn.info.current_version)
    return (
        dyn.name,
        describe_lag(dyn.definition.target_lag),
        dyn.definition.refresh_mode,
        dyn.definition.effective_mode,
        dyn.definition.mode_reason,
        dyn.scheduling_state,
        dyn.suspended_reason,
        _ts(dyn.data_timestamp),
        lag,
        last[0].record.action if last else None,
        last[0].record.state if last else None,
        sum(f.live_rows for f in files),
        dyn.definition.sql,
    )


def show_dynamic_tables(ctx: Context) -> DataFrame:
    """SHOW DYNAMIC TABLES: each with its lag, modes (the effective one and why), scheduling
    state, data timestamp, current lag and last refresh."""
    rows = [_row(ctx, dyn) for dyn in ctx.catalog.list_dynamic_tables()]
    return ctx.spark.createDataFrame(rows, _SHOW_COLUMNS)


def describe_dynamic_table(ctx: Context, name: str) -> DataFrame:
    """DESCRIBE DYNAMIC TABLE: its SHOW row, one property per row, then its columns."""
    dyn = dynamic_table(ctx, name)
    names = [f.split()[0] for f in _SHOW_COLUMNS.split(",")]
    rows = [(k, "" if v is None else str(v)) for k, v in zip(names, _row(ctx, dyn), strict=True)]
    schema = ctx.catalog.schema_at(dyn.table_id, dyn.info.current_version)
    rows += [(f"column {c.name}", c.type.upper()) for c in schema.visible]
    return ctx.spark.createDataFrame(rows, "property string, value string")


HISTORY_COLUMNS = (
    "name string, refresh_id bigint, refresh_action string, state string,"
    " refresh_trigger string, data_timestamp timestamp, refresh_start_time timestamp,"
    " refresh_end_time timestamp, rows_inserted bigint, rows_deleted bigint,"
    " rows_updated bigint, spark_jobs int, error_message string, version bigint,"
    " refresh_action_reason string"
)


def history_rows(ctx: StatementContext, name: str | None) -> list[tuple]:
    """The refresh history (of dynamic table ``name``, or of all), newest first."""
    if name is not None:
        refreshes = ctx.catalog.refresh_history(dynamic_table(ctx, name).table_id)
    else:
        refreshes = ctx.catalog.refresh_history()
    names: dict[int, str] = {}
    return [_history_row(ctx, r, names) for r in refreshes]


def _history_row(ctx: StatementContext, r: RefreshInfo, names: dict[int, str]) -> tuple:
    if r.table_id not in names:
        found = ctx.catalog.dynamic_table_by_id(r.table_id)
        names[r.table_id] = found.name if found is not None else f"(dropped table {r.table_id})"
    x = r.record
    return (
        names[r.table_id],
        r.refresh_id,
        x.action,
        x.state,
        x.trigger,
        _ts(x.data_timestamp),
        _ts(x.started_at),
        _ts(r.ended_at),
        x.rows_inserted,
        x.rows_deleted,
        x.rows_updated,
        x.spark_jobs,
        x.error or None,
        r.version,
        x.reason or None,
    )

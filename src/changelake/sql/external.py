"""External-table and connection statements: their typed values, their handlers, and SHOW /
DESCRIBE as small DataFrames. The work is in ``changelake.external``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame

from changelake.catalog.model import ExternalTableInfo
from changelake.catalog.requests import IfExists
from changelake.dialect import external as d
from changelake.dml.result import StatementResult
from changelake.dynamic.spec import describe_lag, target_lag
from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.external import objects
from changelake.external.directory import files
from changelake.external.postgresql import pgtable
from changelake.runtime.env import Context
from changelake.schema import normalize_type
from changelake.sql.dynamic import ScheduledTableAction
from changelake.txn.context import StatementContext


@dataclass(frozen=True)
class CreateConnection:
    name: str
    kind: str  # upper case: POSTGRES
    options: dict[str, str]  # key (lower case) -> value as text, without quotes
    replace: bool
    if_not_exists: bool


@dataclass(frozen=True)
class DropConnection:
    name: str
    if_exists: bool


@dataclass(frozen=True)
class PostgresSource:
    connection: str
    table: str  # in the source database, as written: 'schema.table'


@dataclass(frozen=True)
class FilesSource:
    location: str  # a directory or URI
    file_format: dict[str, str]  # option (upper case) -> value as text; TYPE is always there
    pattern: str | None  # a regular expression the files' paths must match


@dataclass(frozen=True)
class CreateExternalTable:
    name: str
    columns: tuple[tuple[str, str], ...] | None  # (name, type as written)
    source: PostgresSource | FilesSource
    keys: tuple[str, ...] | None
    scope: str  # ALL | DEPENDENTS
    follow_lag: str | None  # as written, e.g. '1 minute'
    comment: str
    replace: bool
    if_not_exists: bool


@dataclass(frozen=True)
class AlterExternalTable:
    name: str
    action: ScheduledTableAction
    options: dict[str, str]  # for SET: FOLLOW_LAG and/or COMMENT -> value


@dataclass(frozen=True)
class DropExternalTable:
    name: str
    if_exists: bool


@dataclass(frozen=True)
class DescribeExternalTable:
    name: str


ExternalStatement = (
    CreateConnection
    | DropConnection
    | CreateExternalTable
    | AlterExternalTable
    | DropExternalTable
    | DescribeExternalTable
)


def _create_connection(tree: d.CreateConnectionSyntax) -> CreateConnection:
    return CreateConnection(
        name=tree.this.name,
        kind=tree.args["kind"],
        options=dict(tree.args["options"]),
        replace=bool(tree.args.get("replace")),
        if_not_exists=bool(tree.args.get("exists")),
    )


def _create_external(tree: d.CreateExternalTableSyntax) -> CreateExternalTable:
    options = tree.args["options"]
    source: PostgresSource | FilesSource
    if tree.args["source"] == "CONNECTION":
        source = PostgresSource(tree.args["connection"], tree.args["table"])
    else:
        source = FilesSource(
            tree.args["location"], dict(tree.args["file_format"]), options.get("PATTERN")
        )
    return CreateExternalTable(
        name=tree.this.name,
        columns=tree.args.get("columns"),
        source=source,
        keys=tree.args.get("keys"),
        scope=options.get("SCOPE", "ALL"),
        follow_lag=options.get("FOLLOW_LAG"),
        comment=options.get("COMMENT", ""),
        replace=bool(tree.args.get("replace")),
        if_not_exists=bool(tree.args.get("exists")),
    )


BUILDERS: dict[type, Callable[..., ExternalStatement]] = {
    d.CreateConnectionSyntax: _create_connection,
    d.DropConnectionSyntax: lambda t: DropConnection(t.this.name, bool(t.args.get("exists"))),
    d.CreateExternalTableSyntax: _create_external,
    d.AlterExternalTableSyntax: lambda t: AlterExternalTable(
        t.this.name, ScheduledTableAction(t.args["action"]), dict(t.args.get("options") or {})
    ),
    d.DropExternalTableSyntax: lambda t: DropExternalTable(t.this.name, bool(t.args.get("exists"))),
    d.DescribeExternalTableSyntax: lambda t: DescribeExternalTable(t.this.name),
}


def _follow_lag(text: str | None, *, about: str) -> float:
    if text is None:
        return 1.0
    seconds = target_lag(text, about=about)
    if seconds is None:
        raise InvalidStatementError(f"{about}: FOLLOW_LAG must be a lag such as '1 second'.")
    return seconds


def _new_files_table(
    st: CreateExternalTable, source: FilesSource, *, about: str
) -> files.NewFilesTable:
    columns = None  # names as written: JSON keys are matched by case
    if st.columns is not None:
        columns = tuple((n, normalize_type(t)) for n, t in st.columns)
    properties = (("comment", st.comment),) if st.comment else ()
    return files.NewFilesTable(
        name=st.name.lower(),
        location=source.location,
        file_format=source.file_format,
        pattern=source.pattern,
        columns=columns,
        follow_lag=_follow_lag(st.follow_lag, about=about),
        properties=(*properties, ("data_retention_time_in_days", "1")),
        if_exists=IfExists.of(replace=st.replace, if_not_exists=st.if_not_exists),
    )


def create_external_table(ctx: Context, st: CreateExternalTable) -> StatementResult:
    about = f"CREATE EXTERNAL TABLE {st.name}"
    if st.replace and st.if_not_exists:
        raise InvalidStatementError(
            f"{about}: OR REPLACE and IF NOT EXISTS exclude each other; use one."
        )
    if isinstance(st.source, FilesSource):
        return files.create(ctx, _new_files_table(st, st.source, about=about))
    columns = None
    if st.columns is not None:
        columns = tuple((n.lower(), normalize_type(t)) for n, t in st.columns)
    properties = (("comment", st.comment),) if st.comment else ()
    new = pgtable.NewPostgresTable(
        name=st.name.lower(),
        connection=st.source.connection,
        table=st.source.table,
        columns=columns,
        keys=st.keys,
        scope_mode=st.scope,
        # no rows until the dependents are known: execute settles the scope right after
        scope="FALSE" if st.scope == "DEPENDENTS" else None,
        follow_lag=_follow_lag(st.follow_lag, about=about),
        properties=(*properties, ("data_retention_time_in_days", "1")),
        if_exists=IfExists.of(replace=st.replace, if_not_exists=st.if_not_exists),
    )
    return pgtable.create(ctx, new)


def alter_external_table(ctx: Context, st: AlterExternalTable) -> StatementResult:
    if st.action == ScheduledTableAction.REFRESH:
        return objects.refresh(ctx, st.name)
    if st.action in (ScheduledTableAction.SUSPEND, ScheduledTableAction.RESUME):
        return objects.set_state(ctx, st.name, st.action)
    about = f"ALTER EXTERNAL TABLE {st.name} SET"
    if "COMMENT" in st.options:
        raise UnsupportedError(f"{about}: COMMENT is fixed at CREATE for now.")
    if "FOLLOW_LAG" not in st.options:
        raise InvalidStatementError(f"{about}: give FOLLOW_LAG = '<interval>'.")
    follow_lag = _follow_lag(st.options["FOLLOW_LAG"], about=about)
    return objects.set_options(ctx, st.name, follow_lag)


def _ts(epoch: float | None) -> dt.datetime | None:
    return None if epoch is None else dt.datetime.fromtimestamp(epoch)


_SHOW_COLUMNS = (
    "name string, kind string, connection string, source string, scope_mode string,"
    " scope string, state string, source_position string, last_applied_at timestamp,"
    " follow_lag string, rows bigint, error string"
)


def _row(ctx: StatementContext, ext: ExternalTableInfo) -> tuple:
    d_ = ext.definition
    state = ctx.catalog.snapshot_files(ext.table_id, ext.info.current_version)
    rows = sum(f.live_rows for f in state)
    return (
        ext.name,
        d_.kind,
        d_.connection,
        d_.source,
        d_.scope_mode,
        ext.scope or "TRUE",
        ext.state,
        ext.position,
        _ts(ext.followed_at),
        describe_lag(d_.follow_lag),
        rows,
        ext.error,
    )


def show_external_tables(ctx: Context) -> DataFrame:
    rows = [_row(ctx, e) for e in ctx.catalog.list_external_tables()]
    return ctx.spark.createDataFrame(rows, _SHOW_COLUMNS)


def describe_external_table(ctx: Context, name: str) -> DataFrame:
    """DESCRIBE EXTERNAL TABLE: its SHOW row and its source's state, one property per row,
    then its columns."""
    ext = objects.external_table(ctx, name)
    names = [f.split()[0] for f in _SHOW_COLUMNS.split(",")]
    rows = [(k, "" if v is None else str(v)) for k, v in zip(names, _row(ctx, ext), strict=True)]
    rows.append(("bootstrap", ext.bootstrap or "none"))
    rows += [(k, str(v)) for k, v in objects.source_state(ctx, ext).items()]
    rows.append(("keys", ", ".join(ext.definition.spec.get("keys", []))))
    schema = ctx.catalog.schema_at(ext.table_id, ext.info.current_version)
    rows += [(f"column {c.name}", c.type.upper()) for c in schema.visible]
    return ctx.spark.createDataFrame(rows, "property string, value string")


def show_connections(ctx: Context) -> DataFrame:
    """Connections with their options (where the secret is found, never the secret)."""
    rows = [
        (
            c.name,
            c.kind,
            ", ".join(f"{k} => {v!r}" for k, v in sorted(c.options.items())),
            _ts(c.created_at),
        )
        for c in ctx.catalog.list_connections()
    ]
    return ctx.spark.createDataFrame(
        rows, "name string, type string, options string, created_at timestamp"
    )

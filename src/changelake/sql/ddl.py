"""CREATE / DROP / ALTER of tables and views, TRUNCATE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp

from changelake.catalog.internal import check_user_may_change, check_user_name
from changelake.catalog.model import DataFile, TableInfo
from changelake.catalog.requests import (
    CommitRequest,
    CreateTable,
    CreateView,
    DropStream,
    DropTable,
    DropView,
    IfExists,
    RenameTable,
    SetProperties,
)
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.dialect import to_spark
from changelake.dml.common import Target, remove_all_rows, stream_consumption, write_rows
from changelake.dml.result import StatementResult
from changelake.errors import (
    InvalidStatementError,
    StreamNotFoundError,
    TableNotFoundError,
    UnsupportedError,
    did_you_mean,
)
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.schema import Column, TableSchema, check_column_name, normalize_type
from changelake.sql import statements as s
from changelake.storage.writer import schema_of_dataframe
from changelake.txn.context import StatementContext

# Table properties a user may set, with how to check the value.
TABLE_PROPERTIES = {
    "data_retention_time_in_days": "days",
    "max_data_extension_time_in_days": "days",
    "change_tracking": "bool",
    "before_images": "bool",
    "comment": "text",
    "apply_tombstone_retention_days": "days",  # APPLY CHANGES (changelog/state.py)
}


def properties_of(nodes: list[exp.Expression], *, table: str) -> dict[str, str]:
    """Validated ``KEY = value`` table properties."""
    found: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, exp.SchemaCommentProperty):
            found["comment"] = node.this.name
            continue
        if not isinstance(node, exp.Property):
            raise UnsupportedError(f"Unsupported table option {node.sql()!r} for {table}.")
        key = node.name.lower().strip("'\"")
        value = node.args.get("value")
        text = value.name if isinstance(value, exp.Expression) else str(value)
        if isinstance(value, exp.Neg):  # its name is the unsigned number: -1 must not read as 1
            text = f"-{text}"
        if isinstance(value, exp.Boolean):  # the TRUE / FALSE keywords have no name
            text = "true" if value.this else "false"
        kind = TABLE_PROPERTIES.get(key)
        if kind is None:
            raise InvalidStatementError(
                f"Unknown table property {key.upper()} for {table}; known:"
                f" {', '.join(k.upper() for k in TABLE_PROPERTIES)}."
            )
        if kind == "days":
            try:
                days = float(text)
            except ValueError:
                days = -1.0
            if days < 0:
                raise InvalidStatementError(
                    f"{key.upper()} must be a number of days >= 0, got {text!r}."
                )
            text = f"{days:g}"
        elif kind == "bool":
            if text.lower() not in ("true", "false"):
                raise InvalidStatementError(f"{key.upper()} must be TRUE or FALSE, got {text!r}.")
            text = text.lower()
        found[key] = text
    return found


def _column_defs(schema_node: exp.Schema, *, table: str) -> TableSchema:
    columns: list[Column] = []
    seen: set[str] = set()
    for i, definition in enumerate(schema_node.expressions, start=1):
        if not isinstance(definition, exp.ColumnDef):
            continue  # table constraints (PRIMARY KEY (...)) are accepted, not enforced
        name = definition.name
        check_column_name(name)
        if name.lower() in seen:
            raise InvalidStatementError(f"Column {name} appears twice in CREATE TABLE {table}.")
        seen.add(name.lower())
        kind = definition.args.get("kind")
        if kind is None:
            raise InvalidStatementError(f"Column {name} of {table} needs a type.")
        nullable = True
        for constraint in definition.args.get("constraints") or []:
            if isinstance(constraint.kind, exp.NotNullColumnConstraint):
                nullable = bool(constraint.kind.args.get("allow_null"))
            elif isinstance(constraint.kind, exp.DefaultColumnConstraint):
                raise UnsupportedError(
                    f"DEFAULT values are not supported (column {name} of {table})."
                )
        columns.append(Column(i, name, normalize_type(to_spark(kind)), nullable))
    if not columns:
        raise InvalidStatementError(f"CREATE TABLE {table} needs at least one column.")
    return TableSchema(tuple(columns))


def create_table(ctx: Context, stmt: s.CreateTable) -> StatementResult:
    ctx.require_no_transaction("CREATE TABLE")
    name = stmt.name
    check_user_name(name, kind="table")
    properties = properties_of(stmt.properties, table=name)
    binder = Binder(ctx)
    added: list[DataFile] = []
    if stmt.query is not None:
        df = binder.query(stmt.query)
        schema = schema_of_dataframe(df, about=f"CREATE TABLE {name} AS SELECT")
        if stmt.columns is not None:
            raise UnsupportedError(
                "CREATE TABLE t (columns) AS SELECT: give either columns or a query."
            )
        if not (stmt.if_not_exists and ctx.catalog.find_table(name)):
            added = write_rows(ctx, df, schema=schema, table=name)
    elif stmt.columns is not None:
        schema = _column_defs(stmt.columns, table=name)
    else:
        raise InvalidStatementError(f"CREATE TABLE {name} needs columns or AS SELECT.")
    properties.setdefault("data_retention_time_in_days", "1")
    if_exists = IfExists.of(replace=stmt.replace, if_not_exists=stmt.if_not_exists)
    table = CreateTable(
        name.lower(), schema, tuple(sorted(properties.items())), if_exists=if_exists
    )
    write = TableWrite.creating(table, added)
    advances, frontiers = stream_consumption(binder.stream_reads.values())
    operation = "CREATE TABLE AS SELECT" if stmt.query is not None else "CREATE TABLE"
    result = ctx.commit(
        write_request(
            ctx.statement_id, operation, [write], updates=advances, requirements=frontiers
        )
    )
    info = result.tables[table.name]
    return StatementResult(
        ctx.statement_id,
        "CREATE TABLE",
        info.name,
        info.current_version,
        rows_inserted=write.inserted if result.applied else 0,
        message=f"Table {info.name} created.",
    )


def create_view(ctx: Context, stmt: s.CreateView) -> StatementResult:
    ctx.require_no_transaction("CREATE VIEW")
    name, query = stmt.name, stmt.query
    check_user_name(name, kind="view")
    Binder(ctx).query(query)  # validates names and types now, not at first use
    depends = sorted(
        {t.name.lower() for t in query.find_all(exp.Table) if isinstance(t.this, exp.Identifier)}
        - {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    )
    for dependency in depends:
        table = ctx.catalog.find_table(dependency)
        if table is not None:  # dropping the owner drops an internal table, views or not
            check_user_may_change(ctx.catalog, table, action=f"create view {name} on")
    if_exists = IfExists.of(replace=stmt.replace, if_not_exists=False)
    view = CreateView(name.lower(), to_spark(query), tuple(depends), if_exists)
    ctx.commit(CommitRequest(ctx.statement_id, "CREATE VIEW", (view,)))
    return StatementResult(
        ctx.statement_id, "CREATE VIEW", name.lower(), message=f"View {name.lower()} created."
    )


def drop(ctx: StatementContext, stmt: s.Drop) -> StatementResult:
    kind, name = stmt.kind, stmt.name.lower()
    ctx.require_no_transaction(f"DROP {kind}")
    catalog = ctx.catalog
    if kind == "TABLE":
        info = catalog.find_table(name)
        if info is not None:
            check_user_may_change(catalog, info, action="drop")
        found, update = info is not None, DropTable(info.table_id) if info else None
        missing = TableNotFoundError(
            f"Table {name!r} does not exist.{did_you_mean(name, catalog.object_names())}"
        )
    elif kind == "VIEW":
        found, update = catalog.view_sql(name) is not None, DropView(name)
        missing = TableNotFoundError(
            f"View {name!r} does not exist.{did_you_mean(name, catalog.object_names())}"
        )
    else:
        found, update = catalog.find_stream(name) is not None, DropStream(name)
        missing = StreamNotFoundError(
            f"Stream {name!r} does not exist.{did_you_mean(name, catalog.stream_names())}"
        )
    label = kind.capitalize()
    if not found:
        if not stmt.if_exists:
            raise missing
        return StatementResult(
            ctx.statement_id, f"DROP {kind}", name, message=f"{label} {name} did not exist."
        )
    ctx.commit(CommitRequest(ctx.statement_id, f"DROP {kind}", (update,)))
    return StatementResult(
        ctx.statement_id, f"DROP {kind}", name, message=f"{label} {name} dropped."
    )


def truncate(ctx: StatementContext, stmt: s.Truncate) -> StatementResult:
    return remove_all_rows(ctx, Target.of(ctx, stmt.table), operation="TRUNCATE")


# -- ALTER TABLE: a handler per action (statements.AlterAction) -----------------------------------


def alter(ctx: StatementContext, stmt: s.AlterTable) -> StatementResult:
    ctx.require_no_transaction("ALTER TABLE")
    return _ALTER[type(stmt.action)](ctx, stmt.table, stmt.action)


def _add_columns(ctx: StatementContext, table: str, action: s.AddColumns) -> StatementResult:
    # only a NOT NULL column asks whether the table has rows: the rest needs no file list
    if any(c.not_null for c in action.columns):
        target = Target.of(ctx, table)
    else:
        target = Target.for_append(ctx, table)
    info, schema = target.info, target.state.schema
    columns = list(schema.columns)
    next_id = schema.next_column_id
    for new in action.columns:
        check_column_name(new.name)
        if schema.find(new.name) or any(c.name.lower() == new.name.lower() for c in columns):
            raise InvalidStatementError(f"Column {new.name} already exists in {info.name}.")
        if new.not_null:
            _check_not_null_addable(ctx, target, new.name)
        columns.append(Column(next_id, new.name, normalize_type(new.type), not new.not_null))
        next_id += 1
    version = _set_schema(ctx, target, TableSchema(tuple(columns)), operation="ADD COLUMN")
    return StatementResult(
        ctx.statement_id, "ADD COLUMN", info.name, version, message="Column(s) added."
    )


def _check_not_null_addable(ctx: StatementContext, target: Target, column: str) -> None:
    """A NOT NULL column can be added only while no row, stored or on its way in, would hold
    NULL in it."""
    info = target.info
    if target.state.live_rows:
        raise InvalidStatementError(
            f"Cannot add NOT NULL column {column} to {info.name}: existing rows"
            " would hold NULL. Add it as nullable."
        )
    channels = ctx.catalog.list_channels(info.table_id)
    if channels:
        names = ", ".join(repr(c.name) for c in channels)
        raise InvalidStatementError(
            f"Cannot add NOT NULL column {column} to {info.name}: ingest"
            f" channel(s) {names} write to it with the columns they were opened with, so"
            " their rows would hold NULL. Add it as nullable, or drop the channels first"
            " (Channel.close(drop=True))."
        )


def _rename_column(ctx: StatementContext, table: str, action: s.RenameColumn) -> StatementResult:
    target = Target.for_append(ctx, table)  # its columns, not its files
    info, schema = target.info, target.state.schema
    old = schema.column(action.old, table=info.name)
    check_column_name(action.new)
    if schema.find(action.new):
        raise InvalidStatementError(f"Column {action.new} already exists in {info.name}.")
    columns = tuple(
        Column(c.column_id, action.new, c.type, c.nullable) if c == old else c
        for c in schema.columns
    )
    version = _set_schema(ctx, target, TableSchema(columns), operation="RENAME COLUMN")
    return StatementResult(
        ctx.statement_id,
        "RENAME COLUMN",
        info.name,
        version,
        message=f"{old.name} renamed to {action.new}.",
    )


def _drop_columns(ctx: StatementContext, table: str, action: s.DropColumns) -> StatementResult:
    """``ALTER TABLE t DROP COLUMN [IF EXISTS] a [, b]``: metadata only; the files keep the
    values, which time travel before this version still reads."""
    target = Target.for_append(ctx, table)  # its columns, not its files
    info, schema = target.info, target.state.schema
    dropped = set()
    for name in action.names:
        if action.if_exists and schema.find(name) is None:
            continue
        dropped.add(schema.column(name, table=info.name).column_id)
    kept = tuple(c for c in schema.columns if c.column_id not in dropped)
    if not kept:
        raise InvalidStatementError(
            f"Cannot drop every column of {info.name}; DROP TABLE {info.name} drops the table."
        )
    if not dropped:
        return StatementResult(
            ctx.statement_id, "DROP COLUMN", info.name, message="No such column; nothing dropped."
        )
    version = _set_schema(ctx, target, TableSchema(kept), operation="DROP COLUMN")
    return StatementResult(
        ctx.statement_id, "DROP COLUMN", info.name, version, message="Column(s) dropped."
    )


def _set_schema(
    ctx: StatementContext, target: Target, schema: TableSchema, *, operation: str
) -> int | None:
    write = target.write(WriteKind.SCHEMA, schema=schema)
    result = ctx.commit(write_request(ctx.statement_id, operation, [write]))
    return result.version_of(write.table_id)


def _rename_table(ctx: StatementContext, table: str, action: s.RenameTableTo) -> StatementResult:
    info = _changeable(ctx, table)
    new_name = action.new_name.lower()
    check_user_name(action.new_name, kind="table")
    update = RenameTable(info.table_id, action.new_name)
    ctx.commit(CommitRequest(ctx.statement_id, "RENAME TABLE", (update,)))
    return StatementResult(
        ctx.statement_id, "RENAME TABLE", new_name, message=f"{info.name} renamed to {new_name}."
    )


def _set_properties(
    ctx: StatementContext, table: str, action: s.SetTableProperties
) -> StatementResult:
    info = _changeable(ctx, table)
    updates = properties_of(action.properties, table=info.name)
    update = SetProperties(info.table_id, tuple(sorted(updates.items())))
    ctx.commit(CommitRequest(ctx.statement_id, "SET PROPERTIES", (update,)))
    return StatementResult(
        ctx.statement_id,
        "SET PROPERTIES",
        info.name,
        message=", ".join(f"{k.upper()} = {v}" for k, v in updates.items()),
    )


def _changeable(ctx: StatementContext, table: str) -> TableInfo:
    """The table a user's ALTER names, as the catalog has it (no version or files read: renaming
    it or setting its properties needs neither)."""
    info = ctx.table(table)
    check_user_may_change(ctx.catalog, info, action="change")
    return info


_ALTER: dict[type, Callable[[StatementContext, str, Any], StatementResult]] = {
    s.AddColumns: _add_columns,
    s.RenameColumn: _rename_column,
    s.DropColumns: _drop_columns,
    s.RenameTableTo: _rename_table,
    s.SetTableProperties: _set_properties,
}

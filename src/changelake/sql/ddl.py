"""CREATE / DROP / ALTER of tables and views, TRUNCATE."""

from __future__ import annotations

from sqlglot import exp

from changelake.catalog.internal import check_user_may_change, check_user_name
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
from changelake.catalog.writes import WriteKind, write_request
from changelake.dialect import to_spark
from changelake.dml.common import Target, remove_all_rows, stream_consumption
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
from changelake.storage.writer import schema_of_dataframe, write_data
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
    added: list = []
    if stmt.query is not None:
        df = binder.query(stmt.query)
        schema = schema_of_dataframe(df, about=f"CREATE TABLE {name} AS SELECT")
        if stmt.columns is not None:
            raise UnsupportedError(
                "CREATE TABLE t (columns) AS SELECT: give either columns or a query."
            )
        if not (stmt.if_not_exists and ctx.catalog.find_table(name)):
            added = write_data(
                ctx.warehouse,
                df,
                schema=schema,
                table=name,
                directory=ctx.warehouse.data_dir(ctx.statement_id),
            )
    elif stmt.columns is not None:
        schema = _column_defs(stmt.columns, table=name)
    else:
        raise InvalidStatementError(f"CREATE TABLE {name} needs columns or AS SELECT.")
    properties.setdefault("data_retention_time_in_days", "1")
    if_exists = IfExists.of(replace=stmt.replace, if_not_exists=stmt.if_not_exists)
    advances, frontiers = stream_consumption(binder.stream_reads.values())
    result = ctx.commit(
        CommitRequest(
            ctx.statement_id,
            "CREATE TABLE AS SELECT" if stmt.query is not None else "CREATE TABLE",
            updates=(
                CreateTable(
                    name.lower(), schema, tuple(sorted(properties.items())), tuple(added), if_exists
                ),
            )
            + advances,
            requirements=frontiers,
        )
    )
    info = result.tables[name.lower()]
    return StatementResult(
        ctx.statement_id,
        "CREATE TABLE",
        info.name,
        info.current_version,
        rows_inserted=sum(f.row_count for f in added) if result.applied else 0,
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


def _set_schema(
    ctx: StatementContext, target: Target, schema: TableSchema, *, operation: str
) -> int | None:
    write = target.write(WriteKind.SCHEMA, schema=schema)
    result = ctx.commit(write_request(ctx.statement_id, operation, [write]))
    return result.version_of(write.table_id)


def alter(ctx: StatementContext, stmt: s.AlterTable) -> StatementResult:
    ctx.require_no_transaction("ALTER TABLE")
    statement_id = ctx.statement_id
    target = Target.of(ctx, stmt.table)
    info, schema = target.info, target.state.schema
    actions = stmt.actions
    new_columns = [a for a in actions if isinstance(a, exp.ColumnDef)]
    if new_columns and len(new_columns) == len(actions):
        columns = list(schema.columns)
        next_id = schema.next_column_id
        for definition in new_columns:
            check_column_name(definition.name)
            if schema.find(definition.name) or any(
                c.name.lower() == definition.name.lower() for c in columns
            ):
                raise InvalidStatementError(
                    f"Column {definition.name} already exists in {info.name}."
                )
            not_null = any(
                isinstance(c.kind, exp.NotNullColumnConstraint)
                and not c.kind.args.get("allow_null")
                for c in definition.args.get("constraints") or []
            )
            if not_null and target.state.live_rows:
                raise InvalidStatementError(
                    f"Cannot add NOT NULL column {definition.name} to {info.name}: existing rows"
                    " would hold NULL. Add it as nullable."
                )
            channels = ctx.catalog.list_channels(info.table_id) if not_null else []
            if channels:
                names = ", ".join(repr(c.name) for c in channels)
                raise InvalidStatementError(
                    f"Cannot add NOT NULL column {definition.name} to {info.name}: ingest"
                    f" channel(s) {names} write to it with the columns they were opened with, so"
                    " their rows would hold NULL. Add it as nullable, or drop the channels first"
                    " (Channel.close(drop=True))."
                )
            columns.append(
                Column(
                    next_id,
                    definition.name,
                    normalize_type(to_spark(definition.args["kind"])),
                    not not_null,
                )
            )
            next_id += 1
        version = _set_schema(ctx, target, TableSchema(tuple(columns)), operation="ADD COLUMN")
        return StatementResult(
            statement_id, "ADD COLUMN", info.name, version, message="Column(s) added."
        )
    if len(actions) != 1:
        raise UnsupportedError("ALTER TABLE: give one action per statement.")
    action = actions[0]
    if isinstance(action, exp.RenameColumn):
        old = schema.column(action.this.name, table=info.name)
        new_name = action.args["to"].name
        check_column_name(new_name)
        if schema.find(new_name):
            raise InvalidStatementError(f"Column {new_name} already exists in {info.name}.")
        columns = tuple(
            Column(c.column_id, new_name, c.type, c.nullable) if c == old else c
            for c in schema.columns
        )
        version = _set_schema(ctx, target, TableSchema(columns), operation="RENAME COLUMN")
        return StatementResult(
            statement_id,
            "RENAME COLUMN",
            info.name,
            version,
            message=f"{old.name} renamed to {new_name}.",
        )
    if isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() == "COLUMN":
        return _drop_columns(ctx, target, action)
    if isinstance(action, exp.AlterRename):
        new_name = action.this.name
        check_user_name(new_name, kind="table")
        ctx.commit(
            CommitRequest(statement_id, "RENAME TABLE", (RenameTable(info.table_id, new_name),))
        )
        return StatementResult(
            statement_id,
            "RENAME TABLE",
            new_name.lower(),
            message=f"{info.name} renamed to {new_name.lower()}.",
        )
    if isinstance(action, exp.AlterSet):
        nodes = []
        for e in action.expressions:
            nodes.extend(e.expressions if isinstance(e, exp.Properties) else [e])
        updates = properties_of(nodes, table=info.name)
        ctx.commit(
            CommitRequest(
                statement_id,
                "SET PROPERTIES",
                (SetProperties(info.table_id, tuple(sorted(updates.items()))),),
            )
        )
        return StatementResult(
            statement_id,
            "SET PROPERTIES",
            info.name,
            message=", ".join(f"{k.upper()} = {v}" for k, v in updates.items()),
        )
    raise UnsupportedError(f"Unsupported ALTER TABLE action: {action.sql()}.")


def truncate(ctx: StatementContext, stmt: s.Truncate) -> StatementResult:
    return remove_all_rows(ctx, Target.of(ctx, stmt.table), operation="TRUNCATE")


def _drop_columns(ctx: StatementContext, target: Target, action: exp.Drop) -> StatementResult:
    """``ALTER TABLE t DROP COLUMN [IF EXISTS] a [, b]``: metadata only; the files keep the
    values, which time travel before this version still reads."""
    info, schema = target.info, target.state.schema
    dropped = set()
    for named in action.args.get("tables") or []:
        if action.args.get("exists") and schema.find(named.name) is None:
            continue
        dropped.add(schema.column(named.name, table=info.name).column_id)
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

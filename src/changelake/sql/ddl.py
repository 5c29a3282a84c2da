"""CREATE / DROP / ALTER of tables and views, TRUNCATE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.dml.common import Target, remove_all_rows
from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.schema import Column, TableSchema, check_column_name, normalize_type
from changelake.sql.dialect import to_spark
from changelake.sql.resolve import Resolver
from changelake.sql.results import StatementResult
from changelake.storage.writer import write_data

if TYPE_CHECKING:
    from changelake.session import Session

# Table properties a user may set, with how to check the value.
TABLE_PROPERTIES = {
    "data_retention_time_in_days": "days",
    "max_data_extension_time_in_days": "days",
    "change_tracking": "bool",
    "comment": "text",
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


_SPARK_TO_TYPE = {
    "int": "int",
    "smallint": "int",
    "tinyint": "int",
    "bigint": "bigint",
    "float": "double",
    "double": "double",
    "string": "string",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp",
    "binary": "binary",
    "void": "string",
}


def schema_of_dataframe(df: DataFrame, *, table: str) -> TableSchema:
    columns = []
    seen: set[str] = set()
    for i, field in enumerate(df.schema.fields, start=1):
        check_column_name(field.name)
        if field.name.lower() in seen:
            raise InvalidStatementError(
                f"CREATE TABLE {table} AS SELECT: column name {field.name} appears twice; alias one."
            )
        seen.add(field.name.lower())
        simple = field.dataType.simpleString()
        type_name = simple if simple.startswith("decimal") else _SPARK_TO_TYPE.get(simple)
        if type_name is None:
            raise UnsupportedError(
                f"Column {field.name} of {table} would have type {simple.upper()}, which tables"
                " cannot hold; cast it to a supported type."
            )
        columns.append(Column(i, field.name, type_name, True))
    return TableSchema(tuple(columns))


def create(session: Session, stmt: exp.Create, statement_id: str) -> StatementResult:
    kind = str(stmt.args.get("kind") or "").upper()
    if kind == "VIEW":
        return create_view(session, stmt, statement_id)
    if kind != "TABLE":
        raise UnsupportedError(f"CREATE {kind} is not supported.")
    session.require_no_transaction("CREATE TABLE")
    target = stmt.this
    table_node = target.this if isinstance(target, exp.Schema) else target
    name = table_node.name
    props_node = stmt.args.get("properties")
    properties = properties_of(list(props_node.expressions) if props_node else [], table=name)
    replace, if_not_exists = bool(stmt.args.get("replace")), bool(stmt.args.get("exists"))
    query = stmt.expression
    added: list = []
    if query is not None:
        df = Resolver(session).query(query)
        schema = schema_of_dataframe(df, table=name)
        if isinstance(target, exp.Schema):
            raise UnsupportedError(
                "CREATE TABLE t (columns) AS SELECT: give either columns or a query."
            )
        if not (if_not_exists and session.catalog.find_table(name)):
            added = write_data(
                session.warehouse,
                df,
                schema=schema,
                table=name,
                directory=session.warehouse.data_dir(statement_id),
            )
    elif isinstance(target, exp.Schema):
        schema = _column_defs(target, table=name)
    else:
        raise InvalidStatementError(f"CREATE TABLE {name} needs columns or AS SELECT.")
    properties.setdefault("data_retention_time_in_days", "1")
    info = session.catalog.create_table(
        name,
        schema,
        properties=properties,
        statement_id=statement_id,
        now=session.now(),
        replace=replace,
        if_not_exists=if_not_exists,
        added=added,
        operation="CREATE TABLE AS SELECT" if query is not None else "CREATE TABLE",
        advances=session.take_stream_reads(),
    )
    return StatementResult(
        statement_id,
        "CREATE TABLE",
        info.name,
        info.current_version,
        rows_inserted=sum(f.row_count for f in added),
        message=f"Table {info.name} created.",
    )


def create_view(session: Session, stmt: exp.Create, statement_id: str) -> StatementResult:
    session.require_no_transaction("CREATE VIEW")
    name = stmt.this.name
    query = stmt.expression
    resolver = Resolver(session)
    resolver.query(query)  # validates names and types now rather than at first use
    depends = sorted(
        {t.name.lower() for t in query.find_all(exp.Table) if isinstance(t.this, exp.Identifier)}
        - {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    )
    session.catalog.create_view(
        name,
        to_spark(query),
        depends_on=depends,
        now=session.now(),
        replace=bool(stmt.args.get("replace")),
    )
    return StatementResult(
        statement_id, "CREATE VIEW", name.lower(), message=f"View {name.lower()} created."
    )


def drop(session: Session, stmt: exp.Drop, statement_id: str) -> StatementResult:
    kind = str(stmt.args.get("kind") or "").upper()
    objects = stmt.args.get("tables") or [stmt.this]  # sqlglot >= 28 keeps a list here
    if len(objects) != 1:
        raise InvalidStatementError(f"DROP {kind}: give one name per statement.")
    name = objects[0].name
    if_exists = bool(stmt.args.get("exists"))
    session.require_no_transaction(f"DROP {kind}")
    if kind == "TABLE":
        info = session.catalog.drop_table(name, now=session.now(), if_exists=if_exists)
        message = (
            f"Table {name.lower()} dropped." if info else f"Table {name.lower()} did not exist."
        )
    elif kind == "VIEW":
        dropped = session.catalog.drop_view(name, now=session.now(), if_exists=if_exists)
        message = (
            f"View {name.lower()} dropped." if dropped else f"View {name.lower()} did not exist."
        )
    else:
        raise UnsupportedError(f"DROP {kind} is not supported.")
    return StatementResult(statement_id, f"DROP {kind}", name.lower(), message=message)


def alter(session: Session, stmt: exp.Alter, statement_id: str) -> StatementResult:
    session.require_no_transaction("ALTER TABLE")
    if str(stmt.args.get("kind") or "").upper() != "TABLE":
        raise UnsupportedError("Only ALTER TABLE is supported.")
    target = Target.of(session, stmt.this.name)
    info, schema = target.info, target.state.schema
    actions = stmt.args.get("actions") or []
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
            columns.append(
                Column(
                    next_id,
                    definition.name,
                    normalize_type(to_spark(definition.args["kind"])),
                    not not_null,
                )
            )
            next_id += 1
        version = session.catalog.alter_schema(
            info.table_id,
            TableSchema(tuple(columns)),
            operation="ADD COLUMN",
            statement_id=statement_id,
            now=session.now(),
        )
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
        version = session.catalog.alter_schema(
            info.table_id,
            TableSchema(columns),
            operation="RENAME COLUMN",
            statement_id=statement_id,
            now=session.now(),
        )
        return StatementResult(
            statement_id,
            "RENAME COLUMN",
            info.name,
            version,
            message=f"{old.name} renamed to {new_name}.",
        )
    if isinstance(action, exp.AlterRename):
        new_name = action.this.name
        session.catalog.rename_table(info.name, new_name)
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
        session.catalog.set_properties(info.table_id, updates)
        return StatementResult(
            statement_id,
            "SET PROPERTIES",
            info.name,
            message=", ".join(f"{k.upper()} = {v}" for k, v in updates.items()),
        )
    raise UnsupportedError(f"Unsupported ALTER TABLE action: {action.sql()}.")


def truncate(session: Session, stmt: exp.TruncateTable, statement_id: str) -> StatementResult:
    (table,) = stmt.expressions
    return remove_all_rows(
        session, Target.of(session, table.name), operation="TRUNCATE", statement_id=statement_id
    )

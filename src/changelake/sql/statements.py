"""Typed statements: every statement of the dialect as one frozen value.

``statement_of`` maps a parsed sqlglot tree to its statement value; the dispatch table in
``sql/execute.py`` maps each statement type to its handler. Parts that are queries or
expressions stay sqlglot trees (the binder turns them into Spark plans).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from sqlglot import exp

from changelake import dialect as d
from changelake.dml.statements import Delete, Insert, Merge, Update
from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.sql import apply, dynamic, external, tasks


@dataclass(frozen=True)
class Query:
    tree: exp.Expression


@dataclass(frozen=True)
class CreateTable:
    name: str
    columns: exp.Schema | None
    query: exp.Expression | None
    properties: list[exp.Expression]
    replace: bool
    if_not_exists: bool


@dataclass(frozen=True)
class CreateView:
    name: str
    query: exp.Expression
    replace: bool


@dataclass(frozen=True)
class CreateStream:
    name: str
    on_view: bool
    table: str
    point: exp.HistoricalData | None
    append_only: bool
    show_initial_rows: bool
    comment: str
    replace: bool
    if_not_exists: bool
    on_external: bool = False  # ON EXTERNAL TABLE (``table`` names the external table)


class DropKind(StrEnum):
    """What DROP drops (the others have statements of their own: DROP DYNAMIC TABLE, ...)."""

    TABLE = "TABLE"
    VIEW = "VIEW"
    STREAM = "STREAM"


@dataclass(frozen=True)
class Drop:
    kind: DropKind
    name: str
    if_exists: bool


# -- ALTER TABLE: one action per statement (columns are added together) --


@dataclass(frozen=True)
class NewColumn:
    name: str
    type: str  # as written, in Spark's SQL
    not_null: bool


@dataclass(frozen=True)
class AddColumns:
    columns: tuple[NewColumn, ...]


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True)
class DropColumns:
    names: tuple[str, ...]
    if_exists: bool


@dataclass(frozen=True)
class RenameTableTo:
    new_name: str


@dataclass(frozen=True)
class SetTableProperties:
    properties: list[exp.Expression]  # KEY = value nodes, checked by the handler


AlterAction = AddColumns | RenameColumn | DropColumns | RenameTableTo | SetTableProperties


@dataclass(frozen=True)
class AlterTable:
    table: str
    action: AlterAction


def _alter(tree: exp.Alter) -> AlterTable:
    if str(tree.args.get("kind") or "").upper() != "TABLE":
        raise UnsupportedError("Only ALTER TABLE is supported.")
    return AlterTable(tree.this.name, _alter_action(list(tree.args.get("actions") or [])))


def _alter_action(actions: list[exp.Expression]) -> AlterAction:
    added = [a for a in actions if isinstance(a, exp.ColumnDef)]
    if added and len(added) == len(actions):
        return AddColumns(tuple(_new_column(a) for a in added))
    if len(actions) != 1:
        raise UnsupportedError("ALTER TABLE: give one action per statement.")
    (action,) = actions
    if isinstance(action, exp.RenameColumn):
        return RenameColumn(action.this.name, action.args["to"].name)
    if isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() == "COLUMN":
        named = action.args.get("tables") or []
        return DropColumns(tuple(n.name for n in named), bool(action.args.get("exists")))
    if isinstance(action, exp.AlterRename):
        return RenameTableTo(action.this.name)
    if isinstance(action, exp.AlterSet):
        nodes: list[exp.Expression] = []
        for e in action.expressions:
            nodes.extend(e.expressions if isinstance(e, exp.Properties) else [e])
        return SetTableProperties(nodes)
    raise UnsupportedError(f"Unsupported ALTER TABLE action: {action.sql()}.")


def _new_column(definition: exp.ColumnDef) -> NewColumn:
    not_null = any(
        isinstance(c.kind, exp.NotNullColumnConstraint) and not c.kind.args.get("allow_null")
        for c in definition.args.get("constraints") or []
    )
    return NewColumn(definition.name, d.to_spark(definition.args["kind"]), not_null)


# -- end ALTER TABLE --


@dataclass(frozen=True)
class Truncate:
    table: str


@dataclass(frozen=True)
class DescribeTable:
    table: str


@dataclass(frozen=True)
class DescribeHistory:
    table: str


@dataclass(frozen=True)
class DescribeStream:
    stream: str


class ShowKind(StrEnum):
    """What SHOW lists, as written after SHOW [TERSE]."""

    TABLES = "TABLES"
    INTERNAL_TABLES = "INTERNAL TABLES"
    VIEWS = "VIEWS"
    STREAMS = "STREAMS"
    CHANNELS = "CHANNELS"
    TASKS = "TASKS"
    DYNAMIC_TABLES = "DYNAMIC TABLES"
    CONNECTIONS = "CONNECTIONS"
    EXTERNAL_TABLES = "EXTERNAL TABLES"


@dataclass(frozen=True)
class Show:
    kind: ShowKind
    table: str | None = None  # SHOW CHANNELS | INTERNAL TABLES IN TABLE t


@dataclass(frozen=True)
class Begin:
    pass


@dataclass(frozen=True)
class Commit:
    pass


@dataclass(frozen=True)
class Rollback:
    pass


@dataclass(frozen=True)
class Optimize:
    table: str


@dataclass(frozen=True)
class Vacuum:
    table: str


@dataclass(frozen=True)
class Explain:
    tree: exp.Expression


# -- export (changelog/export.py) --


@dataclass(frozen=True)
class Export:
    """``COPY INTO '<directory>' FROM (query) [FILE_FORMAT = (TYPE = PARQUET | JSON)]``"""

    path: str
    query: exp.Expression
    file_format: str  # PARQUET | JSON, as written


def _export(tree: exp.Copy) -> Export:
    target, sources = tree.this, tree.args.get("files") or []
    if not isinstance(target, exp.Table) or not target.this.args.get("quoted"):
        raise UnsupportedError(
            "COPY INTO <table> (loading files) is not supported; COPY INTO '<directory>' FROM"
            " (query) exports a query's rows as files."
        )
    if not tree.args.get("kind") or len(sources) != 1 or not isinstance(sources[0], exp.Subquery):
        raise InvalidStatementError(
            f"COPY INTO '{target.name}' exports a query: write FROM (SELECT ...), e.g. FROM"
            " (SELECT * FROM s CHANGES (FORMAT => ODF))."
        )
    file_format = "PARQUET"
    for param in tree.args.get("params") or []:
        options = [o for o in param.expressions if isinstance(o, exp.Property)]
        if param.name.upper() != "FILE_FORMAT" or [o.name.upper() for o in options] != ["TYPE"]:
            raise InvalidStatementError(
                f"COPY INTO '{target.name}': the only option is FILE_FORMAT = (TYPE = PARQUET |"
                f" JSON), got {param.sql(dialect=d.Changelake)}."
            )
        file_format = options[0].args["value"].name.upper()
    return Export(target.name, sources[0].this, file_format)


# -- end export --


Statement = (
    Query
    | Insert
    | Update
    | Delete
    | Merge
    | CreateTable
    | CreateView
    | CreateStream
    | Drop
    | AlterTable
    | Truncate
    | DescribeTable
    | DescribeHistory
    | DescribeStream
    | Show
    | Begin
    | Commit
    | Rollback
    | Optimize
    | Vacuum
    | Explain
    | apply.ApplyChanges
    | Export
    | dynamic.DynamicStatement
    | external.ExternalStatement
    | tasks.TaskStatement
)


def _where(tree: exp.Expression) -> exp.Expression | None:
    where = tree.args.get("where")
    return where.this if where is not None else None


def _insert(tree: exp.Insert) -> Insert:
    into, columns = tree.this, None
    if isinstance(into, exp.Schema):
        columns = [c.name for c in into.expressions]
        into = into.this
    return Insert(into.name, columns, tree.expression, bool(tree.args.get("overwrite")))


def _set_targets(tree: exp.Expression, statement: str) -> None:
    """Refuse ``SET "name" = ...``: in changelake's SQL (Spark's) "name" is a string, and the
    query Spark would be given fails far from what the user wrote."""
    for assignment in tree.find_all(exp.EQ):
        target = assignment.this
        if (
            isinstance(target, exp.Literal)
            and target.is_string
            and isinstance(assignment.parent, exp.Update)
        ):
            raise InvalidStatementError(
                f"{statement} sets {target.sql()}, a string: name the column as"
                f" {target.name} or `{target.name}` (double quotes make a string here)."
            )


def _update(tree: exp.Update) -> Update:
    _set_targets(tree, "UPDATE")
    source = tree.args.get("from_")
    return Update(
        tree.this, list(tree.expressions), source.this if source is not None else None, _where(tree)
    )


def _delete(tree: exp.Delete) -> Delete:
    return Delete(tree.this, list(tree.args.get("using") or []), _where(tree))


def _merge(tree: exp.Merge) -> Merge:
    _set_targets(tree, "MERGE")
    whens = tree.args.get("whens")
    return Merge(
        tree.this,
        tree.args["using"],
        tree.args["on"],
        list(whens.expressions) if whens is not None else [],
    )


def _create(tree: exp.Create) -> CreateTable | CreateView:
    kind = str(tree.args.get("kind") or "").upper()
    if kind == "VIEW":
        return CreateView(tree.this.name, tree.expression, bool(tree.args.get("replace")))
    if kind != "TABLE":
        raise UnsupportedError(f"CREATE {kind} is not supported.")
    target = tree.this
    props = tree.args.get("properties")
    return CreateTable(
        name=(target.this if isinstance(target, exp.Schema) else target).name,
        columns=target if isinstance(target, exp.Schema) else None,
        query=tree.expression,
        properties=list(props.expressions) if props else [],
        replace=bool(tree.args.get("replace")),
        if_not_exists=bool(tree.args.get("exists")),
    )


def _create_stream(tree: d.CreateStreamSyntax) -> CreateStream:
    return CreateStream(
        name=tree.this.name,
        on_view=str(tree.args.get("kind") or "TABLE").upper() == "VIEW",
        table=tree.args["on"].name,
        point=tree.args.get("when"),
        append_only=bool(tree.args.get("append_only") or tree.args.get("insert_only")),
        show_initial_rows=bool(tree.args.get("show_initial_rows")),
        comment=tree.args.get("comment") or "",
        replace=bool(tree.args.get("replace")),
        if_not_exists=bool(tree.args.get("exists")),
        on_external=bool(tree.args.get("external")),
    )


def _drop(tree: exp.Drop) -> Drop:
    kind = str(tree.args.get("kind") or "").upper()
    if kind not in (DropKind.TABLE, DropKind.VIEW):
        raise UnsupportedError(f"DROP {kind} is not supported.")
    objects = tree.args.get("tables") or [tree.this]  # sqlglot >= 28 keeps a list here
    if len(objects) != 1:
        raise InvalidStatementError(f"DROP {kind}: give one name per statement.")
    return Drop(DropKind(kind), objects[0].name, bool(tree.args.get("exists")))


def _truncate(tree: exp.TruncateTable) -> Truncate:
    (table,) = tree.expressions
    return Truncate(table.name)


def _describe(tree: exp.Describe) -> DescribeTable | DescribeHistory:
    style = str(tree.args.get("style") or "").upper()
    kind = str(tree.args.get("kind") or "TABLE").upper()
    if style == "HISTORY":
        return DescribeHistory(tree.this.name)
    if kind == "TABLE" and isinstance(tree.this, exp.Table):
        return DescribeTable(tree.this.name)
    raise UnsupportedError(f"Unsupported DESCRIBE: {tree.sql()}.")


_BUILDERS: dict[type, Callable[..., Statement]] = {
    exp.Insert: _insert,
    exp.Update: _update,
    exp.Delete: _delete,
    exp.Merge: _merge,
    exp.Create: _create,
    exp.Drop: _drop,
    exp.Alter: _alter,
    exp.TruncateTable: _truncate,
    exp.Describe: _describe,
    exp.Transaction: lambda _: Begin(),
    exp.Commit: lambda _: Commit(),
    exp.Rollback: lambda _: Rollback(),
    d.CreateStreamSyntax: _create_stream,
    d.DropStreamSyntax: lambda t: Drop(DropKind.STREAM, t.this.name, bool(t.args.get("exists"))),
    d.DescribeStreamSyntax: lambda t: DescribeStream(t.this.name),
    d.ShowObjectsSyntax: lambda t: Show(
        ShowKind(str(t.args["kind"]).upper()), t.this.name if t.this else None
    ),
    d.OptimizeSyntax: lambda t: Optimize(t.this.name),
    d.VacuumSyntax: lambda t: Vacuum(t.this.name),
    d.ExplainSyntax: lambda t: Explain(t.this),
    exp.Copy: _export,
    **apply.BUILDERS,
    **dynamic.BUILDERS,
    **external.BUILDERS,
    **tasks.BUILDERS,
}


def statement_of(tree: exp.Expression) -> Statement:
    """The typed statement of a parsed tree; UnsupportedError for anything else."""
    if isinstance(tree, exp.Query):
        return Query(tree)
    builder = _BUILDERS.get(type(tree))
    if builder is None:
        first = tree.sql(dialect=d.Changelake).split(maxsplit=1)[:1] or ["?"]
        raise UnsupportedError(
            f"Unsupported statement: {first[0].upper()} ... ({type(tree).__name__})."
        )
    return builder(tree)

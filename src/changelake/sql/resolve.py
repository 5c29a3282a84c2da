"""Turning a query over changelake tables, views and streams into one Spark DataFrame.

Each table reference is replaced by a placeholder bound to a DataFrame (a snapshot, time-travel
or change scan), views are inlined as subqueries, and Spark SQL plans the rest.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.errors import (
    ColumnNotFoundError,
    InvalidStatementError,
    SqlSyntaxError,
    TableNotFoundError,
    did_you_mean,
)
from changelake.sql.dialect import normalize_metadata_names, parse_one, to_spark
from changelake.storage.pruning import Comparison, prune
from changelake.storage.snapshot import TableState, read_state

if TYPE_CHECKING:
    from changelake.session import Session

_PLACEHOLDER = "__cl_ref_{}__"


class Resolver:
    """Binds the table references of queries to DataFrames; one per statement."""

    def __init__(self, session: Session):
        self.session = session
        self.bindings: dict[str, DataFrame] = {}
        self.names: dict[str, str] = {}  # placeholder -> what the user wrote
        self.states: dict[str, TableState] = {}  # table name -> state read (for DML bookkeeping)
        self.view_stack: list[str] = []

    # -- entry points -------------------------------------------------------------------------

    def query(self, tree: exp.Expression) -> DataFrame:
        """A lazy DataFrame for a query expression (SELECT, UNION, VALUES, ...)."""
        tree = self.bind(tree.copy())
        return self.run(tree)

    def bind(self, tree: exp.Expression) -> exp.Expression:
        """Replace table references in ``tree`` by placeholders bound to DataFrames."""
        if isinstance(tree, exp.Table) and tree.parent is None:
            # a bare reference (MERGE ... USING t) is replaced in place, so it needs a parent
            return self.bind(exp.Paren(this=tree)).this
        tree = _stream_functions(self.session, tree)
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        for table in list(tree.find_all(exp.Table)):
            if not isinstance(table.this, exp.Identifier) or table.args.get("db"):
                continue
            if table.name.lower() in ctes and not table.args.get("when"):
                continue
            self._bind_table(table)
        return tree

    def bind_dataframe(self, df: DataFrame, label: str) -> str:
        """Register ``df`` under a fresh placeholder; returns the placeholder name."""
        name = _PLACEHOLDER.format(len(self.bindings))
        self.bindings[name] = df
        self.names[name] = label
        return name

    def run(self, tree: exp.Expression) -> DataFrame:
        text = to_spark(tree)
        return self.spark_sql(text)

    def spark_sql(self, text: str) -> DataFrame:
        spark = self.session.spark
        try:
            if not self.bindings:
                return spark.sql(text)
            used = {k: v for k, v in self.bindings.items() if k in text}
            escaped = text.replace("{", "{{").replace("}", "}}")
            for name in used:
                escaped = escaped.replace(name, "{" + name + "}")
            return spark.sql(escaped, **used)
        except AnalysisException as e:
            raise self.translate(e) from None

    # -- tables -------------------------------------------------------------------------------

    def _bind_table(self, table: exp.Table) -> None:
        name = table.name
        if name in self.bindings:
            return
        alias = table.alias or name
        session = self.session
        info = session.catalog.find_table(name)
        if info is not None:
            df = self.table_dataframe(info, table)
            self._replace(table, df, alias, label=name)
            return
        view_sql = session.catalog.view_sql(name)
        if view_sql is not None:
            if table.args.get("when") or table.args.get("changes"):
                from changelake.errors import UnsupportedError

                raise UnsupportedError(
                    f"{name} is a view: time travel and CHANGES on views are not supported yet;"
                    " query the base tables instead."
                )
            if name.lower() in self.view_stack:
                raise InvalidStatementError(f"View {name} refers to itself.")
            self.view_stack.append(name.lower())
            inner = self.bind(parse_one(view_sql))
            self.view_stack.pop()
            table.replace(
                exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))
            )
            return
        if session.catalog.find_stream(name) is not None:
            from changelake.streams.frontier import read_stream

            if table.args.get("when") or table.args.get("changes"):
                raise InvalidStatementError(
                    f"{name} is a stream: it reads its own interval; drop AT/BEFORE/CHANGES."
                )
            self._replace(table, read_stream(session, name), alias, label=name)
            return
        if session.spark.catalog.tableExists(name):
            return  # a Spark temp view or table of the user's own
        known = session.catalog.object_names() + session.catalog.stream_names()
        raise TableNotFoundError(
            f"Table, view or stream {name!r} does not exist.{did_you_mean(name, known)}"
            " SHOW TABLES and SHOW STREAMS list what exists."
        )

    def table_dataframe(self, info: Any, table: exp.Table) -> DataFrame:
        from changelake.sql.timetravel import resolve_version

        changes = table.args.get("changes")
        if changes is not None:
            from changelake.changes.query import changes_for_clause

            return changes_for_clause(self.session, info, changes)
        when = table.args.get("when")
        version = resolve_version(self.session, info, when) if when is not None else None
        state = self.session.state(info, version)
        self.states[info.name] = state
        conjuncts = pushable_conjuncts(table)
        if conjuncts:
            state = state.with_files(prune(state.files, state.schema, conjuncts))
        return read_state(self.session.spark, self.session.warehouse, state)

    def _replace(self, table: exp.Table, df: DataFrame, alias: str, *, label: str) -> None:
        placeholder = self.bind_dataframe(df, label)
        table.replace(
            exp.Table(
                this=exp.to_identifier(placeholder),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
        )

    # -- errors -------------------------------------------------------------------------------

    def translate(self, e: AnalysisException) -> Exception:
        """A changelake error for a Spark analysis error, with user names, without the plan."""
        condition = e.getCondition() or ""
        params = e.getMessageParameters() or {}
        text = self._unplaceholder(str(e).split("\n")[0])
        text = re.sub(r"\s*SQLSTATE: \w+;?.*$", "", text)
        if condition.startswith("UNRESOLVED_COLUMN"):
            column = self._unplaceholder(params.get("objectName", "?")).replace("`", "")
            proposal = self._unplaceholder(params.get("proposal", "")).replace("`", "")
            known = [c.strip() for c in proposal.split(",") if c.strip()]
            hint = did_you_mean(column, known) or (
                f" Columns in scope: {', '.join(known)}." if known else ""
            )
            return ColumnNotFoundError(f"Column {column} does not exist.{hint}")
        if condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
            return TableNotFoundError(text)
        if isinstance(e, ParseException) or "PARSE_SYNTAX_ERROR" in condition:
            return SqlSyntaxError(text)
        return InvalidStatementError(text)

    def _unplaceholder(self, text: str) -> str:
        for placeholder, name in self.names.items():
            text = text.replace(placeholder, name)
        return re.sub(r"`?_cl_(file|pos|rid|ver)`?,?\s*", "", text)


def _stream_functions(session: Session, tree: exp.Expression) -> exp.Expression:
    """Evaluate SYSTEM$STREAM_HAS_DATA('s') from metadata into a boolean literal."""

    def fold(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.upper() == "SYSTEM$STREAM_HAS_DATA":
            args = node.expressions
            if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
                raise InvalidStatementError("SYSTEM$STREAM_HAS_DATA takes one stream name: 'name'.")
            from changelake.streams.frontier import has_data

            return exp.Boolean(this=has_data(session, args[0].this))
        return node

    if not any(
        isinstance(n, exp.Anonymous) and n.name.upper() == "SYSTEM$STREAM_HAS_DATA"
        for n in tree.find_all(exp.Anonymous)
    ):
        return tree
    return tree.transform(fold, copy=False)


# -- filter pushdown for file pruning ---------------------------------------------------------


def pushable_conjuncts(table: exp.Table) -> list[Comparison]:
    """Simple comparisons in the WHERE of the SELECT reading ``table`` that only concern it."""
    select = table.parent_select
    if select is None:
        return []
    if any(_is_outer(j) for j in select.args.get("joins") or []):
        return []
    where = select.args.get("where")
    if where is None:
        return []
    return conjuncts_for(where.this, {table.alias_or_name.lower(), table.name.lower()})


def conjuncts_for(condition: exp.Expression, qualifiers: set[str]) -> list[Comparison]:
    found = []
    for part in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        cmp = _comparison(part, qualifiers)
        if cmp is not None:
            found.extend(cmp)
    return found


def _is_outer(join: exp.Join) -> bool:
    return str(join.args.get("side") or "").upper() in ("LEFT", "RIGHT", "FULL")


_OPS = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _literal(node: exp.Expression) -> tuple[bool, Any]:
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, node.this
        try:
            return True, int(node.this)
        except ValueError:
            return True, float(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        ok, value = _literal(node.this)
        return ok, -value
    if isinstance(node, exp.Boolean):
        return True, node.this
    return False, None


def _column(node: exp.Expression, qualifiers: set[str]) -> str | None:
    if isinstance(node, exp.Column) and (not node.table or node.table.lower() in qualifiers):
        return node.name
    return None


def _comparison(node: exp.Expression, qualifiers: set[str]) -> list[Comparison] | None:
    if isinstance(node, exp.Paren):
        return _comparison(node.this, qualifiers)
    for kind, op in _OPS.items():
        if isinstance(node, kind):
            left, right = node.this, node.expression
            column, (ok, value) = _column(left, qualifiers), _literal(right)
            if column is None:
                column, (ok, value), op = _column(right, qualifiers), _literal(left), _FLIP[op]
            if column is not None and ok:
                return [Comparison(column, op, value)]
            return None
    if isinstance(node, exp.In) and not node.args.get("query"):
        column = _column(node.this, qualifiers)
        values = [_literal(v) for v in node.expressions]
        if column is not None and values and all(ok for ok, _ in values):
            return [Comparison(column, "in", tuple(v for _, v in values))]
    if isinstance(node, exp.Between):
        column = _column(node.this, qualifiers)
        (ok_lo, lo), (ok_hi, hi) = _literal(node.args["low"]), _literal(node.args["high"])
        if column is not None and ok_lo and ok_hi:
            return [Comparison(column, ">=", lo), Comparison(column, "<=", hi)]
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        column = _column(node.this, qualifiers)
        if column is not None:
            return [Comparison(column, "is_null")]
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        inner = node.this
        column = _column(inner.this, qualifiers)
        if column is not None and isinstance(inner.expression, exp.Null):
            return [Comparison(column, "is_not_null")]
    return None


__all__ = ["Resolver", "conjuncts_for", "normalize_metadata_names", "pushable_conjuncts"]

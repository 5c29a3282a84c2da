"""Building the IR of a view's query from its sqlglot tree: names resolved, views inlined.

What differentiation does not cover yet is refused here, with an error naming the operator, so a
change query on a view either runs its derivative or says why not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from changelake.catalog.model import TableInfo
from changelake.dialect import parse_one, to_spark
from changelake.errors import (
    ColumnNotFoundError,
    InvalidStatementError,
    TableNotFoundError,
    UnsupportedError,
    did_you_mean,
)
from changelake.plan.grammar import (
    NONDETERMINISTIC,
    REFUSED_CLAUSES,
    aggregates,
    function_name,
    refused_clause,
)
from changelake.plan.ir import (
    Aggregate,
    Branch,
    Col,
    Filter,
    Join,
    JoinKind,
    Node,
    Project,
    Scan,
    Union,
    Window,
)


@dataclass(frozen=True)
class Catalog:
    """What building asks: tables' infos and columns, views' SQL (``ahead``: each text first)."""

    table: Callable[[str], tuple[TableInfo, tuple[str, ...]] | None]
    view_sql: Callable[[str], str | None]
    names: Callable[[], list[str]]
    ahead: Callable[[exp.Expression], exp.Expression]  # to look names up together


@dataclass(frozen=True)
class _Source:
    """A FROM item: its node and the names its columns go by under its alias."""

    alias: str
    node: Node


class Builder:
    """Builds the IR of one view (and the views it reads), for the change query ``about``."""

    def __init__(self, catalog: Catalog, about: str):
        self.catalog = catalog
        self.about = about
        self._ids = itertools.count()
        self._views: list[str] = []
        self.built: list[tuple[str, Node]] = []  # every view built and its tree, innermost first

    def view(self, name: str) -> Node:
        """The IR of view ``name``."""
        sql = self.catalog.view_sql(name)
        if sql is None:
            raise TableNotFoundError(f"View {name!r} does not exist.")
        if name.lower() in self._views:
            raise InvalidStatementError(f"View {name} refers to itself.")
        self._views.append(name.lower())
        try:
            tree = self.query(self.catalog.ahead(parse_one(sql)), {})
        finally:
            self._views.pop()
        self.built.append((name.lower(), tree))
        return tree

    # -- queries ------------------------------------------------------------------------------

    def query(self, tree: exp.Expression, ctes: dict[str, exp.Expression]) -> Node:
        with_ = tree.args.get("with_")
        if with_ is not None:
            ctes = dict(ctes)
            for cte in with_.expressions:
                ctes[cte.alias_or_name.lower()] = cte.this
        if isinstance(tree, exp.Union):
            union = self._union(tree, ctes)
            return self._distinct(union) if tree.args.get("distinct") else union
        if isinstance(tree, exp.Subquery | exp.Paren):
            return self.query(tree.this, ctes)
        if isinstance(tree, exp.Select):
            return self._select(tree, ctes)
        raise self._unsupported(type(tree).__name__.upper())

    def _union(self, tree: exp.Union, ctes: dict[str, exp.Expression]) -> Node:
        left = self.query(tree.this, ctes)
        right = self.query(tree.expression, ctes)
        if len(left.columns) != len(right.columns):
            raise InvalidStatementError(
                f"The branches of a UNION ALL in {self.about} have {len(left.columns)} and"
                f" {len(right.columns)} columns; give both the same number."
            )
        return Union(Branch(left, "0"), Branch(right, "1"))

    def _select(self, tree: exp.Select, ctes: dict[str, exp.Expression]) -> Node:
        clause = refused_clause(tree)
        if clause is not None:
            raise self._unsupported(clause)
        for item in tree.expressions:
            if item.find(exp.Subquery, exp.Select, exp.Exists) is not None:
                raise self._unsupported("a subquery in the select list")
        node, sources = self._from(tree, ctes)
        where = tree.args.get("where")
        if where is not None:
            node = self._where(where.this, node, sources, ctes)
        return self._output(tree, node, sources)

    def _from(
        self, tree: exp.Select, ctes: dict[str, exp.Expression]
    ) -> tuple[Node, list[_Source]]:
        """FROM and JOINs: the joined node, and the sources whose columns later clauses see."""
        from_ = tree.args.get("from_")
        if from_ is None:
            raise self._unsupported("SELECT without FROM")
        sources = [self._source(from_.this, ctes)]
        node = sources[0].node
        for join in tree.args.get("joins") or []:
            right = self._source(join.this, ctes)
            kind = self._join_kind(join)
            sources.append(right)
            on = join.args.get("on")
            if join.args.get("using"):
                raise self._unsupported("JOIN ... USING", "write JOIN ... ON")
            condition = self._expression(on, sources) if on is not None else None
            shown = to_spark(on) if on is not None else ""
            node = Join(node, right.node, kind, condition, shown)
            if kind in (JoinKind.SEMI, JoinKind.ANTI):
                sources.pop()  # its columns are only for the condition
        return node, sources

    def _where(
        self,
        condition: exp.Expression,
        node: Node,
        sources: list[_Source],
        ctes: dict[str, exp.Expression],
    ) -> Node:
        """WHERE: [NOT] IN / EXISTS subqueries become semi (anti) joins, the rest one Filter."""
        rest = []
        for conjunct in condition.flatten() if isinstance(condition, exp.And) else [condition]:
            negated = isinstance(conjunct, exp.Not)
            inner = conjunct.this if negated else conjunct
            if isinstance(inner, exp.In) and inner.args.get("query") is not None:
                node = self._in_subquery(inner, negated, node, sources, ctes)
            elif isinstance(inner, exp.Exists):
                node = self._exists(inner.this, negated, node, sources, ctes)
            else:
                rest.append(conjunct)
        if rest:
            kept = exp.and_(*rest)
            node = Filter(node, self._expression(kept, sources), to_spark(kept))
        return node

    def _in_subquery(
        self,
        test: exp.In,
        negated: bool,
        node: Node,
        sources: list[_Source],
        ctes: dict[str, exp.Expression],
    ) -> Node:
        """``x IN (SELECT y …)`` is a semi join on x = y. ``x NOT IN (…)`` is false when x or any
        y is NULL (unless the subquery is empty), so it is an anti join on
        ``x = y OR x IS NULL OR y IS NULL``."""
        sub = self.query(test.args["query"].this, ctes)
        if len(sub.columns) != 1:
            raise InvalidStatementError(
                f"{self.about}: the subquery of IN returns {len(sub.columns)} columns; return one."
            )
        value = self._expression(test.this, sources)
        other = f"`{sub.columns[0].id}`"
        if negated:
            condition = f"({value}) = {other} OR ({value}) IS NULL OR {other} IS NULL"
            shown = f"{to_spark(test.this)} NOT IN {to_spark(test.args['query'])}"
            return Join(node, sub, JoinKind.ANTI, condition, shown)
        return Join(node, sub, JoinKind.SEMI, f"({value}) = {other}", to_spark(test))

    def _exists(
        self,
        query: exp.Expression,
        negated: bool,
        node: Node,
        sources: list[_Source],
        ctes: dict[str, exp.Expression],
    ) -> Node:
        """``[NOT] EXISTS (SELECT … FROM … WHERE c)``: a semi (anti) join on c, which may refer
        to the outer query's columns."""
        if not isinstance(query, exp.Select) or any(
            query.args.get(k) for k in (*REFUSED_CLAUSES, "group", "having", "distinct")
        ):
            raise self._unsupported("an EXISTS subquery other than SELECT … FROM … WHERE")
        inner, inner_sources = self._from(query, ctes)
        where = query.args.get("where")
        condition = (
            self._expression(where.this, inner_sources, outer=sources)
            if where is not None
            else "TRUE"
        )
        shown = ("NOT " if negated else "") + f"EXISTS ({to_spark(query)})"
        return Join(node, inner, JoinKind.ANTI if negated else JoinKind.SEMI, condition, shown)

    def _output(self, tree: exp.Select, node: Node, sources: list[_Source]) -> Node:
        """The select list (grouped, or with window functions and QUALIFY), then DISTINCT."""
        windows = any(i.find(exp.Window) for i in tree.expressions) or tree.args.get("qualify")
        if tree.args.get("group") or tree.args.get("having") or aggregates(tree.expressions):
            if windows:
                raise self._unsupported("a window function or QUALIFY over GROUP BY")
            node = self._aggregate(tree, node, sources)
        else:
            items: list[exp.Expression] = list(tree.expressions)
            bound: frozenset[str] = frozenset()
            if windows:
                node, items, bound = self._windows(tree, node, sources)
            outputs, expressions = [], []
            for item in items:
                for col, text in self._select_item(item, sources, bound):
                    outputs.append(col)
                    expressions.append(text)
            node = Project(node, tuple(outputs), tuple(expressions))
        if tree.args.get("distinct"):
            if tree.args["distinct"].args.get("on"):
                raise self._unsupported("DISTINCT ON")
            node = self._distinct(node)
        return node

    def _distinct(self, node: Node) -> Node:
        keys = tuple(self._col(c.name) for c in node.columns)
        return Aggregate(node, keys, tuple(f"`{c.id}`" for c in node.columns), (), ())

    def _windows(
        self, tree: exp.Select, node: Node, sources: list[_Source]
    ) -> tuple[Node, list[exp.Expression], frozenset[str]]:
        """Window functions of the select list and QUALIFY computed once each by a Window node
        (QUALIFY a Filter over it); returns the select list with each call replaced by a
        reference to its column, and those columns' ids."""
        calls: dict[str, Col] = {}  # window call as Spark SQL -> its column
        partitions: list[list[str]] = []

        def lift(expression: exp.Expression) -> exp.Expression:
            def swap(n: exp.Expression) -> exp.Expression:
                if not isinstance(n, exp.Window):
                    return n
                text = self._expression(n, sources, aggregates=True, window=True)
                if text not in calls:
                    calls[text] = self._col(f"_window{len(calls)}")
                    by = n.args.get("partition_by") or []
                    partitions.append([self._expression(e, sources) for e in by])
                return exp.column(exp.to_identifier(calls[text].id, quoted=True))

            return expression.transform(swap)

        items = [lift(i) for i in tree.expressions]
        qualify = tree.args.get("qualify")
        condition = None
        if qualify is not None:
            aliases = {i.alias.lower(): i.unalias() for i in items if i.alias}

            def alias(n: exp.Expression) -> exp.Expression:
                if (
                    isinstance(n, exp.Column)
                    and not n.table
                    and n.name.lower() in aliases
                    and not self._visible(n, sources)
                ):
                    return aliases[n.name.lower()].copy()
                return n

            condition = lift(qualify.this.transform(alias))
        # rows of one partition of every call share the keys all calls partition by
        common = [e for e in partitions[0] if all(e in p for p in partitions[1:])]
        bound = frozenset(c.id for c in calls.values())
        node = Window(node, tuple(common), tuple(calls.values()), tuple(calls.keys()))
        if condition is not None:
            text = self._expression(condition, sources, bound=bound)
            node = Filter(node, text, to_spark(qualify.this))
        return node, items, bound

    def _aggregate(self, tree: exp.Select, node: Node, sources: list[_Source]) -> Node:
        """GROUP BY: an Aggregate computing the group keys and each aggregate call once, then
        HAVING as a Filter and the select list as a Project over them."""
        group = tree.args.get("group")
        grouped = list(group.expressions) if group is not None else []
        items = [i for i in tree.expressions]
        for i, g in enumerate(grouped):
            if isinstance(g, exp.Literal) and not g.is_string:  # GROUP BY 2
                grouped[i] = items[int(g.this) - 1].unalias()
        key_texts = [self._expression(g, sources) for g in grouped]
        keys = tuple(self._col(g.alias_or_name or to_spark(g)) for g in grouped)
        calls: dict[str, str] = {}  # aggregate call as Spark SQL -> its column id
        values: list[Col] = []

        def over_groups(expression: exp.Expression) -> str:
            resolved = parse_one(f"SELECT {self._expression(expression, sources, aggregates=True)}")
            resolved = resolved.expressions[0]

            def replace(n: exp.Expression) -> exp.Expression:
                text = to_spark(n)
                if text in key_texts:
                    return exp.column(
                        exp.to_identifier(keys[key_texts.index(text)].id, quoted=True)
                    )
                if isinstance(n, exp.AggFunc):
                    if text not in calls:
                        col = self._col(f"_agg{len(calls)}")
                        calls[text] = col.id
                        values.append(col)
                    return exp.column(exp.to_identifier(calls[text], quoted=True))
                return n

            out = resolved.transform(replace)
            inner = {c.id for c in node.columns}
            loose = [c for c in out.find_all(exp.Column) if c.name in inner]
            if loose:
                raise InvalidStatementError(
                    f"{self.about}: {to_spark(expression)} uses a column that is neither in"
                    " GROUP BY nor inside an aggregate function."
                )
            return to_spark(out)

        outputs, expressions = [], []
        for item in items:
            if isinstance(item, exp.Star):
                raise InvalidStatementError(f"{self.about}: SELECT * cannot be grouped.")
            outputs.append(self._col(item.alias_or_name or to_spark(item)))
            expressions.append(over_groups(item.unalias()))
        having = tree.args.get("having")
        condition = over_groups(having.this) if having is not None else None
        aggregate = Aggregate(node, keys, tuple(key_texts), tuple(values), tuple(calls.keys()))
        result: Node = aggregate
        if condition is not None:
            result = Filter(result, condition, to_spark(having.this))
        return Project(result, tuple(outputs), tuple(expressions))

    def _join_kind(self, join: exp.Join) -> JoinKind:
        side = str(join.args.get("side") or "").upper()
        kind = str(join.args.get("kind") or "").upper()
        if kind in ("SEMI", "ANTI") and side in ("", "LEFT"):
            return JoinKind.SEMI if kind == "SEMI" else JoinKind.ANTI
        if side in ("LEFT", "RIGHT", "FULL") and kind in ("", "OUTER"):
            return JoinKind(side.lower())
        if side:
            raise self._unsupported(f"{side} {kind} JOIN")
        if kind in ("", "INNER"):
            if join.args.get("on") is None:
                return JoinKind.CROSS
            return JoinKind.INNER
        if kind == "CROSS":
            return JoinKind.CROSS
        raise self._unsupported(f"{kind} JOIN")

    # -- FROM items ---------------------------------------------------------------------------

    def _source(self, item: exp.Expression, ctes: dict[str, exp.Expression]) -> _Source:
        if isinstance(item, exp.Subquery):  # without an alias, its columns go by name only
            alias = (item.alias or f"_subquery{next(self._ids)}").lower()
            return _Source(alias, self._renamed(self.query(item.this, ctes)))
        if not isinstance(item, exp.Table):
            raise self._unsupported(type(item).__name__.upper())
        if item.args.get("when") or item.args.get("changes") or item.args.get("db"):
            raise self._unsupported("time travel or CHANGES inside a view")
        name = item.name.lower()
        alias = (item.alias or item.name).lower()
        if name in ctes:
            earlier = {k: v for k, v in ctes.items() if k != name}
            return _Source(alias, self._renamed(self.query(ctes[name], earlier)))
        found = self.catalog.table(name)
        if found is not None:
            info, columns = found
            cols = tuple(self._col(c) for c in columns)
            return _Source(alias, Scan(info.name, info.table_id, alias, columns, cols))
        if self.catalog.view_sql(name) is not None:
            return _Source(alias, self._renamed(self.view(name)))
        raise TableNotFoundError(
            f"Table or view {item.name!r} in {self.about} does not exist."
            f"{did_you_mean(name, self.catalog.names())}"
        )

    def _renamed(self, node: Node) -> Node:
        """``node`` under fresh internal names, so a subquery or view read twice stays unique."""
        outputs = tuple(self._col(c.name) for c in node.columns)
        return Project(node, outputs, tuple(f"`{c.id}`" for c in node.columns))

    def _col(self, name: str) -> Col:
        return Col(f"_v{next(self._ids)}", name)

    # -- expressions --------------------------------------------------------------------------

    def _select_item(
        self, item: exp.Expression, sources: list[_Source], bound: frozenset[str] = frozenset()
    ) -> list[tuple[Col, str]]:
        if isinstance(item, exp.Star):
            return [(self._col(c.name), f"`{c.id}`") for s in sources for c in s.node.columns]
        if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            source = self._find_source(item.table, sources)
            return [(self._col(c.name), f"`{c.id}`") for c in source.node.columns]
        name = item.alias_or_name or to_spark(item)
        return [(self._col(name), self._expression(item.unalias(), sources, bound=bound))]

    def _expression(
        self,
        tree: exp.Expression,
        sources: list[_Source],
        *,
        aggregates: bool = False,
        window: bool = False,
        outer: list[_Source] | None = None,
        bound: frozenset[str] = frozenset(),
    ) -> str:
        """``tree`` as Spark SQL over internal column names; a column not found in ``sources``
        is looked up in ``outer`` (the enclosing query of a correlated subquery); ``bound``
        columns are internal names already. ``window``: ``tree`` is one window call."""
        for node in tree.walk():
            if isinstance(node, exp.Subquery | exp.Select | exp.Exists):
                raise self._unsupported(
                    "a subquery in an expression", "IN and EXISTS work as top-level WHERE conjuncts"
                )
            if isinstance(node, exp.Window) and not (window and node is tree):
                raise self._unsupported(f"the window function {to_spark(node)} here")
            if isinstance(node, exp.AggFunc) and not aggregates:
                raise InvalidStatementError(
                    f"{self.about}: the aggregate {to_spark(node)} is not allowed here."
                )
            name = function_name(node)
            if name in NONDETERMINISTIC:
                raise InvalidStatementError(
                    f"{self.about} uses {name}(), which is not deterministic, so its changes"
                    " cannot be computed; remove it from the view."
                )

        def resolve(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and not node.table and node.name in bound:
                return node
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                col = self._resolve(node, sources, outer or [])
                return exp.column(exp.to_identifier(col.id, quoted=True))
            return node

        return to_spark(tree.copy().transform(resolve))

    def _find_source(self, table: str, sources: list[_Source]) -> _Source:
        for source in sources:
            if source.alias == table.lower():
                return source
        raise InvalidStatementError(
            f"{table!r} in {self.about} is not a table in its FROM clause"
            f"{did_you_mean(table, [s.alias for s in sources])}"
        )

    def _resolve(self, column: exp.Column, sources: list[_Source], outer: list[_Source]) -> Col:
        if outer and not self._visible(column, sources):
            return self._resolve(column, outer, [])
        name = column.name.lower()
        scope = [self._find_source(column.table, sources)] if column.table else sources
        found = [c for s in scope for c in s.node.columns if c.name.lower() == name]
        if not found:
            known = [c.name for s in scope for c in s.node.columns]
            raise ColumnNotFoundError(
                f"Column {column.sql()!r} in {self.about} does not exist.{did_you_mean(name, known)}"
            )
        if len(found) > 1:
            raise InvalidStatementError(
                f"Column {column.name!r} in {self.about} is ambiguous: qualify it with its table."
            )
        return found[0]

    @staticmethod
    def _visible(column: exp.Column, sources: list[_Source]) -> bool:
        if column.table:
            return any(s.alias == column.table.lower() for s in sources)
        name = column.name.lower()
        return any(c.name.lower() == name for s in sources for c in s.node.columns)

    def _unsupported(self, what: str, hint: str = "") -> UnsupportedError:
        how = f"; {hint}" if hint else ""
        return UnsupportedError(
            f"{self.about}: changes of a view using {what} cannot be computed yet (supported:"
            " projections, filters, inner, outer, cross, semi and anti joins, UNION [ALL],"
            f" GROUP BY, DISTINCT, window functions, QUALIFY, views and CTEs){how}."
        )

"""What a query's reference to a table implies about the rows it can read: the conjuncts of
the filters of its SELECT that name only that table's columns.

A reference reads only rows that satisfy every such conjunct (a WHERE conjunct, or an inner
join's ON conjunct, on that table alone), so an external table that holds the rows of the OR of
its dependents' predicates gives each dependent every row it can see. A reference on the
null-supplying side of an outer join implies nothing (a missing row would turn into NULLs that
a later filter may keep), nor does a conjunct with a subquery, an aggregate, a window, a
non-deterministic function or a column of another table. Predicates are sets of conjuncts
(Spark SQL text over unqualified column names); the empty set is TRUE. Whether one implies a
scope is decided on their normal forms (``plan.implication``), by the table's column types.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlglot import exp

from changelake.dialect import parse_one, to_spark
from changelake.errors import ExternalTableError
from changelake.plan import implication
from changelake.plan.implication import Types

Predicate = frozenset[str]  # conjuncts, ANDed; empty: TRUE
TRUE: Predicate = frozenset()
_VOLATILE = ("rand", "random", "randn", "uuid", "current_timestamp", "now", "current_date")


def reference_predicate(table: exp.Table, columns: Iterable[str]) -> Predicate:
    """The predicate every row ``table`` (a reference in a parsed query) reads satisfies."""
    select = table.find_ancestor(exp.Select)
    if select is None or _null_supplying(table):
        return TRUE
    names = {c.lower() for c in columns}
    alias = (table.alias_or_name or table.name).lower()
    single = _single_source(select, table)
    conjuncts: list[exp.Expression] = []
    where = select.args.get("where")
    if where is not None:
        conjuncts += _split(where.this)
    for join in select.args.get("joins") or ():
        if _inner(join) and join.args.get("on") is not None:
            conjuncts += _split(join.args["on"])
    found = set()
    for conjunct in conjuncts:
        text = _own(conjunct, alias, names, single)
        if text is not None:
            found.add(text)
    return frozenset(found)


def check_scope(
    table: str, scope: str | None, predicate: Predicate, *, types: Types, at: str = ""
) -> None:
    """Refuse a query whose filters on external table ``table`` (``predicate``) do not keep it
    within the rows the table holds (``scope``, SCOPE = DEPENDENTS; ``at``: the version read, in
    words, when it is not the current one)."""
    if implies(predicate, parse_scope(scope), types=types):
        return
    held = f"holds only the rows its dependents read{at}"
    raise ExternalTableError(
        f"External table {table} {held} (SCOPE = DEPENDENTS): {scope}. This query's filters on"
        f" it ({' AND '.join(sorted(predicate)) or 'none'}) do not keep it within that scope,"
        " so its answer would miss rows. Filter by one of the scope's conditions (or a"
        " narrower condition on the same column: see README, SCOPE = DEPENDENTS), make the"
        " query a view or dynamic table (which widens the scope), or CREATE OR REPLACE"
        f" EXTERNAL TABLE {table} … SCOPE = ALL."
    )


def implies(predicate: Predicate, scope: Sequence[Predicate] | None, *, types: Types) -> bool:
    """Whether every row satisfying ``predicate`` lies in ``scope`` (an OR of predicates; None:
    every row), for a table whose columns have ``types``: soundly, not completely (False may
    mean it cannot tell; see ``plan.implication``)."""
    if scope is None:
        return True
    either = implication.normal_form(sorted(predicate), types)
    every = [implication.normal_form(sorted(d), types) for d in scope]
    if any(d is None for d in every):
        return False
    terms = tuple(t for d in every if d is not None for t in d)
    return implication.implies(either, terms)


def scope_sql(scope: tuple[Predicate, ...] | None) -> str | None:
    """An OR of predicates as Spark SQL (None: every row; no disjunct: FALSE)."""
    if scope is None:
        return None
    if not scope:
        return "FALSE"
    return " OR ".join(
        "(" + (" AND ".join(f"({c})" for c in sorted(d)) or "TRUE") + ")" for d in _sorted(scope)
    )


def parse_scope(text: str | None) -> tuple[Predicate, ...] | None:
    """The inverse of ``scope_sql``."""
    if text is None:
        return None
    tree = parse_one(f"SELECT 1 WHERE {text}").args["where"].this
    if isinstance(tree, exp.Boolean) and not tree.this:
        return ()
    return tuple(frozenset(_text(c) for c in _split(d, exp.And)) for d in _split(tree, exp.Or))


def union(predicates: Iterable[Predicate], *, types: Types) -> tuple[Predicate, ...] | None:
    """The OR of ``predicates`` without repeated disjuncts or disjuncts another implies (of two
    that imply each other, the first in order is kept); None: TRUE."""
    found: list[Predicate] = []
    for p in predicates:
        if not p:
            return None
        found.append(p)
    ordered = _sorted(set(found))
    kept = [
        p
        for i, p in enumerate(ordered)
        if not any(
            implies(p, (q,), types=types) and (j < i or not implies(q, (p,), types=types))
            for j, q in enumerate(ordered)
            if j != i
        )
    ]
    return tuple(kept)


def _sorted(scope: Iterable[Predicate]) -> list[Predicate]:
    return sorted(scope, key=lambda d: sorted(d))


def _split(node: exp.Expression, kind: type = exp.And) -> list[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, kind):
        return _split(node.left, kind) + _split(node.right, kind)
    return [node]


def _text(node: exp.Expression) -> str:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Boolean) and node.this:
        return ""
    return to_spark(node)


def _own(conjunct: exp.Expression, alias: str, names: set[str], single: bool) -> str | None:
    """The conjunct over unqualified columns, if it reads only this table's columns and is a
    plain deterministic row predicate."""
    if conjunct.find(exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Placeholder):
        return None
    for f in conjunct.find_all(exp.Func):
        name = (f.sql_name() if not isinstance(f, exp.Anonymous) else f.name).lower()
        if name in _VOLATILE:
            return None
    columns = list(conjunct.find_all(exp.Column))
    if not columns:
        return None
    copy = conjunct.copy()
    for column in copy.find_all(exp.Column):
        qualifier = column.table.lower()
        if column.name.lower() not in names:
            return None
        if (qualifier and qualifier != alias) or (not qualifier and not single):
            return None
        column.set("table", None)
        column.set("db", None)
        column.set("catalog", None)
    text = _text(copy)
    return text or None


def _single_source(select: exp.Select, table: exp.Table) -> bool:
    sources = [s for s in (select.args.get("from_"),) if s is not None]
    return not select.args.get("joins") and bool(sources) and sources[0].this is table


def _inner(join: exp.Join) -> bool:
    side = (join.side or "").upper()
    kind = (join.kind or "").upper()
    return not side and kind in ("", "INNER", "CROSS")


def _null_supplying(table: exp.Table) -> bool:
    """Whether ``table`` is on a side of an outer join that may be padded with NULLs."""
    node: exp.Expression = table
    while node.parent is not None and not isinstance(node.parent, exp.Select):
        node = node.parent
    select = node.parent
    if select is None:
        return False
    joins = select.args.get("joins") or []
    sides = [(j.side or "").upper() for j in joins]
    if isinstance(node, exp.Join):
        side = (node.side or "").upper()
        if side in ("LEFT", "FULL"):
            return True
        later = sides[joins.index(node) + 1 :]
        return any(s in ("RIGHT", "FULL") for s in later)
    # in FROM: padded by a later RIGHT or FULL join
    return any(s in ("RIGHT", "FULL") for s in sides)

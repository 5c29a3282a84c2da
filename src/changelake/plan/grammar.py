"""What SQL a view may use to have a derivative: the functions and clauses refused, and
questions about expressions the builder asks."""

from __future__ import annotations

from sqlglot import exp

# Functions whose value differs between evaluations: a view using one has no derivative.
NONDETERMINISTIC = {
    "RAND",
    "RANDN",
    "RANDOM",
    "UUID",
    "SHUFFLE",
    "CURRENT_TIMESTAMP",
    "CURRENT_DATE",
    "NOW",
    "CURRENT_TIME",
    "MONOTONICALLY_INCREASING_ID",
    "SPARK_PARTITION_ID",
    "INPUT_FILE_NAME",
}
REFUSED_CLAUSES = {
    "limit": "LIMIT",
    "offset": "OFFSET",
    "order": "ORDER BY",
    "windows": "WINDOW",
    "laterals": "LATERAL VIEW",
}


def refused_clause(select: exp.Select) -> str | None:
    """The first clause of ``select`` a view with a derivative cannot use, as the user knows it."""
    if select.args.get("order") and select.args.get("limit"):
        return "ORDER BY … LIMIT (top-N)"
    return next((name for key, name in REFUSED_CLAUSES.items() if select.args.get(key)), None)


def aggregates(items: list[exp.Expression]) -> bool:
    """Whether the select list aggregates (a call outside any OVER clause)."""
    return any(
        isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Window) is None
        for item in items
        for n in item.walk()
    )


def function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    if isinstance(node, exp.Func) and not isinstance(node, exp.Cast):
        return node.sql_name().upper()
    return ""


def names_read(tree: exp.Expression) -> tuple[str, ...]:
    """The tables and views a query names (not its CTEs), lower case, sorted."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = {t.name.lower() for t in tree.find_all(exp.Table) if t.name}
    return tuple(sorted(names - ctes))

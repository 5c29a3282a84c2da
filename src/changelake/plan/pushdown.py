"""Filter pushdown for file pruning: the simple comparisons of a WHERE clause that concern one
table, as ``Comparison`` values the storage layer checks against per-file statistics."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from changelake.storage.pruning import Comparison


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

"""Whether every row one predicate keeps is kept by another: ``filter ⇒ scope``, decided soundly
(an answer of True is always right) but not completely (False may mean "cannot tell").

Both sides are put in a normal form: an OR of terms (at most ``MAX_TERMS``; a larger one is not
decided), each term an AND of one-column constraints (the values a column may hold, NULL or
not: ``ranges.Allowed``) and opaque conditions (anything else, as normalized SQL text, so that
``a = b`` and ``b = a`` agree). NOT is pushed down to the atoms first, as SQL's three-valued
logic allows (De Morgan; ``NOT x > 5`` is ``x <= 5``: neither is TRUE on NULL).

A filter implies a scope when each of its terms implies some term of the scope; a term implies
another when it is unsatisfiable, or when for every column the other constrains its own
constraint (the intersection of its atoms on that column) allows no more, and it has every
opaque condition of the other. A column's comparison with a constant is a constraint only when
the constant's kind matches the column's type (numbers exactly, strings, dates): a cast, a
function or a mixed type leaves it opaque.

>>> types = {"amount": "int", "region": "string"}
>>> scope = normal_form(["amount > 900 OR region = 'EU'"], types)
>>> implies(normal_form(["'EU' = region OR amount >= 2000"], types), scope)
True
>>> implies(normal_form(["amount >= 900"], types), scope)
False
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from sqlglot import exp

from changelake.dialect import parse_one, to_spark
from changelake.plan.ranges import Allowed, Interval

MAX_TERMS = 64
Types = Mapping[str, str]  # column name (lower case) -> its changelake type


@dataclass(frozen=True)
class Term:
    """An AND of constraints: each column's allowed values (sorted by column) and opaque
    conditions (normalized Spark SQL)."""

    columns: tuple[tuple[str, Allowed], ...] = ()
    opaque: frozenset[str] = frozenset()

    @property
    def unsatisfiable(self) -> bool:
        return any(a.empty for _, a in self.columns)

    def meet(self, other: Term) -> Term:
        merged = dict(self.columns)
        for column, allowed in other.columns:
            merged[column] = merged[column].meet(allowed) if column in merged else allowed
        return Term(tuple(sorted(merged.items(), key=lambda c: c[0])), self.opaque | other.opaque)

    def implies(self, other: Term) -> bool:
        if self.unsatisfiable:
            return True
        mine = dict(self.columns)
        for column, allowed in other.columns:
            if column not in mine or not mine[column].within(allowed):
                return False
        return other.opaque <= self.opaque

    def pieces(self) -> tuple[Term, ...]:
        """This term as an OR of terms in which each column allows one interval, or NULL alone
        (so that ``x IN (1, 2)`` implies ``x = 1 OR x = 2``); itself past the bound."""
        found = [Term(opaque=self.opaque)]
        for column, allowed in self.columns:
            parts = [Allowed((i,), null=False) for i in allowed.intervals]
            parts += [Allowed.ONLY_NULL] if allowed.null else []
            if len(found) * len(parts) > MAX_TERMS:
                return (self,)
            found = [t.meet(Term(columns=((column, p),))) for t in found for p in parts]
        return tuple(found)


Dnf = tuple[Term, ...]  # OR of terms; () is FALSE


class _TooLarge(Exception):
    pass


def normal_form(conjuncts: Iterable[str], types: Types) -> Dnf | None:
    """The AND of ``conjuncts`` (Spark SQL; "" is TRUE) in normal form; None past the bound."""
    try:
        found: list[Term] = [Term()]
        for text in conjuncts:
            if text:
                tree = parse_one(f"SELECT 1 WHERE {text}").args["where"].this
                found = _and(found, _dnf(tree, False, types))
        return tuple(found)
    except _TooLarge:
        return None


def implies(predicate: Dnf | None, scope: Dnf | None) -> bool:
    """Whether each term of ``predicate`` (each of its pieces) implies some term of ``scope``
    (None: a normal form past the bound, which implies nothing and is implied by nothing)."""
    if predicate is None or scope is None:
        return False
    return all(any(p.implies(s) for s in scope) for f in predicate for p in f.pieces())


def _and(left: list[Term], right: list[Term]) -> list[Term]:
    if len(left) * len(right) > MAX_TERMS:
        raise _TooLarge
    met = (a.meet(b) for a in left for b in right)
    return [t for t in met if not t.unsatisfiable]


def _dnf(node: exp.Expression, negated: bool, types: Types) -> list[Term]:
    """``node`` (NOT ``node`` if ``negated``) as an OR of terms."""
    if isinstance(node, exp.Paren):
        return _dnf(node.this, negated, types)
    if isinstance(node, exp.Not):
        return _dnf(node.this, not negated, types)
    if isinstance(node, exp.And | exp.Or):
        left, right = _dnf(node.left, negated, types), _dnf(node.right, negated, types)
        if isinstance(node, exp.And) != negated:
            return _and(left, right)
        if len(left) + len(right) > MAX_TERMS:
            raise _TooLarge
        return left + right
    if isinstance(node, exp.Boolean):
        return [Term()] if bool(node.this) != negated else []
    found = _constraint(node, negated, types)
    if found is not None:
        column, allowed = found
        return [Term(columns=((column, allowed),))] if not allowed.empty else []
    text = _canonical(node)
    return [Term(opaque=frozenset({f"NOT ({text})" if negated else text}))]


# -- one column against constants -------------------------------------------------------------

_FLIP = {exp.GT: "<", exp.GTE: "<=", exp.LT: ">", exp.LTE: ">=", exp.EQ: "=", exp.NEQ: "<>"}
_OP = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.EQ: "=", exp.NEQ: "<>"}
_NOT = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "=": "<>", "<>": "="}


def _constraint(node: exp.Expression, negated: bool, types: Types) -> tuple[str, Allowed] | None:
    """The column ``node`` constrains and the values it is TRUE for, if it is one column's
    comparison with constants of the column's kind."""
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        column = _column(node.this, types)
        if column is None:
            return None
        return column, Allowed.NOT_NULL if negated else Allowed.ONLY_NULL
    if type(node) in _OP:
        op, column, value = _OP[type(node)], _column(node.this, types), node.expression
        if column is None:
            op, column, value = _FLIP[type(node)], _column(node.expression, types), node.this
        parsed = _value(value, types, column)
        if column is None or parsed is None:
            return None
        return column, Allowed.compare(_NOT[op] if negated else op, parsed)
    if isinstance(node, exp.Between):
        column = _column(node.this, types)
        low, high = (
            _value(node.args.get("low"), types, column),
            _value(node.args.get("high"), types, column),
        )
        if column is None or low is None or high is None:
            return None
        inside = Allowed((Interval(low, True, high, True),), null=False)
        return column, inside.complement() if negated else inside
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        column = _column(node.this, types)
        values = [_value(v, types, column) for v in node.expressions]
        if column is None or not values or any(v is None for v in values):
            return None
        members = Allowed.members(tuple(values))
        return column, members.complement() if negated else members
    return None


def _column(node: exp.Expression, types: Types) -> str | None:
    """The name of the column ``node`` is, if its type is one constraints are kept for."""
    if not isinstance(node, exp.Column) or node.table:
        return None
    name = node.name.lower()
    return name if _kind(types.get(name, "")) is not None else None


def _kind(type_: str) -> Callable[[exp.Expression], Any] | None:
    t = type_.strip().lower()
    if t in ("tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"):
        return _exact
    if t.startswith(("decimal", "numeric")):
        return _exact
    if t == "double":
        return _double
    if t in ("float", "real"):
        return _float
    if t == "string" or t.startswith("varchar"):
        return _string
    if t == "date":
        return _date
    return None


def _value(node: exp.Expression | None, types: Types, column: str | None) -> Any:
    """The constant ``node`` as a value of ``column``'s kind; None if it is not one."""
    if node is None or column is None:
        return None
    while isinstance(node, exp.Paren):
        node = node.this
    parse = _kind(types[column])
    return None if parse is None else parse(node)


_NUMBER = re.compile(r"\d+(\.\d*)?|\.\d+")


def _exact(node: exp.Expression) -> Fraction | None:
    """A decimal literal, exactly (a column of an exact type is compared with it exactly)."""
    sign = 1
    if isinstance(node, exp.Neg):
        sign, node = -1, node.this
    if not isinstance(node, exp.Literal) or node.is_string or not _NUMBER.fullmatch(node.this):
        return None
    try:
        return sign * Fraction(Decimal(node.this))
    except InvalidOperation:
        return None


def _double(node: exp.Expression) -> Fraction | None:
    """A literal a DOUBLE column is compared with, only if a double holds it exactly (rounding
    could make two different literals equal)."""
    value = _exact(node)
    return value if value is not None and Fraction(float(value)) == value else None


def _float(node: exp.Expression) -> Fraction | None:
    value = _exact(node)
    if value is None or Fraction(float(value)) != value:
        return None
    single = struct.unpack("f", struct.pack("f", float(value)))[0]
    return value if Fraction(single) == value else None


def _string(node: exp.Expression) -> str | None:
    return node.this if isinstance(node, exp.Literal) and node.is_string else None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _date(node: exp.Expression) -> dt.date | None:
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE):
        node = node.this
    text = _string(node)
    if text is None or not _DATE.fullmatch(text):
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


# -- opaque conditions ------------------------------------------------------------------------

_COMMUTES = (exp.EQ, exp.NEQ, exp.NullSafeEQ)


def _canonical(node: exp.Expression) -> str:
    """``node`` as Spark SQL in one spelling: column names in lower case (Spark's are case
    insensitive), a commuting comparison's operands in order, a constant compared on the
    right."""

    def lower(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            return exp.column(n.name.lower(), table=n.table.lower() or None, quoted=True)
        return n

    def order(n: exp.Expression) -> exp.Expression:
        if isinstance(n, _COMMUTES):
            left, right = sorted((n.this, n.expression), key=to_spark)
            return type(n)(this=left, expression=right)
        if type(n) in _FLIP and _constant(n.this) and not _constant(n.expression):
            flipped = {"<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE}[_FLIP[type(n)]]
            return flipped(this=n.expression, expression=n.this)
        return n

    return to_spark(node.copy().transform(lower).transform(order))


def _constant(node: exp.Expression) -> bool:
    return not any(True for _ in node.find_all(exp.Column))

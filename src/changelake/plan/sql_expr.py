"""SQL expressions composed like PySpark columns, as text: no call into the JVM per step.

A plan's expressions built with ``pyspark.sql.functions`` cost a py4j round trip per function and
operator (an aggregate's state and its combination are hundreds). ``Expr`` has the operators and
the few functions such code uses and yields SQL text for a relation's ``select`` (``alias``), which
Spark analyses once with the rest of the statement's plan.

>>> x = col("a")
>>> when(x > 0, x + 1).otherwise(lit(0)).alias("b")
'CASE WHEN (`a` > 0) THEN (`a` + 1) ELSE 0 END AS `b`'
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import DataType

from changelake.schema import quoted
from changelake.spark.local import sql_literal


class Expr:
    """A SQL expression (``sql``); its operators build larger ones."""

    __slots__ = ("sql",)
    __hash__ = None  # type: ignore[assignment]  # == builds an expression, as Column's does

    def __init__(self, sql: str):
        self.sql = sql

    def __repr__(self) -> str:
        return f"Expr({self.sql!r})"

    def _binary(self, op: str, other: Any) -> Expr:
        return Expr(f"({self.sql} {op} {_sql(other)})")

    def __add__(self, other: Any) -> Expr:
        return self._binary("+", other)

    def __sub__(self, other: Any) -> Expr:
        return self._binary("-", other)

    def __mul__(self, other: Any) -> Expr:
        return self._binary("*", other)

    def __rmul__(self, other: Any) -> Expr:
        return Expr(f"({_sql(other)} * {self.sql})")

    def __truediv__(self, other: Any) -> Expr:
        return self._binary("/", other)

    def __neg__(self) -> Expr:
        return Expr(f"(- {self.sql})")

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._binary("=", other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._binary("!=", other)

    def __gt__(self, other: Any) -> Expr:
        return self._binary(">", other)

    def __ge__(self, other: Any) -> Expr:
        return self._binary(">=", other)

    def __lt__(self, other: Any) -> Expr:
        return self._binary("<", other)

    def __le__(self, other: Any) -> Expr:
        return self._binary("<=", other)

    def __and__(self, other: Any) -> Expr:
        return self._binary("AND", other)

    def __or__(self, other: Any) -> Expr:
        return self._binary("OR", other)

    def __invert__(self) -> Expr:
        return Expr(f"(NOT {self.sql})")

    def isNull(self) -> Expr:  # noqa: N802 - as PySpark's Column names it
        return Expr(f"({self.sql} IS NULL)")

    def isNotNull(self) -> Expr:  # noqa: N802 - as PySpark's Column names it
        return Expr(f"({self.sql} IS NOT NULL)")

    def eqNullSafe(self, other: Any) -> Expr:  # noqa: N802 - as PySpark's Column names it
        return self._binary("<=>", other)

    def cast(self, to: str | DataType) -> Expr:
        type_ = to.simpleString() if isinstance(to, DataType) else to
        return Expr(f"CAST({self.sql} AS {type_})")

    def alias(self, name: str) -> str:
        """The select item ``expression AS name``."""
        return f"{self.sql} AS {quoted(name)}"


class When(Expr):
    """``CASE WHEN ...`` without its ELSE yet (NULL if never given)."""

    __slots__ = ("_branches",)

    def __init__(self, branches: tuple[tuple[str, str], ...]):
        self._branches = branches
        super().__init__(self._case(None))

    def _case(self, default: str | None) -> str:
        whens = " ".join(f"WHEN {c} THEN {v}" for c, v in self._branches)
        rest = "" if default is None else f" ELSE {default}"
        return f"CASE {whens}{rest} END"

    def when(self, condition: Any, value: Any) -> When:
        return When((*self._branches, (_sql(condition), _sql(value))))

    def otherwise(self, value: Any) -> Expr:
        return Expr(self._case(_sql(value)))


def _sql(value: Any) -> str:
    return value.sql if isinstance(value, Expr) else sql_literal(value)


def col(name: str) -> Expr:
    return Expr(quoted(name))


def lit(value: Any) -> Expr:
    return Expr(sql_literal(value))


def expr(text: str) -> Expr:
    """SQL text as an expression."""
    return Expr(f"({text})")


def when(condition: Any, value: Any) -> When:
    return When(((_sql(condition), _sql(value)),))


def _call(name: str, *args: Any) -> Expr:
    return Expr(f"{name}({', '.join(_sql(a) for a in args)})")


def coalesce(*values: Any) -> Expr:
    return _call("coalesce", *values)


def least(*values: Any) -> Expr:
    return _call("least", *values)


def greatest(*values: Any) -> Expr:
    return _call("greatest", *values)


def abs(value: Any) -> Expr:  # noqa: A001 - as PySpark's functions name it
    return _call("abs", value)


def sum(value: Any) -> Expr:  # noqa: A001 - as PySpark's functions name it
    return _call("sum", value)


def count(value: Any) -> Expr:
    return _call("count", value)


def min(value: Any) -> Expr:  # noqa: A001 - as PySpark's functions name it
    return _call("min", value)


def max(value: Any) -> Expr:  # noqa: A001 - as PySpark's functions name it
    return _call("max", value)


def struct(*items: str) -> Expr:
    """``struct(items)``: select items (``alias`` text), named fields."""
    return Expr(f"struct({', '.join(items)})")

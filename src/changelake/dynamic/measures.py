"""The aggregates a dynamic table maintains from stored state instead of regrouping its input.

A query that is one Aggregate (under projections only) whose calls are all COUNT(*), COUNT(x),
COUNT_IF(p), SUM(x), AVG(x), MIN(x), MAX(x), BOOL_AND(x) or BOOL_OR(x) keeps per group, in hidden
state columns after its visible ones: ``_cl_n`` (the group's input rows) and per call ``i``
``_cl_a<i>_c`` (its non-NULL inputs; COUNT_IF: its true ones), ``_cl_a<i>_s`` (SUM, AVG: their
sum), ``_cl_a<i>_t`` (BOOL_AND, BOOL_OR: the true ones), ``_cl_a<i>_m`` (MIN, MAX: the extreme)
and, for a floating-point SUM or AVG, ``_cl_a<i>_a`` (the sum of its inputs' magnitudes) and
``_cl_a<i>_h`` (that of every input added or removed since the group was last computed from its
rows).

A refresh adds the signed partial sums of the input's changes to the stored state: exact for
counts, integers and DECIMAL. MIN and MAX combine with inserted values; a group that lost a value
at (or beyond) its extreme, and gained none at or beyond it, is recomputed from its rows. So is a floating-point sum whose history
of magnitudes outgrew ``DRIFT`` times its current inputs': the rounding error of a sum maintained
by additions grows with what was added and removed (about ε per unit of ``_h``), and a recompute
bounds it again by what the group holds, as a recompute's own error is (ε per unit of ``_a``).

>>> from changelake.plan.ir import Col, Scan
>>> t = Scan("t", 1, "t", ("k", "v"), (Col("_v0", "k"), Col("_v1", "v")))
>>> g = Aggregate(t, (Col("_v2", "k"),), ("`_v0`",), (Col("_v3", "_agg0"),), ("SUM(`_v1`)",))
>>> [(m.kind.name, m.argument) for m in shape_of(Project(g, (), ())).measures]
[('SUM', '`_v1`')]
>>> shape_of(Aggregate(t, (), (), (Col("_v4", "_agg0"),), ("COUNT(DISTINCT `_v1`)",))) is None
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NumericType,
    ShortType,
    StructType,
)
from sqlglot import exp

from changelake.dialect import parse_one, to_spark
from changelake.plan import sql_expr as S
from changelake.plan.compile import VIEW_ACTION
from changelake.plan.ir import Aggregate, Col, Node, Project

ROWS = "_cl_n"
DRIFT = 2.0**16  # history of magnitudes / current magnitudes that forces a recompute


class Kind(Enum):
    ROWS = "COUNT(*)"
    COUNT = "COUNT"
    COUNT_IF = "COUNT_IF"
    SUM = "SUM"
    AVG = "AVG"
    MIN = "MIN"
    MAX = "MAX"
    BOOL_AND = "BOOL_AND"
    BOOL_OR = "BOOL_OR"


_CALLS = {
    exp.Sum: Kind.SUM,
    exp.Avg: Kind.AVG,
    exp.Min: Kind.MIN,
    exp.Max: Kind.MAX,
    exp.CountIf: Kind.COUNT_IF,
    exp.LogicalAnd: Kind.BOOL_AND,
    exp.LogicalOr: Kind.BOOL_OR,
}
# the state columns of each kind, after ``_cl_a<i>_``
_PARTS = {
    Kind.ROWS: (),
    Kind.COUNT: ("c",),
    Kind.COUNT_IF: ("c",),
    Kind.SUM: ("c", "s"),
    Kind.AVG: ("c", "s"),
    Kind.MIN: ("c", "m"),
    Kind.MAX: ("c", "m"),
    Kind.BOOL_AND: ("c", "t"),
    Kind.BOOL_OR: ("c", "t"),
}


@dataclass(frozen=True)
class Measure:
    """Aggregate call ``index`` of the query: ``kind`` of ``argument`` (Spark SQL over the
    aggregate's input columns; None for COUNT(*)), computing ``column``."""

    index: int
    kind: Kind
    argument: str | None
    column: Col


@dataclass(frozen=True)
class Shape:
    """A query maintainable from state: ``aggregate`` under ``projects`` (innermost first)."""

    aggregate: Aggregate
    projects: tuple[Project, ...]
    measures: tuple[Measure, ...]


def shape_of(tree: Node) -> Shape | None:
    """The maintainable shape of a query's IR, or None (HAVING, DISTINCT calls, FILTER, other
    aggregate functions, anything above the aggregate but projections)."""
    projects: list[Project] = []
    while isinstance(tree, Project):
        projects.append(tree)
        tree = tree.child
    if not isinstance(tree, Aggregate):
        return None
    measures = []
    for i, (col, text) in enumerate(zip(tree.values, tree.value_expressions, strict=True)):
        found = _measure(i, col, text)
        if found is None:
            return None
        measures.append(found)
    return Shape(tree, tuple(reversed(projects)), tuple(measures))


def _measure(index: int, column: Col, text: str) -> Measure | None:
    call = parse_one(f"SELECT {text}").expressions[0]
    if isinstance(call, exp.Count):
        if call.expressions or isinstance(call.this, exp.Distinct):
            return None
        if isinstance(call.this, exp.Star):
            return Measure(index, Kind.ROWS, None, column)
        return Measure(index, Kind.COUNT, to_spark(call.this), column)
    kind = _CALLS.get(type(call))
    if kind is None or call.args.get("expressions") or isinstance(call.this, exp.Distinct):
        return None
    return Measure(index, kind, to_spark(call.this), column)


def holds_extremes(state: Iterable[str]) -> bool:
    """Whether state columns ``state`` keep a MIN or MAX (``_m``): a group whose extreme's row
    is deleted is recomputed from its input rows."""
    return any(n.endswith("_m") for n in state)


def state_names(shape: Shape, types: dict[int, DataType]) -> list[str]:
    """The state columns of ``shape`` whose arguments have ``types`` (by measure index)."""
    names = [ROWS]
    for m in shape.measures:
        parts = _PARTS[m.kind] + (("a", "h") if _floating(m, types) else ())
        names += [f"_cl_a{m.index}_{p}" for p in parts]
    return names


def refusal(shape: Shape, types: dict[int, DataType]) -> str | None:
    """Why an argument's type keeps ``shape`` from being maintained, or None."""
    for m in shape.measures:
        t = types.get(m.index)
        if m.kind in (Kind.SUM, Kind.AVG) and not isinstance(t, NumericType):
            return f"{m.kind.value} of {t}"
        if m.kind in (Kind.BOOL_AND, Kind.BOOL_OR, Kind.COUNT_IF) and not isinstance(
            t, BooleanType
        ):
            return f"{m.kind.value} of {t}"
        if m.kind in (Kind.MIN, Kind.MAX) and isinstance(t, ArrayType | MapType | StructType):
            return f"{m.kind.value} of {t}"
    return None


def _floating(m: Measure, types: dict[int, DataType]) -> bool:
    return m.kind in (Kind.SUM, Kind.AVG) and isinstance(types[m.index], FloatType | DoubleType)


def _arg(m: Measure) -> S.Expr:
    assert m.argument is not None
    return S.expr(m.argument)


def full_state(shape: Shape, types: dict[int, DataType]) -> list[str]:
    """The state columns as aggregates over a group's input rows."""
    out = [S.count(S.lit(1)).alias(ROWS)]
    for m in shape.measures:
        if m.kind is Kind.ROWS:
            continue
        x, name = _arg(m), f"_cl_a{m.index}_"
        trues = S.count(S.when(x, S.lit(1)))
        out.append((trues if m.kind is Kind.COUNT_IF else S.count(x)).alias(name + "c"))
        if m.kind in (Kind.SUM, Kind.AVG):
            out.append(S.sum(x).alias(name + "s"))
            if _floating(m, types):
                out += [S.sum(S.abs(x)).alias(name + "a"), S.sum(S.abs(x)).alias(name + "h")]
        elif m.kind in (Kind.MIN, Kind.MAX):
            extreme = S.min(x) if m.kind is Kind.MIN else S.max(x)
            out.append(extreme.alias(name + "m"))
        elif m.kind in (Kind.BOOL_AND, Kind.BOOL_OR):
            out.append(trues.alias(name + "t"))
    return out


def delta_state(shape: Shape, types: dict[int, DataType]) -> list[str]:
    """Aggregates over a group's signed input changes (``ACTION``): each state column's change
    as ``_d<name>``; MIN/MAX: the extreme inserted (``_d<name>``) and deleted (``_x<name>``)."""
    inserted = S.col(VIEW_ACTION) == "INSERT"
    sign = S.when(inserted, S.lit(1)).otherwise(S.lit(-1)).cast("bigint")
    out = [S.sum(sign).alias("_d" + ROWS)]
    for m in shape.measures:
        if m.kind is Kind.ROWS:
            continue
        x, name = _arg(m), f"_cl_a{m.index}_"
        counted = x if m.kind is Kind.COUNT_IF else x.isNotNull()
        out.append(S.sum(S.when(counted, sign).otherwise(0)).alias(f"_d{name}c"))
        if m.kind in (Kind.SUM, Kind.AVG):
            t = types[m.index]
            wide = x.cast("bigint") if isinstance(t, _INTEGRAL) else x  # -x must not overflow
            out.append(S.sum(S.when(inserted, wide).otherwise(-wide)).alias(f"_d{name}s"))
            if _floating(m, types):
                out.append(S.sum(sign * S.abs(x)).alias(f"_d{name}a"))
                out.append(S.sum(S.abs(x)).alias(f"_d{name}h"))
        elif m.kind in (Kind.MIN, Kind.MAX):
            pick = S.min if m.kind is Kind.MIN else S.max
            out.append(pick(S.when(inserted, x)).alias(f"_d{name}m"))
            out.append(pick(S.when(~inserted, x)).alias(f"_x{name}m"))
        elif m.kind in (Kind.BOOL_AND, Kind.BOOL_OR):
            out.append(S.sum(S.when(x, sign).otherwise(0)).alias(f"_d{name}t"))
    return out


_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True)
class Combined:
    """A group's state after a refresh (by state column), its aggregate values (by the
    aggregate's column ids), and whether it must be recomputed from its rows instead."""

    state: dict[str, S.Expr]
    values: dict[str, S.Expr]
    recompute: S.Expr


def combined(shape: Shape, types: dict[int, DataType], old: str) -> Combined:
    """Stored state (columns named ``old`` + state name; NULL for a new group) plus the
    changes of ``delta_state``."""

    def was(name: str) -> S.Expr:
        return S.coalesce(S.col(old + name), S.lit(0))

    def change(name: str) -> S.Expr:
        return S.coalesce(S.col("_d" + name), S.lit(0))

    n = was(ROWS) + change(ROWS)
    state, values = {ROWS: n}, {}
    recompute = S.lit(False)
    for m in shape.measures:
        if m.kind is Kind.ROWS:
            values[m.column.id] = n
            continue
        name = f"_cl_a{m.index}_"
        c = was(name + "c") + change(name + "c")
        state[name + "c"] = c
        some = c != 0
        if m.kind in (Kind.COUNT, Kind.COUNT_IF):
            values[m.column.id] = c
        elif m.kind in (Kind.SUM, Kind.AVG):
            s = S.when(some, was(name + "s") + change(name + "s"))
            state[name + "s"] = s
            values[m.column.id] = (
                s if m.kind is Kind.SUM else S.when(some, _average(s, c, m, types))
            )
            if _floating(m, types):
                a = S.when(some, was(name + "a") + change(name + "a"))
                h = S.when(some, was(name + "h") + change(name + "h"))
                state[name + "a"], state[name + "h"] = a, h
                recompute = recompute | S.coalesce(h > S.lit(float(DRIFT)) * a, S.lit(False))
        elif m.kind in (Kind.MIN, Kind.MAX):
            stored, deleted = S.col(old + name + "m"), S.col(f"_x{name}m")
            inserted = S.col(f"_d{name}m")
            combine = S.least if m.kind is Kind.MIN else S.greatest
            state[name + "m"] = S.when(some, combine(stored, inserted))
            beyond = deleted <= stored if m.kind is Kind.MIN else deleted >= stored
            # an inserted value at or beyond the old extreme is the new one, whatever went
            reached = inserted <= stored if m.kind is Kind.MIN else inserted >= stored
            lost = (
                deleted.isNotNull()
                & (stored.isNull() | beyond)
                & ~S.coalesce(reached, S.lit(False))
            )
            recompute = recompute | S.coalesce(lost, S.lit(True))
            values[m.column.id] = state[name + "m"]
        else:
            t = was(name + "t") + change(name + "t")
            state[name + "t"] = t
            values[m.column.id] = S.when(some, t == c if m.kind is Kind.BOOL_AND else t > 0)
    return Combined(state, values, recompute)


def _average(s: S.Expr, c: S.Expr, m: Measure, types: dict[int, DataType]) -> S.Expr:
    """AVG from its sum and count as Spark computes it: a DECIMAL sum divided by the count as
    DECIMAL(20,0) (then cast to AVG's type by the caller), else in DOUBLE."""
    if isinstance(types[m.index], DecimalType):
        return s / c.cast(DecimalType(20, 0))
    return s.cast(DoubleType()) / c.cast(DoubleType())


def describe(shape: Shape, names: dict[str, str]) -> list[str]:
    """What is maintained how, for EXPLAIN (``names``: internal column id -> name shown)."""

    def shown(text: str | None) -> str:
        text = text or "*"
        for col_id, name in names.items():
            text = text.replace(f"`{col_id}`", name)
        return text

    lines = ["group row count: stored state plus the changes' signed count"]
    for m in shape.measures:
        call = "COUNT(*)" if m.kind is Kind.ROWS else f"{m.kind.value}({shown(m.argument)})"
        if m.kind in (Kind.MIN, Kind.MAX):
            how = (
                "from state, combined with inserted values; a group whose stored extreme was"
                " deleted (or updated) is recomputed from its rows at the end"
            )
        elif m.kind in (Kind.SUM, Kind.AVG):
            how = "from state: stored sum and count plus the changes' signed sum and count"
        else:
            how = "from state: stored count plus the changes' signed count"
        lines.append(f"{call}: {how}")
    return lines

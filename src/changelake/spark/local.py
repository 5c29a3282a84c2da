"""Small driver-side tables (metadata: file lists, statement results) as Spark DataFrames.

They are built as SQL inline tables, i.e. local relations: joining or broadcasting them needs no
Spark job, unlike ``createDataFrame`` of a Python list, which goes through an RDD.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from changelake.schema import quoted
from changelake.spark.relation import Relation

# Up to this many rows, a lookup is inlined as expressions rather than joined.
INLINE_ROWS = 8


def sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L" if abs(value) >= 2**31 else str(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        return f"{value}BD"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _cast(value: Any, type_: str) -> str:
    return f"CAST({sql_literal(value)} AS {type_})"


def local_relation(rows: Sequence[Sequence[Any]], columns: Sequence[tuple[str, str]]) -> Relation:
    """A relation of ``rows`` with ``columns`` = [(name, Spark SQL type)], as a local relation."""
    names = [f"_l{i}" for i in range(len(columns))]
    projection = ", ".join(
        f"CAST({n} AS {type_}) AS `{name}`" for n, (name, type_) in zip(names, columns, strict=True)
    )
    if rows:
        values = ", ".join("(" + ", ".join(sql_literal(v) for v in row) + ")" for row in rows)
        where = ""
    else:
        values = "(" + ", ".join("NULL" for _ in columns) + ")"
        where = " WHERE FALSE"
    text = f"SELECT {projection} FROM VALUES {values} AS t({', '.join(names)}){where}"
    return Relation.of_sql(text, [name for name, _ in columns])


def local_dataframe(
    spark: SparkSession, rows: Sequence[Sequence[Any]], columns: Sequence[tuple[str, str]]
) -> DataFrame:
    """``local_relation`` as a DataFrame."""
    return spark.sql(local_relation(rows, columns).sql)


def equal_unhashed(a: Column, b: Column) -> Column:
    """``a = b`` as two inequalities: Spark takes equalities in a join condition as hashed join
    keys, but evaluates this only for rows whose other keys matched, so a cheap key (a long) can
    be the hash key and an expensive one (a string) is compared only where needed."""
    return (a >= b) & (a <= b)


def lookup(
    df: DataFrame,
    keys: Sequence[tuple[str, str]],
    values: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Any]],
) -> DataFrame:
    """``lookup_relation`` of a DataFrame."""
    return lookup_relation(Relation.of_frame(df), keys, values, rows).frame(df.sparkSession)


def lookup_relation(
    rel: Relation,
    keys: Sequence[tuple[str, str]],
    values: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Any]],
) -> Relation:
    """``rel`` inner-joined with the small table ``rows`` on its ``keys`` columns, adding its
    ``values`` columns; ``keys`` and ``values`` are [(name, Spark SQL type)], rows hold keys then
    values, and at most one row matches a key.

    Few rows become expressions (compare the keys in order, then pick each value from an array
    literal), so no Spark job runs to broadcast them; more are one broadcast join on the first key,
    the other keys compared only for rows whose first key matched. Put a cheap, selective key
    (a long) first.
    """
    own = [quoted(c) for c in rel.columns]
    if len(rows) <= INLINE_ROWS:
        cases = "".join(
            " WHEN "
            + " AND ".join(
                f"{quoted(n)} = {sql_literal(v)}" for (n, _), v in zip(keys, row, strict=False)
            )
            + f" THEN {i}"
            for i, row in enumerate(rows, start=1)
        )
        # a CASE, not an array the optimizer folds into one literal: each value stays a
        # parameter of the plan's shape (``Bound.java``), so a plan of another round's values
        # is bound into the kept optimized plan
        picked = [
            (
                "CASE _l_ordinal"
                + "".join(
                    f" WHEN {i} THEN {_cast(row[len(keys) + k], type_)}"
                    for i, row in enumerate(rows, start=1)
                )
                + f" END AS {quoted(name)}"
                if rows
                else f"CAST(NULL AS {type_}) AS {quoted(name)}"
            )
            for k, (name, type_) in enumerate(values)
        ]
        ordinal = rel.select(*own, f"CASE WHEN FALSE THEN 0{cases} END AS _l_ordinal")
        return ordinal.where("_l_ordinal IS NOT NULL").select(*own, *picked)
    table = local_relation(rows, [(f"_l_{n}", t) for n, t in keys] + list(values))
    first, *rest = [name for name, _ in keys]
    cond = f"_l.{quoted(first)} = _r.{quoted('_l_' + first)}"
    for name in rest:
        a, b = f"_l.{quoted(name)}", f"_r.{quoted('_l_' + name)}"
        cond += f" AND {a} >= {b} AND {a} <= {b}"  # see equal_unhashed
    columns = [f"_l.{c}" for c in own] + [f"_r.{quoted(n)}" for n, _ in values]
    return rel.join(table, cond, columns=columns, hint="BROADCAST(_r)")

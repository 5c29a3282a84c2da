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
from pyspark.sql import functions as F

from changelake.schema import quoted

# Up to this many rows, a lookup is inlined as expressions rather than joined.
INLINE_ROWS = 8


def _literal(value: Any) -> str:
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
    return f"CAST({_literal(value)} AS {type_})"


def local_dataframe(
    spark: SparkSession, rows: Sequence[Sequence[Any]], columns: Sequence[tuple[str, str]]
) -> DataFrame:
    """A DataFrame of ``rows`` with ``columns`` = [(name, Spark SQL type)], as a local relation."""
    names = [f"_l{i}" for i in range(len(columns))]
    projection = ", ".join(
        f"CAST({n} AS {type_}) AS `{name}`" for n, (name, type_) in zip(names, columns, strict=True)
    )
    if rows:
        values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
        where = ""
    else:
        values = "(" + ", ".join("NULL" for _ in columns) + ")"
        where = " WHERE FALSE"
    return spark.sql(f"SELECT {projection} FROM VALUES {values} AS t({', '.join(names)}){where}")


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
    """``df`` inner-joined with the small table ``rows`` on its ``keys`` columns, adding its
    ``values`` columns; ``keys`` and ``values`` are [(name, Spark SQL type)], rows hold keys then
    values, and at most one row matches a key.

    Few rows become expressions (compare the keys in order, then pick each value from an array
    literal), so no Spark job runs to broadcast them; more are one broadcast join on the first key,
    the other keys compared only for rows whose first key matched. Put a cheap, selective key
    (a long) first.
    """
    if len(rows) <= INLINE_ROWS:
        # As SQL text: one call into the JVM each, where building them from Column objects made
        # ~10 per row, a third of the calls planning a CHANGES query made.
        cases = "".join(
            " WHEN "
            + " AND ".join(
                f"{quoted(n)} = {_literal(v)}" for (n, _), v in zip(keys, row, strict=False)
            )
            + f" THEN {i}"
            for i, row in enumerate(rows, start=1)
        )
        df = df.withColumn("_l_ordinal", F.expr(f"CASE WHEN FALSE THEN 0{cases} END"))
        picked = {
            name: F.expr(
                f"CAST(element_at(array({', '.join(_cast(row[len(keys) + k], type_) for row in rows)}),"
                f" _l_ordinal) AS {type_})"
                if rows
                else f"CAST(NULL AS {type_})"
            )
            for k, (name, type_) in enumerate(values)
        }
        return df.where(F.col("_l_ordinal").isNotNull()).withColumns(picked).drop("_l_ordinal")
    table = local_dataframe(df.sparkSession, rows, [(f"_l_{n}", t) for n, t in keys] + list(values))
    first, *rest = [name for name, _ in keys]
    cond: Column = df[first] == table[f"_l_{first}"]
    for name in rest:
        cond = cond & equal_unhashed(df[name], table[f"_l_{name}"])
    return df.join(F.broadcast(table), cond).drop(*[f"_l_{n}" for n, _ in keys])

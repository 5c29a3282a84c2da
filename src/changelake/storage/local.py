"""Small driver-side tables (metadata: file lists, statement results) as Spark DataFrames.

They are built as SQL inline tables, i.e. local relations: joining or broadcasting them needs no
Spark job, unlike ``createDataFrame`` of a Python list, which goes through an RDD.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession


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

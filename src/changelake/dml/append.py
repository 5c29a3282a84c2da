"""Appending data from Python: a Spark DataFrame, a pandas DataFrame or a PyArrow table."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from changelake.arrow_types import arrow_type
from changelake.dml.common import Target
from changelake.dml.insert import append_dataframe
from changelake.dml.result import StatementResult
from changelake.errors import InvalidStatementError
from changelake.runtime.env import Context
from changelake.schema import TableSchema


def append(ctx: Context, name: str, data: Any) -> StatementResult:
    """Append ``data`` to table ``name``, matching columns by name."""
    target = Target.for_append(ctx, name)
    df = to_spark_dataframe(ctx.spark, data, schema=target.state.schema, table=target.info.name)
    return append_dataframe(ctx, target, df)


def to_spark_dataframe(
    spark: SparkSession, data: Any, *, schema: TableSchema, table: str
) -> DataFrame:
    """``data`` as a Spark DataFrame; pandas and Arrow data go through Arrow, not row by row."""
    if isinstance(data, DataFrame):
        return data
    if _is_pandas(data):
        data = pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise InvalidStatementError(
            f"Cannot append a {type(data).__name__} to {table}: give a Spark DataFrame, a pandas"
            " DataFrame or a PyArrow table."
        )
    return spark.createDataFrame(_without_null_columns(data, schema))


def _without_null_columns(data: pa.Table, schema: TableSchema) -> pa.Table:
    """All-NULL columns (Arrow type ``null``, e.g. from pandas ``None``) typed as their column."""
    for i, field in enumerate(data.schema):
        column = schema.find(field.name)
        if pa.types.is_null(field.type) and column is not None:
            data = data.set_column(i, field.name, pa.nulls(len(data), arrow_type(column.type)))
    return data


def _is_pandas(data: Any) -> bool:
    module = type(data).__module__
    return module.startswith("pandas.") and type(data).__name__ == "DataFrame"

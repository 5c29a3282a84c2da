"""Changelog files as sources of APPLY CHANGES: what COPY INTO writes (Parquet or JSON lines, in
any changelog format) and Debezium JSON lines from elsewhere."""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from changelake.changelog.json_values import decoded, read_type
from changelake.changelog.layout import stored_as
from changelake.changes.formats import Format, rendered_schema
from changelake.errors import InvalidStatementError, did_you_mean
from changelake.runtime.env import Context
from changelake.schema import quoted
from changelake.spark.errors import invalid_input
from changelake.storage.snapshot import logical_schema

FORMATS = tuple(f.value.lower() for f in Format)
_LINE = "_cl_unparsed_line"


def read_changelog(ctx: Context, path: str, *, format: str, table: str | None) -> DataFrame:
    """The changelog at ``path`` (a directory COPY INTO wrote, or files) as a DataFrame to hand
    to APPLY CHANGES.

    ``format`` names what ``CHANGES (..., FORMAT => f)`` wrote: ``odf``, ``flink``, ``retract``,
    ``upsert``, or ``debezium`` (``op``, ``before``, ``after``, ``source``, ``ts_ms``). Parquet
    files are read as they are. JSON lines (COPY INTO's ``TYPE = JSON``, and Debezium's own) are
    read with the types of ``table``'s columns, every value as written (``json_values.py``);
    without ``table`` Spark infers the types (dates, timestamps, decimals and binary values
    stay strings, which APPLY CHANGES ... FORMAT DEBEZIUM still reads exactly)."""
    kind = format.strip().lower()
    if kind not in FORMATS:
        raise InvalidStatementError(
            f"Unknown changelog file format {format!r}; use one of {', '.join(FORMATS)}."
            f"{did_you_mean(kind, FORMATS)}"
        )
    fmt = Format.parse(kind)
    stored = stored_as(path) or ("json" if fmt is Format.DEBEZIUM else "parquet")
    if stored == "parquet":
        return ctx.spark.read.parquet(path)
    if table is None:
        return _inferred(ctx.spark, path)
    row = logical_schema(ctx.state(ctx.table(table)).schema)
    row = StructType([StructField(f.name, f.dataType, True) for f in row.fields])
    return _typed(ctx.spark, path, rendered_schema(fmt, row), table=table)


def _typed(spark: SparkSession, path: str, schema: StructType, *, table: str) -> DataFrame:
    """JSON lines at ``path`` as rows of ``schema``. A line whose values do not parse as its
    types, which Spark would read as NULLs, fails whatever reads it instead."""
    read = read_type(schema)
    raw = (
        spark.read.schema(StructType([*read.fields, StructField(_LINE, StringType())]))
        .option("columnNameOfCorruptRecord", _LINE)
        .json(path)
    )
    bad = F.col(_LINE).isNotNull()
    message = F.concat(
        F.lit(f"read_changelog({path!r}): a line does not hold values of the types of {table}'s"
              " columns: "),
        F.substring(F.col(_LINE), 1, 500),
        F.lit(" Fix the line, or read the file with the table it was written from."),
    )  # fmt: skip

    def column(field: StructField, raw_type: DataType) -> Column:
        value = decoded(F.col(quoted(field.name)), source=raw_type, target=field.dataType)
        return F.when(bad, invalid_input(message)).otherwise(value).alias(field.name)

    pairs = zip(schema.fields, read.fields, strict=True)
    return raw.select(*[column(field, raw_field.dataType) for field, raw_field in pairs])


def _inferred(spark: SparkSession, path: str) -> DataFrame:
    """JSON lines at ``path`` with the types Spark infers from them."""
    try:
        df = spark.read.json(path)
    except AnalysisException as e:
        if e.getCondition() != "UNABLE_TO_INFER_SCHEMA":
            raise
        df = None
    if df is None or not df.columns:
        raise InvalidStatementError(
            f"read_changelog({path!r}): there are no JSON lines to infer the columns' types from"
            " (an export of no changes?); pass table='t' to read them with the types of t's"
            " columns."
        )
    return df

"""Changelog files as sources of APPLY CHANGES: ODF Parquet and Debezium JSON lines."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from changelake.errors import InvalidStatementError, did_you_mean
from changelake.storage.snapshot import logical_schema
from changelake.txn.context import StatementContext

FORMATS = ("odf", "debezium")


def read_changelog(
    ctx: StatementContext, spark: SparkSession, path: str, *, format: str, table: str | None
) -> DataFrame:
    """The changelog at ``path`` as a DataFrame to hand to APPLY CHANGES.

    ``odf``: Parquet with ``offset``, ``op`` (INT32) and the row's columns, as ``CHANGES (...,
    FORMAT => ODF)`` writes it. ``debezium``: JSON lines with ``op``, ``before``, ``after``,
    ``source`` and ``ts_ms``; the images are read with the columns of ``table`` (else Spark
    infers them: numbers become BIGINT)."""
    kind = format.strip().lower()
    if kind == "odf":
        return spark.read.parquet(path)
    if kind != "debezium":
        raise InvalidStatementError(
            f"Unknown changelog file format {format!r}; use one of {', '.join(FORMATS)}."
            f"{did_you_mean(kind, FORMATS)}"
        )
    if table is None:
        return spark.read.json(path)
    image = logical_schema(ctx.state(ctx.table(table)).schema)
    image = StructType([StructField(f.name, f.dataType, True) for f in image.fields])
    source = StructType(
        [StructField("table", StringType())]
        + [StructField(n, LongType()) for n in ("version", "ts_ms", "row_id", "offset")]
    )
    envelope = StructType(
        [
            StructField("op", StringType()),
            StructField("before", image),
            StructField("after", image),
            StructField("source", source),
            StructField("ts_ms", LongType()),
        ]
    )
    return spark.read.schema(envelope).json(path)

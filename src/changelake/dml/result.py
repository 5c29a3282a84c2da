"""The small DataFrame a non-query statement returns: what it did."""

from __future__ import annotations

from dataclasses import astuple, dataclass

from pyspark.sql import DataFrame, SparkSession

from changelake.spark.local import local_dataframe
from changelake.spark.private import deferred_frame

RESULT_COLUMNS = (
    ("statement_id", "string"),
    ("operation", "string"),
    ("object", "string"),
    ("version", "bigint"),
    ("rows_inserted", "bigint"),
    ("rows_updated", "bigint"),
    ("rows_deleted", "bigint"),
    ("message", "string"),
)


@dataclass(frozen=True)
class StatementResult:
    statement_id: str
    operation: str
    object: str
    version: int | None = None
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    message: str = ""

    def to_dataframe(self, spark: SparkSession) -> DataFrame:
        """The result as a one-row DataFrame, made when it is first used (often never)."""
        row = astuple(self)
        return deferred_frame(spark, lambda: local_dataframe(spark, [row], RESULT_COLUMNS))

"""The benchmark data: one row shape, built both as a changelake table and as plain Parquet."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from changelake.session import Session

# Spark executors write one file per range partition: several files, as a real table has.
FILES = 8
_COLUMNS = (
    "id",
    "CAST(id % 1000003 AS INT) AS v",
    "concat('row-', CAST(id * 7919 % 1000003 AS STRING)) AS s",
    "CAST(id AS DOUBLE) / 3 AS d",
)


def create_table(session: Session, name: str, rows: int) -> None:
    """CREATE TABLE ``name`` (id BIGINT, v INT, s STRING, d DOUBLE) AS SELECT ... FROM range(rows)."""
    session.sql(
        f"CREATE OR REPLACE TABLE {name} AS SELECT {', '.join(_COLUMNS)}"
        f" FROM range(0, {rows}, 1, {FILES})"
    )


def plain_rows(spark: SparkSession, rows: int) -> DataFrame:
    """The same rows as :func:`create_table`, as a plain Spark DataFrame."""
    return spark.range(0, rows, 1, FILES).selectExpr(*_COLUMNS)


def write_plain(spark: SparkSession, path: str, rows: int) -> None:
    plain_rows(spark, rows).write.mode("overwrite").parquet(path)


def data_file_uris(session: Session, name: str) -> list[str]:
    """Where the live data files of table ``name`` are, as Spark reads them."""
    info = session.catalog.table(name)
    files = session.catalog.snapshot_files(info.table_id, info.current_version)
    return [session.warehouse.uri(f.file.path) for f in files]


def physical_names(session: Session, name: str) -> dict[str, str]:
    """Logical column name -> the Parquet column it is stored in."""
    info = session.catalog.table(name)
    schema = session.catalog.schema_at(info.table_id, info.current_version)
    return {c.name: c.physical for c in schema.columns}

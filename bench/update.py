"""UPDATE of 0.1% of the rows, spread over every file, vs a plain-Spark copy-on-write rewrite.

changelake writes a deletion vector (with the rows' before-images) and rewrites only the changed
rows; the baseline is what a Parquet table without deletion vectors has to do: read every file,
apply the update with a CASE, write every row to a new directory.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.harness import Context, Result
from bench.rowlevel import row_level

NAME = "update"
TARGET = 4.0  # issue 39 (was 3)


def _rewrite(df: DataFrame, residue: int) -> DataFrame:
    changed = F.when(F.col("id") % 1000 == residue, F.col("v") + 1).otherwise(F.col("v"))
    return df.withColumn("v", changed)


def run(ctx: Context) -> Result:
    return row_level(
        ctx,
        name=NAME,
        statement="UPDATE {table} SET v = v + 1 WHERE id % 1000 = {residue}",
        rewrite=_rewrite,
        target=TARGET,
        description="UPDATE t SET v = v + 1 WHERE id % 1000 = k (0.1% of rows, all files)",
        baseline="plain Spark copy-on-write: read all files, CASE, write all to a new dir",
    )

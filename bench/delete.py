"""DELETE of 0.1% of the rows, spread over every file, vs a plain-Spark copy-on-write rewrite.

changelake writes one deletion vector (with the rows' before-images); the baseline reads every
file and writes every surviving row to a new directory.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.harness import Context, Result
from bench.rowlevel import row_level

NAME = "delete"
TARGET = 5.0  # issue 39 (was 4)


def _rewrite(df: DataFrame, residue: int) -> DataFrame:
    return df.where(F.col("id") % 1000 != residue)


def run(ctx: Context) -> Result:
    return row_level(
        ctx,
        name=NAME,
        statement="DELETE FROM {table} WHERE id % 1000 = {residue}",
        rewrite=_rewrite,
        target=TARGET,
        description="DELETE FROM t WHERE id % 1000 = k (0.1% of rows, all files)",
        baseline="plain Spark copy-on-write: read all files, filter, write the rest to a new dir",
    )

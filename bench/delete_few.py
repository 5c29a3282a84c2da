"""DELETE of a few rows spread over every file (a point DELETE of 0.001% of the rows, as an
erasure request deletes a person's rows), vs a plain-Spark copy-on-write rewrite.

Where ``delete`` (0.1%) finds a match in every page of every file, here most pages hold none:
the statement's second phase reads only the pages that hold a match and decodes only the
matched rows (late materialization, issue 39 item 4), and EXPLAIN says which plan it chose.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.harness import Context, Result
from bench.rowlevel import row_level

NAME = "delete_few"
TARGET = 5.0  # as `delete`'s


def _rewrite(df: DataFrame, residue: int) -> DataFrame:
    return df.where(F.col("id") % 100000 != residue)


def run(ctx: Context) -> Result:
    return row_level(
        ctx,
        name=NAME,
        statement="DELETE FROM {table} WHERE id % 100000 = {residue}",
        rewrite=_rewrite,
        target=TARGET,
        description="DELETE FROM t WHERE id % 100000 = k (0.001% of rows, all files)",
        baseline="plain Spark copy-on-write: read all files, filter, write the rest to a new dir",
        one_in=100000,
    )

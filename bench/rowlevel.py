"""A row-level write of a share of the rows (0.1% unless told) spread over every file, vs
copy-on-write in plain Spark.

Each changelake repetition changes different rows; each baseline repetition
rewrites the whole table into a fresh directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from pyspark.sql import DataFrame

from bench.harness import Context, Result, compared, medians, spark_jobs
from bench.tables import FILES, create_table, write_plain


def row_level(
    ctx: Context,
    *,
    name: str,
    statement: str,
    rewrite: Callable[[DataFrame, int], DataFrame],
    target: float,
    description: str,
    baseline: str,
    one_in: int = 1000,
) -> Result:
    """``statement`` has ``{table}`` and ``{residue}``; ``rewrite`` does the same to a DataFrame;
    each changes one row in ``one_in``."""
    table = f"bench_{name}"
    rows = ctx.rows()
    create_table(ctx.session, table, rows)
    plain = ctx.path(f"{name}_plain")
    write_plain(ctx.spark, plain, rows)

    def ours(residue: int) -> None:
        ctx.session.sql(statement.format(table=table, residue=residue))

    def theirs(residue: int, out: str) -> None:
        rewrite(ctx.spark.read.parquet(plain), residue).write.mode("overwrite").parquet(out)

    ours(1)
    theirs(1, ctx.path(f"{name}_out_warm"))
    jobs = spark_jobs(ctx.spark, lambda: ours(2))
    explained = ctx.session.sql("EXPLAIN " + statement.format(table=table, residue=3)).first()[0]
    mine, base = [], []
    for i in range(ctx.repeat):
        residue = 7 + i
        mine.append(ctx.clock.measure(lambda r=residue: ours(r)))
        out = ctx.path(f"{name}_out_{i}")
        base.append(ctx.clock.measure(lambda r=residue, o=out: theirs(r, o)))
        shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ctx.path(f"{name}_out_warm"), ignore_errors=True)
    shutil.rmtree(plain, ignore_errors=True)

    return compared(
        name,
        description,
        medians(mine),
        medians(base),
        baseline=baseline,
        target=target,
        rows=rows,
        notes=f"median of {ctx.repeat}; {rows // one_in} rows changed per statement over {FILES}"
        f" files; the statement runs {jobs} Spark jobs; EXPLAIN: {explained}",
        faster=True,
    )

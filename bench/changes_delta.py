"""DEFAULT changes after updating 0.1% of the rows of a table, spread over every file, vs the
obvious alternative a user has today: a full outer join of the two snapshots on the key.

changelake's MINIMIZE plan matches only the changed rows (positions in the new deletion vectors
and the rewritten rows); the baseline joins every row of both snapshots.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from bench.harness import Context, Result, alternate, compared, spark_jobs
from bench.tables import create_table

NAME = "changes"
TABLE = "bench_changes"
TARGET = 40.0  # issue 39 (was 30)


def run(ctx: Context) -> Result:
    rows = ctx.rows()
    session = ctx.session
    create_table(session, TABLE, rows)
    start = session.catalog.table(TABLE).current_version
    session.sql(f"UPDATE {TABLE} SET v = v + 1 WHERE id % 1000 = 7")
    end = session.catalog.table(TABLE).current_version
    query = (
        f"SELECT * FROM {TABLE} CHANGES (INFORMATION => DEFAULT)"
        f" AT (VERSION => {start}) END (VERSION => {end})"
    )

    def changelake() -> int:
        df = session.sql(query)
        df.write.format("noop").mode("overwrite").save()
        return 0

    def baseline() -> None:
        old = session.table(TABLE, version=start).alias("o")
        new = session.table(TABLE, version=end).alias("n")
        columns = [c for c in old.columns if c != "id"]
        differs = F.lit(False)
        for c in columns:
            differs = differs | ~F.col(f"o.{c}").eqNullSafe(F.col(f"n.{c}"))
        joined = old.join(new, F.col("o.id") == F.col("n.id"), "full_outer")
        delta = joined.where(F.col("o.id").isNull() | F.col("n.id").isNull() | differs)
        delta.write.format("noop").mode("overwrite").save()

    changed = session.sql(query).count()
    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        "DEFAULT changes after UPDATE of 0.1% of rows spread over all files",
        ours_m,
        theirs_m,
        baseline="full outer join of the two snapshots on the key (time travel reads)",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {changed} change rows (DELETE+INSERT pairs);"
        f" the query runs {jobs} Spark job(s)",
        faster=True,
    )

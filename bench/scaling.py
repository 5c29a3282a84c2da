"""Cost follows the changes: DEFAULT changes over the same 10,000 updated rows (spread over
every file) of a table of 10M rows vs of a table of 1M rows. Ideally the ratio is 1."""

from __future__ import annotations

from bench.harness import FULL_ROWS, Context, Result, alternate, compared, spark_jobs
from bench.tables import create_table

NAME = "scaling"
TARGET = 1.3
CHANGED = 10_000


def _updated(ctx: Context, table: str, rows: int, changed: int) -> str:
    """Create ``table`` with ``rows`` rows, update ``changed`` of them spread over all files;
    the DEFAULT change query over that update."""
    session = ctx.session
    create_table(session, table, rows)
    start = session.catalog.table(table).current_version
    session.sql(f"UPDATE {table} SET v = v + 1 WHERE id % {rows // changed} = 7")
    end = session.catalog.table(table).current_version
    return (
        f"SELECT * FROM {table} CHANGES (INFORMATION => DEFAULT)"
        f" AT (VERSION => {start}) END (VERSION => {end})"
    )


def run(ctx: Context) -> Result:
    big_rows, small_rows = ctx.rows(FULL_ROWS), ctx.rows(FULL_ROWS // 10)
    changed = min(CHANGED, small_rows // 10)
    big = _updated(ctx, "bench_scaling_big", big_rows, changed)
    small = _updated(ctx, "bench_scaling_small", small_rows, changed)

    def query(sql: str) -> None:
        ctx.session.sql(sql).write.format("noop").mode("overwrite").save()

    jobs = spark_jobs(ctx.spark, lambda: query(big))
    big_m, small_m = alternate(ctx, lambda: query(big), lambda: query(small))
    return compared(
        NAME,
        f"DEFAULT over {changed} updated rows: table of {big_rows} vs {small_rows} rows",
        big_m,
        small_m,
        baseline=f"the same query on a table of {small_rows} rows",
        target=TARGET,
        rows=big_rows,
        notes=f"median of {ctx.repeat}; the query runs {jobs} Spark job(s) on the large table",
        meaning="large table / small table",
    )

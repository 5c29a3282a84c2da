"""Full scan of a table with deletion vectors on 1% of its rows vs ``spark.read.parquet``.

Both read every column of the same data files and hand every row to a ``noop`` sink, so the
difference is what reading through deletion vectors costs.
"""

from __future__ import annotations

from bench.harness import Context, Result, alternate, compared, spark_jobs
from bench.tables import create_table, data_file_uris, physical_names

NAME = "scan"
TABLE = "bench_scan"
TARGET = 1.08  # issue 25 (was 1.15)


def run(ctx: Context) -> Result:
    rows = ctx.rows()
    create_table(ctx.session, TABLE, rows)
    ctx.session.sql(f"DELETE FROM {TABLE} WHERE id % 100 = 3")
    files = data_file_uris(ctx.session, TABLE)
    columns = [f"`{p}` AS `{n}`" for n, p in physical_names(ctx.session, TABLE).items()]

    def changelake() -> None:
        ctx.session.sql(f"SELECT * FROM {TABLE}").write.format("noop").mode("overwrite").save()

    def baseline() -> None:
        df = ctx.spark.read.parquet(*files).selectExpr(*columns)
        df.write.format("noop").mode("overwrite").save()

    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        "full scan (all columns, noop sink) of a table with DVs on 1% of rows",
        ours_m,
        theirs_m,
        baseline="spark.read.parquet of the same data files",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {len(files)} data files, every one with a DV;"
        f" the scan runs {jobs} Spark job(s)",
    )

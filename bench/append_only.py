"""APPEND_ONLY changes over the files added by 10 inserts vs ``spark.read.parquet`` of exactly
those files (every column to a ``noop`` sink in both)."""

from __future__ import annotations

from bench.harness import Context, Result, alternate, compared, spark_jobs
from bench.tables import physical_names

NAME = "append_only"
TABLE = "bench_append"
TARGET = 1.08  # issue 25 (was 1.3)
INSERTS = 10


def run(ctx: Context) -> Result:
    session = ctx.session
    rows = ctx.rows()
    per_insert = rows // INSERTS
    session.sql(f"CREATE OR REPLACE TABLE {TABLE} (id BIGINT, v INT, s STRING, d DOUBLE)")
    start = session.catalog.table(TABLE).current_version
    for i in range(INSERTS):
        lo = i * per_insert
        session.sql(
            f"INSERT INTO {TABLE} SELECT id, CAST(id % 1000003 AS INT),"
            f" concat('row-', CAST(id AS STRING)), CAST(id AS DOUBLE) / 3"
            f" FROM range({lo}, {lo + per_insert}, 1, 2)"
        )
    info = session.catalog.table(TABLE)
    files = [
        session.warehouse.uri(f.file.path)
        for f in session.catalog.snapshot_files(info.table_id, info.current_version)
    ]
    columns = [f"`{p}` AS `{n}`" for n, p in physical_names(session, TABLE).items()]
    query = f"SELECT * FROM {TABLE} CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => {start})"

    def changelake() -> None:
        session.sql(query).write.format("noop").mode("overwrite").save()

    def baseline() -> None:
        df = ctx.spark.read.parquet(*files).selectExpr(*columns)
        df.write.format("noop").mode("overwrite").save()

    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        f"APPEND_ONLY changes over {INSERTS} inserts ({per_insert} rows each)",
        ours_m,
        theirs_m,
        baseline="spark.read.parquet of exactly the added files (all columns)",
        target=TARGET,
        rows=per_insert * INSERTS,
        notes=f"median of {ctx.repeat}; {len(files)} files; output includes METADATA$ columns;"
        f" the query runs {jobs} Spark job(s)",
    )

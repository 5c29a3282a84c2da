"""DEFAULT changes rendered as an ODF changelog (op, offset, defined order) vs the same changes in
the plain METADATA$ format, both to a ``noop`` sink: 1M change rows (an UPDATE of 500k rows of a
2M-row table makes 500k -C/+C pairs)."""

from __future__ import annotations

from bench.harness import Context, Result, alternate, compared, spark_jobs

NAME = "changes_odf"
TABLE = "bench_odf"
TARGET = 1.2


def run(ctx: Context) -> Result:
    session = ctx.session
    rows = ctx.rows(2_000_000)
    session.sql(f"CREATE OR REPLACE TABLE {TABLE} (id BIGINT, v INT, s STRING)")
    session.sql(
        f"INSERT INTO {TABLE} SELECT id, CAST(id % 1000 AS INT), concat('row-', CAST(id AS STRING))"
        f" FROM range(0, {rows}, 1, 2)"
    )
    start = session.catalog.table(TABLE).current_version
    session.sql(f"UPDATE {TABLE} SET v = v + 1 WHERE id % 4 = 0")
    clause = "CHANGES (INFORMATION => DEFAULT{}) AT (VERSION => {})"
    plain = f"SELECT * FROM {TABLE} {clause.format('', start)}"
    odf = f"SELECT * FROM {TABLE} {clause.format(', FORMAT => ODF', start)}"

    def changelake() -> None:
        session.sql(odf).write.format("noop").mode("overwrite").save()

    def baseline() -> None:
        session.sql(plain).write.format("noop").mode("overwrite").save()

    jobs = spark_jobs(ctx.spark, changelake)
    plain_jobs = spark_jobs(ctx.spark, baseline)
    ours, theirs = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        f"DEFAULT changes of an UPDATE of {rows // 4} rows ({rows // 2} change rows) as ODF",
        ours,
        theirs,
        baseline="the same CHANGES query in the plain METADATA$ format",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; ODF runs {jobs} Spark job(s), plain {plain_jobs}",
    )

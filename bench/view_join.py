"""DEFAULT changes of an inner-join view (10M-row fact ⋈ 100k-row dimension) after updating 0.1%
of the fact rows, vs diffing the view's two snapshots (issue 8's first view benchmark).

changelake differentiates the view: the fact's changes joined with the dimension at the end
(the dimension did not change, so its term drops). The baseline evaluates the view at both
versions and takes both EXCEPT ALLs, which is what a user without view changes would write.
"""

from __future__ import annotations

import datetime as dt

from bench.harness import Context, Result, alternate, compared, spark_jobs

NAME = "view_join"
TARGET = 10.0
DIMENSION = 100_000


def run(ctx: Context) -> Result:
    session = ctx.session
    rows = ctx.rows()
    dims = max(1, min(DIMENSION, rows // 100))
    session.sql(
        f"CREATE OR REPLACE TABLE bench_fact AS SELECT id, id % {dims} AS dim,"
        f" CAST(id % 1000003 AS INT) AS v FROM range(0, {rows}, 1, 8)"
    )
    session.sql(
        f"CREATE OR REPLACE TABLE bench_dim AS SELECT id AS dim, concat('d', CAST(id AS STRING))"
        f" AS label FROM range(0, {dims}, 1, 2)"
    )
    session.sql(
        "CREATE OR REPLACE VIEW bench_fact_dim AS SELECT f.id, f.v, d.label FROM bench_fact f"
        " JOIN bench_dim d ON f.dim = d.dim"
    )
    start = dt.datetime.now().isoformat(sep=" ")
    session.sql("UPDATE bench_fact SET v = v + 1 WHERE id % 1000 = 7")
    end = dt.datetime.now().isoformat(sep=" ")
    query = (
        f"SELECT * FROM bench_fact_dim CHANGES (INFORMATION => DEFAULT)"
        f" AT (TIMESTAMP => '{start}') END (TIMESTAMP => '{end}')"
    )

    def changelake() -> None:
        session.sql(query).write.format("noop").mode("overwrite").save()

    def baseline() -> None:
        before = session.sql(f"SELECT * FROM bench_fact_dim AT (TIMESTAMP => '{start}')")
        after = session.sql(f"SELECT * FROM bench_fact_dim AT (TIMESTAMP => '{end}')")
        diff = after.exceptAll(before).unionByName(before.exceptAll(after))
        diff.write.format("noop").mode("overwrite").save()

    changed = session.sql(query).count()
    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        f"DEFAULT changes of a fact ⋈ dimension view ({dims} dimension rows) after UPDATE of 0.1%"
        " of the fact",
        ours_m,
        theirs_m,
        baseline="the view at both versions, both EXCEPT ALLs",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {changed} change rows; the query runs {jobs} Spark job(s)",
        faster=True,
    )

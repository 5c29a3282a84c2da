"""DEFAULT changes of an inner-join view (10M-row fact ⋈ 100k-row dimension) after updating 0.1%
of the fact rows, vs diffing the view's two snapshots (issue 8's first view benchmark).

changelake differentiates the view: the fact's changes joined with the dimension at the end
(the dimension did not change, so its term drops). The baseline evaluates the view at both
versions and takes both EXCEPT ALLs, which is what a user without view changes would write.
"""

from __future__ import annotations

from bench.harness import Context, Result, alternate, compared, spark_jobs, view_change

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
    change = view_change(
        session, "bench_fact_dim", "UPDATE bench_fact SET v = v + 1 WHERE id % 1000 = 7"
    )
    query, changelake, baseline = change.query, change.changelake, change.baseline

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

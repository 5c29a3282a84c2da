"""DEFAULT changes of an inner-join view (10M-row fact ⋈ 100k-row dimension) after updating 1% of
the *dimension* rows, vs diffing the view's two snapshots (issue 8).

Unlike view_join, the change is on the small side: the derivative is the fact at the start joined
with the dimension's changes (the fact did not change, so its term drops), which reads the whole
fact once but joins it with only the few changed dimension rows; every fact row of a changed
dimension row comes out as an update. The baseline evaluates the view at both versions and takes
both EXCEPT ALLs, which is what a user without view changes would write.
"""

from __future__ import annotations

from bench.harness import Context, Result, alternate, compared, spark_jobs, view_change, view_plan

NAME = "view_dimension"
TARGET = 5.0
DIMENSION = 100_000


def run(ctx: Context) -> Result:
    session = ctx.session
    rows = ctx.rows()
    dims = max(1, min(DIMENSION, rows // 100))
    session.sql(
        f"CREATE OR REPLACE TABLE bench_vd_fact AS SELECT id, id % {dims} AS dim,"
        f" CAST(id % 1000003 AS INT) AS v FROM range(0, {rows}, 1, 8)"
    )
    session.sql(
        f"CREATE OR REPLACE TABLE bench_vd_dim AS SELECT id AS dim, concat('d', CAST(id AS STRING))"
        f" AS label FROM range(0, {dims}, 1, 2)"
    )
    session.sql(
        "CREATE OR REPLACE VIEW bench_vd_view AS SELECT f.id, f.v, d.label FROM bench_vd_fact f"
        " JOIN bench_vd_dim d ON f.dim = d.dim"
    )
    change = view_change(
        session,
        "bench_vd_view",
        "UPDATE bench_vd_dim SET label = concat(label, 'x') WHERE dim % 100 = 3",
    )
    query, changelake, baseline = change.query, change.changelake, change.baseline

    changed = session.sql(query).count()
    plan = view_plan(session, query)
    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        f"DEFAULT changes of a fact ⋈ dimension view ({dims} dimension rows) after UPDATE of 1%"
        " of the dimension",
        ours_m,
        theirs_m,
        baseline="the view at both versions, both EXCEPT ALLs",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {changed} change rows; plan {plan};"
        f" the query runs {jobs} Spark job(s)",
        faster=True,
    )

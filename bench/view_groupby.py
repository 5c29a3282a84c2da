"""DEFAULT changes of a GROUP BY view (COUNT and SUM over a 10M-row fact, 100k groups) after
updating a tenth of the rows of 1% of the groups, vs diffing the view's two snapshots (issue 8).

changelake regroups only the groups the fact's changes touch (each such group at the start as a
DELETE and at the end as an INSERT, matched into updates by ROW_ID = the group key), or
recomputes the view at both ends if its planner estimates that cheaper. The baseline evaluates
the view at both versions and takes both EXCEPT ALLs, which is what a user without view changes
would write.
"""

from __future__ import annotations

import datetime as dt

from bench.harness import Context, Result, alternate, compared, spark_jobs, view_plan

NAME = "view_groupby"
TARGET = 10.0
GROUPS = 100_000


def run(ctx: Context) -> Result:
    session = ctx.session
    rows = ctx.rows()
    groups = max(1, min(GROUPS, rows // 100))
    session.sql(
        f"CREATE OR REPLACE TABLE bench_vg_fact AS SELECT id, id % {groups} AS g,"
        f" CAST(id % 1000003 AS INT) AS v FROM range(0, {rows}, 1, 8)"
    )
    session.sql(
        "CREATE OR REPLACE VIEW bench_vg_view AS SELECT g, COUNT(*) AS n, SUM(v) AS total,"
        " MIN(v) AS lo, MAX(v) AS hi"
        " FROM bench_vg_fact GROUP BY g"
    )
    start = dt.datetime.now().isoformat(sep=" ")
    session.sql(
        f"UPDATE bench_vg_fact SET v = v + 1 WHERE g % 100 = 5 AND (id DIV {groups}) % 10 = 0"
    )
    end = dt.datetime.now().isoformat(sep=" ")
    query = (
        f"SELECT * FROM bench_vg_view CHANGES (INFORMATION => DEFAULT)"
        f" AT (TIMESTAMP => '{start}') END (TIMESTAMP => '{end}')"
    )

    def changelake() -> None:
        session.sql(query).write.format("noop").mode("overwrite").save()

    def baseline() -> None:
        before = session.sql(f"SELECT * FROM bench_vg_view AT (TIMESTAMP => '{start}')")
        after = session.sql(f"SELECT * FROM bench_vg_view AT (TIMESTAMP => '{end}')")
        diff = after.exceptAll(before).unionByName(before.exceptAll(after))
        diff.write.format("noop").mode("overwrite").save()

    changed = session.sql(query).count()
    plan = view_plan(session, query)
    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    return compared(
        NAME,
        f"DEFAULT changes of a GROUP BY view ({groups} groups, COUNT and SUM) after UPDATE of a"
        " tenth of the rows of 1% of the groups",
        ours_m,
        theirs_m,
        baseline="the view at both versions, both EXCEPT ALLs",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {changed} change rows; plan {plan};"
        f" the query runs {jobs} Spark job(s)",
        faster=True,
    )

"""DEFAULT changes of a GROUP BY view (COUNT, SUM, MIN, MAX over a 10M-row fact, 100k groups)
after updating a tenth of the rows of 1% of the groups, vs diffing the view's two snapshots
(issue 8).

Two layouts of the fact: ``view_groupby`` has it clustered by the group key (as loaded by key,
or after sorting), and the update touches a contiguous 1% of the groups (e.g. the latest ones):
the change scan reads the files holding them, and the regroup reads only the files whose key
statistics may hold a touched group. ``view_groupby_spread`` scatters every group over every
file and updates every 100th group, so the update touches every file: the change scan and the
regroup read the whole fact once each, the floor without a stored copy of the view.

changelake regroups only the groups the fact's changes touch (each such group at the start as a
DELETE and at the end as an INSERT, matched into updates by ROW_ID = the group key), or
recomputes the view at both ends if its planner estimates that cheaper. The baseline evaluates
the view at both versions and takes both EXCEPT ALLs, which is what a user without view changes
would write.
"""

from __future__ import annotations

from bench.harness import Context, Result, alternate, compared, spark_jobs, view_change, view_plan

NAME = "view_groupby"
TARGET = 10.0
GROUPS = 100_000


def run(ctx: Context) -> Result:
    return measure(ctx, spread=False)


def measure(ctx: Context, *, spread: bool) -> Result:
    session = ctx.session
    rows = ctx.rows()
    groups = max(1, min(GROUPS, rows // 100))
    per_group = max(1, rows // groups)
    fact, view = (
        ("bench_vgs_fact", "bench_vgs_view") if spread else ("bench_vg_fact", "bench_vg_view")
    )
    g = f"id % {groups}" if spread else f"id DIV {per_group}"
    # 1% of the groups, and a tenth of the rows of each
    if spread:
        touched = f"{g} % 100 = 5 AND (id DIV {groups}) % 10 = 3"
    else:
        touched = f"{g} < {max(1, groups // 100)} AND id % 10 = 3"
    files = 8 if spread else 40  # clustered: files of 250k rows, each a range of groups
    session.sql(
        f"CREATE OR REPLACE TABLE {fact} AS SELECT id, {g} AS g,"
        f" CAST(id % 1000003 AS INT) AS v FROM range(0, {rows}, 1, {files})"
    )
    session.sql(
        f"CREATE OR REPLACE VIEW {view} AS SELECT g, COUNT(*) AS n, SUM(v) AS total,"
        f" MIN(v) AS lo, MAX(v) AS hi FROM {fact} GROUP BY g"
    )
    change = view_change(session, view, f"UPDATE {fact} SET v = v + 1 WHERE {touched}")
    query, changelake, baseline = change.query, change.changelake, change.baseline

    changed = session.sql(query).count()
    plan = view_plan(session, query)
    jobs = spark_jobs(ctx.spark, changelake)
    ours_m, theirs_m = alternate(ctx, changelake, baseline)
    layout = "spread over all files" if spread else "clustered by key"
    return compared(
        NAME + ("_spread" if spread else ""),
        f"DEFAULT changes of a GROUP BY view ({groups} groups, COUNT/SUM/MIN/MAX; fact {layout})"
        " after UPDATE of a tenth of the rows of 1% of the groups",
        ours_m,
        theirs_m,
        baseline="the view at both versions, both EXCEPT ALLs",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {changed} change rows; plan {plan};"
        f" the query runs {jobs} Spark job(s)",
        faster=True,
    )

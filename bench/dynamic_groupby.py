"""A GROUP BY dynamic table (10M rows -> 100k groups; SUM, COUNT, AVG, MAX) refreshed after an
UPDATE touching 1% of the groups: INCREMENTAL vs FULL refresh (issue 40: >= 25x faster, and the
base files read are the changed files only), and both against the query computed from scratch
in the same rounds (INCREMENTAL <= 0.1x of it; FULL <= 1.5x of it written as Parquet).

The fact is clustered by the group key (40 files, each a range of groups, as loaded by key), and
each repetition updates a tenth of the rows of another contiguous 1% of the groups (untimed),
then times both refreshes of the same change in rotating order. The INCREMENTAL table combines
its stored group rows (with their hidden state columns) with the signed delta; a group whose MAX
row was updated away is recomputed from its rows. The FULL one (REFRESH_MODE = FULL) evaluates
the aggregate and diffs it with its stored rows.

Files read: every Parquet file the INCREMENTAL refresh's scans listed (from Spark's SQL status
store), split into the fact's files the update changed (given a deletion vector, or written),
the fact's unchanged files, and the dynamic table's own files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.harness import Context, Result, Sample, ScannedFiles, compared, medians

if TYPE_CHECKING:
    from changelake.session import Session

NAME = "dynamic_groupby"
TARGET = 25.0
GROUPS = 100_000
FILES = 40


def run(ctx: Context) -> Result:
    s = ctx.session
    rows = ctx.rows()
    groups = max(100, min(GROUPS, rows // 100))
    per_group = max(1, rows // groups)
    touched = max(1, groups // 100)
    fact = "bench_dg_fact"
    s.sql(
        f"CREATE OR REPLACE TABLE {fact} AS SELECT id, id DIV {per_group} AS g,"
        f" CAST(id % 1000003 AS INT) AS v FROM range(0, {rows}, 1, {FILES})"
    )
    query = (
        "SELECT g, SUM(v) AS total, COUNT(*) AS n, AVG(v) AS mean, MAX(v) AS hi"
        f" FROM {fact} GROUP BY g"
    )
    for name in ("bench_dg_inc", "bench_dg_full"):
        s.sql(f"DROP DYNAMIC TABLE IF EXISTS {name}")
    s.sql(f"CREATE DYNAMIC TABLE bench_dg_inc TARGET_LAG = '1 day' AS {query}")
    s.sql(f"CREATE DYNAMIC TABLE bench_dg_full TARGET_LAG = '1 day' REFRESH_MODE = FULL AS {query}")
    written = ctx.path("bench_dg_scratch")
    actions = {
        "incremental": lambda: s.sql("ALTER DYNAMIC TABLE bench_dg_inc REFRESH"),
        "full": lambda: s.sql("ALTER DYNAMIC TABLE bench_dg_full REFRESH"),
        # the query from scratch (changelake's read of the fact), to no sink and written out
        "scratch": lambda: s.sql(query).write.format("noop").mode("overwrite").save(),
        "scratch written": lambda: s.sql(query).write.mode("overwrite").parquet(written),
    }
    samples: dict[str, list[Sample]] = {k: [] for k in actions}
    files_note = ""
    for round_ in range(ctx.repeat + 1):  # the first round warms up and counts files, untimed
        low = (round_ * 37 % 100) * touched  # another 1% of the groups each round
        before = s.catalog.table(fact).current_version
        s.sql(
            f"UPDATE {fact} SET v = v + 1 WHERE g >= {low} AND g < {low + touched} AND id % 10 = 3"
        )
        order = list(actions)[round_ % 4 :] + list(actions)[: round_ % 4]
        for key in order:
            if round_ == 0 and key == "incremental":
                scanned = ScannedFiles(ctx.spark)
                actions[key]()
                files_note = _files_read(s, fact, before, scanned.since())
            elif round_ == 0:
                actions[key]()
            else:
                samples[key].append(ctx.clock.measure(actions[key]))
    jobs = {
        key: s.catalog.refresh_history(s.catalog.table(name).table_id, limit=1)[0].record
        for key, name in (("incremental", "bench_dg_inc"), ("full", "bench_dg_full"))
    }
    assert jobs["incremental"].action == "INCREMENTAL", jobs["incremental"]
    inc, full = medians(samples["incremental"]), medians(samples["full"])
    scratch, scratch_written = medians(samples["scratch"]), medians(samples["scratch written"])
    same = [
        s.sql(
            f"SELECT COUNT(*), SUM(total), SUM(n), SUM(hi), SUM(CAST(mean * 1000 AS BIGINT)) FROM {t}"
        ).collect()[0]
        for t in ("bench_dg_inc", "bench_dg_full")
    ]
    assert same[0] == same[1], same
    return compared(
        NAME,
        f"GROUP BY dynamic table ({rows} rows, {groups} groups, SUM/COUNT/AVG/MAX) after UPDATE"
        " of a tenth of the rows of 1% of the groups: INCREMENTAL vs FULL refresh",
        inc,
        full,
        baseline="REFRESH_MODE = FULL (the aggregate evaluated, diffed with the stored rows)",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; {files_note};"
        f" Spark jobs: incremental {jobs['incremental'].spark_jobs},"
        f" full {jobs['full'].spark_jobs}; the query from scratch {scratch.wall_s:.3f} s"
        f" (INCREMENTAL / it: {inc.wall_s / scratch.wall_s:.2f}x, target <= 0.1x), written as"
        f" Parquet {scratch_written.wall_s:.3f} s (FULL / it:"
        f" {full.wall_s / scratch_written.wall_s:.2f}x, target <= 1.5x)",
        faster=True,
    )


def _files_read(s: Session, fact: str, before: int, scanned: list[str]) -> str:
    """Which of the fact's files the refresh read: those the update wrote, those it gave a
    deletion vector, and the unchanged ones."""
    info = s.catalog.table(fact)
    changed = s.catalog.files_changed_between(
        info.table_id, start_exclusive=before, end_inclusive=info.current_version
    )
    written = {t.file.path for t in changed if (t.file.begin_version or 0) > before}
    given_dvs = {t.file.path for t in changed} - written
    live = {f.file.path for f in s.catalog.snapshot_files(info.table_id, info.current_version)}
    unchanged = live - written - given_dvs
    root = s.warehouse.root.removeprefix("file:")
    read = {path.split(root, 1)[-1].lstrip("/") for path in scanned}
    return (
        f"fact files the INCREMENTAL refresh read: {len(read & written)} of the"
        f" {len(written)} the update wrote, {len(read & given_dvs)} of the {len(given_dvs)} it"
        f" gave a deletion vector, {len(read & unchanged)} of the {len(unchanged)} unchanged;"
        f" other files (before-images, the table's own): {len(read - live - written)}"
    )

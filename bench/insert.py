"""Single-row INSERT ... VALUES statements: time per statement, and where it goes.

Each statement's wall time is split into time inside Spark jobs (from the driver's status store)
and the rest; the rest is further split into writing the data file and the catalog commit, by
timing those two calls. The baseline is the plain-Spark way to append one row to a Parquet
directory (``createDataFrame([row]).write.mode("append").parquet(dir)``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import changelake.dml.insert as insert_module
from bench.harness import Context, Result, SparkJobClock, median_of, medians
from changelake.txn.context import StatementContext

NAME = "insert"
TABLE = "bench_insert"
TARGET_S = 0.150
STATEMENTS = 200
WARMUP = 5


class _Stopwatch:
    """Accumulates the time spent in wrapped calls."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return wrapped


@contextmanager
def _instrumented() -> Iterator[tuple[_Stopwatch, _Stopwatch]]:
    """Time the file write and the catalog commit of INSERT (patched in for this benchmark only)."""
    write, commit = _Stopwatch(), _Stopwatch()
    original_write, original_commit = insert_module.write_arrow, StatementContext.commit
    insert_module.write_arrow = write.wrap(original_write)
    StatementContext.commit = commit.wrap(original_commit)  # type: ignore[method-assign]
    try:
        yield write, commit
    finally:
        insert_module.write_arrow = original_write
        StatementContext.commit = original_commit  # type: ignore[method-assign]


def _statement(i: int) -> str:
    return f"INSERT INTO {TABLE} VALUES ({i}, {i % 1000}, 'row-{i}', {i / 3:.6f})"


def run(ctx: Context) -> Result:
    n = ctx.count(STATEMENTS)
    session, spark = ctx.session, ctx.spark
    session.sql(f"CREATE OR REPLACE TABLE {TABLE} (id BIGINT, v INT, s STRING, d DOUBLE)")
    plain = ctx.path("insert_plain")
    schema = "id bigint, v int, s string, d double"

    def baseline(i: int) -> None:
        row = [(i, i % 1000, f"row-{i}", i / 3)]
        spark.createDataFrame(row, schema).write.mode("append").parquet(plain)

    for i in range(WARMUP):
        session.sql(_statement(-1 - i))
        baseline(-1 - i)

    jobs = SparkJobClock(spark)
    ours, totals, in_jobs, writes, commits, job_counts = [], [], [], [], [], []
    theirs = []
    with _instrumented() as (write, commit):
        for i in range(n):
            jobs.mark()
            write.seconds = commit.seconds = 0.0
            ours.append(ctx.clock.measure(lambda i=i: session.sql(_statement(i))))
            totals.append(ours[-1].wall_s)
            count, seconds = jobs.since()
            job_counts.append(count)
            in_jobs.append(seconds)
            writes.append(write.seconds)
            commits.append(commit.seconds)
            theirs.append(ctx.clock.measure(lambda i=i: baseline(i)))
    live = session.sql(f"SELECT count(*) FROM {TABLE}").collect()[0][0]
    if live != n + WARMUP:
        raise AssertionError(f"{TABLE} holds {live} rows after {n + WARMUP} single-row inserts")

    ours_m, theirs_m = medians(ours), medians(theirs)
    median_s = ours_m.wall_s
    total = sum(totals)
    outside = 1.0 - sum(in_jobs) / total
    return Result(
        name=NAME,
        description=f"{n} single-row INSERT ... VALUES statements, median per statement",
        changelake_s=median_s,
        baseline_s=theirs_m.wall_s,
        changelake_cpu_s=ours_m.cpu_s,
        baseline_cpu_s=theirs_m.cpu_s,
        cpu_ratio=ours_m.cpu_s / theirs_m.cpu_s,
        baseline="plain Spark: createDataFrame([row]).write.mode('append').parquet(dir)",
        ratio=median_s / theirs_m.wall_s,
        ratio_meaning="changelake / baseline",
        target=f"median <= {TARGET_S * 1000:.0f} ms",
        met=median_s <= TARGET_S,
        rows=n,
        notes=(
            f"{outside:.0%} of statement time outside Spark jobs"
            f" ({sum(job_counts)} Spark jobs in {n} statements);"
            f" median file write {median_of(writes) * 1000:.1f} ms,"
            f" catalog commit {median_of(commits) * 1000:.1f} ms,"
            f" p90 {sorted(totals)[int(0.9 * (n - 1))] * 1000:.0f} ms"
        ),
        extra={
            "share_outside_spark_jobs": outside,
            "median_file_write_s": median_of(writes),
            "median_catalog_commit_s": median_of(commits),
        },
    )

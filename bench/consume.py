"""A stream consume cycle: INSERT 1 row into the source, then
``INSERT INTO target SELECT ... FROM stream``; median end-to-end time per cycle.

Baseline, in the same run: the hand-written incremental job a user writes without streams —
append the new source file to a plain Parquet target with Spark (it must know which file is new).
"""

from __future__ import annotations

import statistics
import time

from bench.harness import Context, Result

NAME = "consume"
TARGET_S = 1.0
CYCLES = 50


def run(ctx: Context) -> Result:
    session, spark = ctx.session, ctx.spark
    cycles = ctx.count(CYCLES, minimum=10)
    session.sql("CREATE OR REPLACE TABLE bench_src (id BIGINT, name STRING)")
    session.sql("CREATE OR REPLACE TABLE bench_dst (id BIGINT, name STRING, action STRING)")
    session.sql("CREATE OR REPLACE STREAM bench_stream ON TABLE bench_src")
    consume = "INSERT INTO bench_dst SELECT id, name, METADATA$ACTION FROM bench_stream"
    session.sql("INSERT INTO bench_src VALUES (-1, 'warm')")
    session.sql(consume)

    ours = []
    for i in range(cycles):
        t0 = time.perf_counter()
        session.sql(f"INSERT INTO bench_src VALUES ({i}, 'name-{i}')")
        session.sql(consume)
        ours.append(time.perf_counter() - t0)
    landed = session.sql("SELECT count(*) FROM bench_dst").first()[0]
    assert landed == cycles + 1, f"stream delivered {landed} rows, expected {cycles + 1}"

    src, dst = ctx.path("consume_src"), ctx.path("consume_dst")
    theirs = []
    for i in range(min(cycles, 20)):
        t0 = time.perf_counter()
        spark.createDataFrame([(i, f"name-{i}")], "id bigint, name string").write.mode(
            "overwrite"
        ).parquet(f"{src}/{i}")
        spark.read.parquet(f"{src}/{i}").write.mode("append").parquet(dst)
        theirs.append(time.perf_counter() - t0)

    ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
    return Result(
        name=NAME,
        description="consume cycle: INSERT 1 row + INSERT INTO target SELECT ... FROM stream",
        changelake_s=ours_s,
        baseline_s=theirs_s,
        baseline="plain Spark: write the row as a file, append that file to a Parquet target",
        ratio=ours_s / theirs_s,
        ratio_meaning="changelake / baseline (per cycle)",
        target=f"median <= {TARGET_S:g} s per cycle",
        met=ours_s <= TARGET_S,
        rows=cycles,
        notes=f"median of {cycles} cycles; p90 {sorted(ours)[int(0.9 * len(ours)) - 1]:.3f} s",
    )

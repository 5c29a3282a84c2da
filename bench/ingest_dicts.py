"""Streaming ingest from Python dicts (issue 9): rows per second with validation, client side.

500k rows (scale 1.0) of 4 columns (id BIGINT, name STRING, amount DOUBLE, ts TIMESTAMP with aware
datetimes) go into one channel in batches of 10k through ``Channel.insert_rows`` (per-row
validation), then ``Client.flush()`` writes Parquet and commits; the time runs until the flush
returns. The dicts are built before the timing (a producer has them already).

Baseline, for context, alternating in the same process: the same rows made a table with
``pa.Table.from_pylist`` (per batch, with the table's Arrow schema) and written with
``pq.write_table``. The target is per core: rows per CPU-second of this Python process >= 150k.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness import Context, Result, SparkJobClock, alternate
from bench.ingest_common import create_table, dict_rows, per_second, python_only, rate
from changelake.ingest import Client

NAME = "ingest_dicts"
TABLE = "bench_ingest_dicts"
FULL_ROWS = 500_000
BATCH = 10_000
TARGET_ROWS_PER_CPU_S = 150_000
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def run(ctx: Context) -> Result:
    rows = ctx.rows(FULL_ROWS)
    batches = [dict_rows(lo, min(BATCH, rows - lo)) for lo in range(0, rows, BATCH)]
    create_table(ctx, TABLE)
    plain = ctx.path("ingest_dicts_plain.parquet")
    token = iter(range(1 << 62))

    with Client(ctx.session.warehouse.root) as client:
        channel = client.open_channel("dicts", table=TABLE)

        def ours() -> None:
            for b in batches:
                channel.insert_rows(b, end_offset_token=str(next(token)))
            client.flush()

        def theirs() -> None:
            tables = [pa.Table.from_pylist(b, schema=SCHEMA) for b in batches]
            pq.write_table(pa.concat_tables(tables), plain)

        jobs = SparkJobClock(ctx.spark)
        ours_s, theirs_s = alternate(python_only(ctx), ours, theirs)
        spark_jobs = jobs.since()[0]
        status = channel.status()
    landed = ctx.session.sql(f"SELECT count(*) FROM {TABLE}").first()[0]
    expected = (ctx.repeat + 1) * rows
    if landed != expected or status.rows_errored:
        raise AssertionError(f"{TABLE} holds {landed} rows, expected {expected}: {status}")

    per_cpu = rate(rows, ours_s.cpu_s)
    return Result(
        name=NAME,
        description=f"{rows:,} dict rows (id, name, amount DOUBLE, aware datetime ts) into one"
        f" channel in batches of {BATCH:,} (insert_rows, per-row validation), then"
        " client.flush() (Parquet, commit); rows per CPU-second",
        changelake_s=ours_s.wall_s,
        baseline_s=theirs_s.wall_s,
        changelake_cpu_s=ours_s.cpu_s,
        baseline_cpu_s=theirs_s.cpu_s,
        cpu_ratio=ours_s.cpu_s / theirs_s.cpu_s,
        baseline="for context: pa.Table.from_pylist of the same dicts (per batch) +"
        " pq.write_table to a local file",
        ratio=ours_s.wall_s / theirs_s.wall_s,
        ratio_meaning="changelake / baseline (time)",
        target=f">= {per_second(TARGET_ROWS_PER_CPU_S)} rows per CPU-second (per core)",
        met=per_cpu >= TARGET_ROWS_PER_CPU_S,
        rows=rows,
        notes=f"SDK {per_second(rate(rows, ours_s.wall_s))} rows/s wall,"
        f" {per_second(per_cpu)} rows per CPU-second"
        f" ({ours_s.cpu_s / ours_s.wall_s:.2f} cores busy); from_pylist + write_table"
        f" {per_second(rate(rows, theirs_s.wall_s))} rows/s wall,"
        f" {per_second(rate(rows, theirs_s.cpu_s))} rows per CPU-second;"
        f" Spark jobs: {spark_jobs} (the SDK starts no JVM and no Spark job);"
        " CPU is this Python process's (time.process_time, all threads)",
        extra={
            "rows_per_s": rate(rows, ours_s.wall_s),
            "rows_per_cpu_s": per_cpu,
            "baseline_rows_per_s": rate(rows, theirs_s.wall_s),
            "spark_jobs": float(spark_jobs),
        },
    )

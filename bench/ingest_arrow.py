"""Streaming ingest from Arrow batches (issue 9): rows per second into one channel, client side.

2M rows (scale 1.0) of 4 columns (id BIGINT, name STRING, amount DOUBLE, ts TIMESTAMP) go into one
channel in batches of 100k through ``Channel.insert_arrow`` (validation and casting), then
``Client.flush()`` writes the buffered rows as Parquet with statistics and commits them with the
channel's offset token; the time runs until the flush returns. The background flusher is on (max
client lag 1 s, early flush at 32 MiB per channel), as a producer gets it.

Baseline, alternating in the same process: ``pyarrow.parquet.write_table`` of the same rows to a
local file. The target is per core: rows per CPU-second of this Python process (all its threads),
>= 1M. The SDK's throughput against write_table (>= 0.5x) is recorded from this same measurement
as ``ingest_vs_pyarrow``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness import Context, Result, Sample, SparkJobClock, alternate
from bench.ingest_common import arrow_batch, create_table, per_second, python_only, rate
from changelake.ingest import Client

NAME = "ingest_arrow"
TABLE = "bench_ingest_arrow"
FULL_ROWS = 2_000_000
BATCH = 100_000
TARGET_ROWS_PER_CPU_S = 1_000_000


@dataclass(frozen=True)
class Measured:
    ours: Sample  # median: insert_arrow of every batch + flush
    theirs: Sample  # median: write_table of the same rows
    rows: int
    batches: int
    spark_jobs: int

    @property
    def ours_rows_per_s(self) -> float:
        return rate(self.rows, self.ours.wall_s)

    @property
    def ours_rows_per_cpu_s(self) -> float:
        return rate(self.rows, self.ours.cpu_s)

    @property
    def theirs_rows_per_s(self) -> float:
        return rate(self.rows, self.theirs.wall_s)

    def figures(self) -> str:
        return (
            f"SDK {per_second(self.ours_rows_per_s)} rows/s wall,"
            f" {per_second(self.ours_rows_per_cpu_s)} rows per CPU-second"
            f" ({self.ours.cpu_s / self.ours.wall_s:.2f} cores busy);"
            f" write_table {per_second(self.theirs_rows_per_s)} rows/s wall,"
            f" {per_second(rate(self.rows, self.theirs.cpu_s))} rows per CPU-second;"
            f" {self.rows:,} rows in {self.batches} batches per run;"
            f" Spark jobs: {self.spark_jobs} (the SDK starts no JVM and no Spark job)"
        )


_measured: dict[tuple[int, float, int], Measured] = {}


def measure(ctx: Context) -> Measured:
    """The SDK and write_table timings, taken once per benchmark run (shared with
    ``ingest_vs_pyarrow``)."""
    key = (id(ctx.session), ctx.scale, ctx.repeat)
    if key not in _measured:
        _measured[key] = _measure(ctx)
    return _measured[key]


def _measure(ctx: Context) -> Measured:
    rows = ctx.rows(FULL_ROWS)
    batch = min(BATCH, rows)
    batches = [arrow_batch(lo, min(batch, rows - lo)) for lo in range(0, rows, batch)]
    create_table(ctx, TABLE)
    plain = ctx.path("ingest_arrow_plain.parquet")
    token = iter(range(1 << 62))

    with Client(ctx.session.warehouse.root) as client:
        channel = client.open_channel("arrow", table=TABLE)

        def ours() -> None:
            for b in batches:
                channel.insert_arrow(b, end_offset_token=str(next(token)))
            client.flush()

        def theirs() -> None:
            pq.write_table(pa.Table.from_batches(batches), plain)

        jobs = SparkJobClock(ctx.spark)
        ours_s, theirs_s = alternate(python_only(ctx), ours, theirs)
        spark_jobs = jobs.since()[0]
        status = channel.status()
    landed = ctx.session.sql(f"SELECT count(*) FROM {TABLE}").first()[0]
    expected = (ctx.repeat + 1) * rows
    if landed != expected or status.rows_errored:
        raise AssertionError(f"{TABLE} holds {landed} rows, expected {expected}: {status}")
    return Measured(ours_s, theirs_s, rows, len(batches), spark_jobs)


def run(ctx: Context) -> Result:
    m = measure(ctx)
    per_cpu = m.ours_rows_per_cpu_s
    return Result(
        name=NAME,
        description=f"{m.rows:,} rows (id BIGINT, name STRING, amount DOUBLE, ts TIMESTAMP) into"
        f" one channel in Arrow batches of {min(BATCH, m.rows):,} (insert_arrow, validation),"
        " then client.flush() (Parquet with statistics, commit); rows per CPU-second",
        changelake_s=m.ours.wall_s,
        baseline_s=m.theirs.wall_s,
        changelake_cpu_s=m.ours.cpu_s,
        baseline_cpu_s=m.theirs.cpu_s,
        cpu_ratio=m.ours.cpu_s / m.theirs.cpu_s,
        baseline="plain PyArrow: pq.write_table of the same rows to a local file",
        ratio=m.ours.wall_s / m.theirs.wall_s,
        ratio_meaning="changelake / baseline (time)",
        target=f">= {per_second(TARGET_ROWS_PER_CPU_S)} rows per CPU-second (per core)",
        met=per_cpu >= TARGET_ROWS_PER_CPU_S,
        rows=m.rows,
        notes=f"{m.figures()}; CPU is this Python process's (time.process_time, all threads)",
        extra={
            "rows_per_s": m.ours_rows_per_s,
            "rows_per_cpu_s": per_cpu,
            "baseline_rows_per_s": m.theirs_rows_per_s,
            "spark_jobs": float(m.spark_jobs),
        },
    )

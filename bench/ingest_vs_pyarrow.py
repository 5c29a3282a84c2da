"""Streaming ingest from Arrow batches against a plain PyArrow ``write_table`` (issue 9): the
ratio rows/s of the SDK / rows/s of write_table, >= 0.5x.

It is the ``ingest_arrow`` measurement itself (taken once when both run; see bench/ingest_arrow.py):
2M rows in batches of 100k through ``insert_arrow`` + ``client.flush()`` against
``pq.write_table`` of the same rows to a local file, alternating in the same process.
"""

from __future__ import annotations

from bench import ingest_arrow
from bench.harness import Context, Result

NAME = "ingest_vs_pyarrow"
TARGET = 0.5


def run(ctx: Context) -> Result:
    m = ingest_arrow.measure(ctx)
    ratio = m.theirs.wall_s / m.ours.wall_s  # = SDK rows/s / write_table rows/s
    return Result(
        name=NAME,
        description=f"{m.rows:,} rows through insert_arrow + client.flush() (the ingest_arrow"
        " run) against a plain write_table of the same rows: SDK rows/s / write_table rows/s",
        changelake_s=m.ours.wall_s,
        baseline_s=m.theirs.wall_s,
        changelake_cpu_s=m.ours.cpu_s,
        baseline_cpu_s=m.theirs.cpu_s,
        cpu_ratio=m.theirs.cpu_s / m.ours.cpu_s,
        baseline="plain PyArrow: pq.write_table of the same rows to a local file",
        ratio=ratio,
        ratio_meaning="SDK rows/s / write_table rows/s",
        target=f">= {TARGET:g}x write_table's rows/s",
        met=ratio >= TARGET,
        rows=m.rows,
        notes=f"{m.figures()}; the CPU ratio is likewise write_table CPU / SDK CPU",
        extra={
            "rows_per_s": m.ours_rows_per_s,
            "baseline_rows_per_s": m.theirs_rows_per_s,
            "spark_jobs": float(m.spark_jobs),
        },
    )

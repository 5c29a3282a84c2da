"""Does a pipeline kept for long stay as fast as it started? (issue 52, `dynamic_soak`)

The pipeline of ``dynamic_lag`` (ten dynamic tables in three levels, TARGET_LAG = 5 s) kept by
``changelake serve`` for 15 minutes after its warm-up (at full scale) while a channel ingests
1,000 rows/s. Per table, the median time of its refreshes in the last five minutes over the
median in the first five (from the refresh history: each refresh's start to its commit), and
its data files at the end, which the scheduler's compaction bounds.

The figure is the worst table's ratio (target <= 1.2x: a table's refresh does not slow down as
its files and history grow); the notes give each table's ratio and files (target <= 50 each),
the p95 lag over the target and any failed refresh.
"""

from __future__ import annotations

import statistics

from bench.dynamic_lag import keep_pipeline, percentile
from bench.harness import Context, Result

NAME = "dynamic_soak"
TARGET = 1.2
LAG_S = 5.0
DURATION_S = 900.0
WINDOW_S = 300.0
MOST_FILES = 50


def run(ctx: Context) -> Result:
    s = ctx.session
    duration = max(3 * 60.0, DURATION_S * ctx.scale)
    window = min(WINDOW_S, duration / 3)
    kept = keep_pipeline(ctx, lag_s=LAG_S, duration_s=duration)
    ratios: dict[str, float] = {}
    files: dict[str, int] = {}
    failed = 0
    for name, table_id in kept.ids.items():
        history = s.catalog.refresh_history(table_id)
        failed += sum(r.record.state == "FAILED" for r in history)
        done = [
            r for r in history if r.record.state == "SUCCEEDED" and r.record.trigger != "CREATION"
        ]
        end = max(r.ended_at for r in done)
        first_at = end - duration
        first = [r for r in done if first_at <= r.record.started_at < first_at + window]
        last = [r for r in done if r.record.started_at >= end - window]
        if first and last:
            took = [
                statistics.median(r.ended_at - r.record.started_at for r in part)
                for part in (first, last)
            ]
            ratios[name] = took[1] / took[0]
        files[name] = len(s.catalog.snapshot_files(table_id, s.catalog.table(name).current_version))
    worst = max(ratios, key=ratios.__getitem__)
    p95 = percentile(kept.lags, 95) if kept.lags else float("inf")
    return Result(
        name=NAME,
        description=f"10 dynamic tables (3 levels), TARGET_LAG = {LAG_S:g} s, kept by serve for"
        f" {duration:.0f} s under 1,000 rows/s of ingest",
        changelake_s=ratios[worst],
        baseline_s=1.0,
        baseline="the same table's median refresh in the first window (a ratio)",
        ratio=ratios[worst],
        ratio_meaning=f"median refresh in the last {window:.0f} s / in the first, worst table",
        target=f"<= {TARGET:g}x per table; <= {MOST_FILES} data files per table",
        met=ratios[worst] <= TARGET and max(files.values()) <= MOST_FILES,
        rows=kept.sent,
        notes="; ".join(
            f"{n}: {ratios.get(n, float('nan')):.2f}x, {files[n]} files" for n in kept.ids
        )
        + f"; p95 lag {p95:.1f} s ({p95 / LAG_S:.2f}x the target); failed refreshes: {failed}",
    )

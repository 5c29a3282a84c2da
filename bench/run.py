"""Run the benchmarks: ``python -m bench [--scale S] [--only NAME ...] [--repeat N] [--no-record]``.

Every benchmark is a module with ``NAME`` and ``run(ctx) -> Result``; add new ones to BENCHMARKS.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import tempfile
from pathlib import Path

from bench import (
    append_only,
    apply_changes,
    changes_delta,
    changes_odf,
    cli_sql,
    commit_throughput,
    consume,
    dbt_build,
    delete,
    delete_few,
    dynamic_adaptive,
    dynamic_groupby,
    dynamic_join,
    dynamic_lag,
    dynamic_nodata,
    dynamic_scaling,
    dynamic_soak,
    dynamic_vs_streaming,
    external,
    external_bootstrap,
    ingest_arrow,
    ingest_dicts,
    ingest_http,
    ingest_latency,
    ingest_vs_pyarrow,
    insert,
    planning,
    report,
    scaling,
    scan,
    table3,
    task_trigger,
    update,
    view_cost,
    view_dimension,
    view_groupby,
    view_groupby_spread,
    view_join,
    view_stream,
)
from bench.harness import Context, CpuClock, Result

BENCHMARKS = {
    m.NAME: m
    for m in (
        update,
        delete,
        delete_few,
        scan,
        insert,
        changes_delta,
        table3,
        scaling,
        append_only,
        consume,
        view_join,
        view_dimension,
        view_groupby,
        view_groupby_spread,
        view_cost,
        view_stream,
        commit_throughput,
        ingest_arrow,
        ingest_vs_pyarrow,
        ingest_dicts,
        ingest_latency,
        ingest_http,
        changes_odf,
        apply_changes,
        dynamic_join,
        dynamic_groupby,
        dynamic_adaptive,
        dynamic_scaling,
        dynamic_nodata,
        dynamic_lag,
        dynamic_lag.FIVE_SECONDS,
        dynamic_soak,
        dynamic_vs_streaming,
        task_trigger,
        external.SNAPSHOT,
        external.FOLLOW,
        external_bootstrap,
        planning,
        cli_sql,
        dbt_build,
    )
}
MASTER = "local[2]"
# A 1-minute load average above this before the run means something else was using the CPU
# (only the load before counts: the run itself keeps every core busy).
_BUSY_LOAD = 1.0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply row and statement counts by this (e.g. 0.05 for a quick run); default 1.0",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (median taken)")
    parser.add_argument(
        "--no-record", action="store_true", help="print results without updating RESULTS.md"
    )
    parser.add_argument("--workdir", help="scratch directory (default: a new temporary one)")
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 1.0:
        parser.error("--scale must be in (0, 1]")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def _print(result: Result) -> None:
    mark = "met" if result.met else "MISSED"
    print(
        f"{result.name:>8}: changelake {result.changelake_s:8.3f} s | baseline"
        f" {result.baseline_s:8.3f} s | ratio {result.ratio:6.2f} ({result.ratio_meaning})"
        f" | target {result.target}: {mark}"
    )
    print(
        f"{'':>10}CPU: changelake {result.changelake_cpu_s:8.3f} s | baseline"
        f" {result.baseline_cpu_s:8.3f} s | ratio {result.cpu_ratio:6.2f}"
    )
    if result.notes:
        print(f"{'':>10}{result.notes}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.environ.setdefault("CHANGELAKE_SPARK_MASTER", MASTER)
    import changelake

    scratch = Path(args.workdir or tempfile.mkdtemp(prefix="changelake-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    session = changelake.connect(str(scratch / "warehouse"))
    ctx = Context(
        session=session,
        scale=args.scale,
        repeat=args.repeat,
        scratch=scratch,
        clock=CpuClock(session.spark),
    )
    chosen = args.only or list(BENCHMARKS)
    print(f"changelake benchmarks: scale {args.scale:g}, {args.repeat} repetitions, in {scratch}")
    results = []
    try:
        for name in chosen:
            print(f"running {name} ...", flush=True)
            result = BENCHMARKS[name].run(ctx)
            _print(result)
            results.append(result)
    finally:
        session.close()
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()[0]
    if not args.no_record:
        busy = load_before > _BUSY_LOAD
        report.record(
            results,
            {
                "scale": args.scale,
                "repeat": args.repeat,
                "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
                "machine": report.machine(),
                "spark": session.spark.version,
                "master": session.spark.sparkContext.master,
                "python": platform.python_version(),
                "load_before": load_before,
                "load_after": load_after,
                "load_note": (
                    "Other processes were running on this machine during the run (e.g. test"
                    " suites), so times are noisier and likely higher than on an idle machine."
                    if busy
                    else "The machine was otherwise quiet."
                ),
            },
        )
        print(f"recorded in {report.MD_PATH}")
    return 0 if all(r.met for r in results) or args.scale < 1.0 else 1

"""Streaming ingest over HTTP (issue 9): rows per second through ``changelake serve``, one client.

``changelake serve`` runs as a subprocess on 127.0.0.1 (a free port, the URL read from what it
prints). One client on a keep-alive connection opens a channel and posts 300k rows (scale 1.0) of 4
columns (id, name, amount DOUBLE, ts as ISO 8601 text) as JSON lines in requests of 10k lines, each
with its end offset token, then POST /v1/flush, which returns once every row is committed; the time
runs from the first request to the flush's answer. The bodies are encoded before the timing (a
producer has them already); CPU is that of this process and the server's together.

Baseline, for context, alternating in the same run: the same rows through the Python SDK in this
process (``insert_rows`` of dicts in batches of 10k, then ``client.flush()``).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.harness import Context, Result, SparkJobClock, alternate
from bench.ingest_common import create_table, dict_rows, json_lines, per_second, python_only, rate
from changelake.ingest import Client

NAME = "ingest_http"
TABLE = "bench_ingest_http"
SDK_TABLE = "bench_ingest_http_sdk"
CHANNEL = "http"
FULL_ROWS = 300_000
BATCH = 10_000
TARGET_ROWS_PER_S = 50_000
START_TIMEOUT_S = 60.0


def _start(ctx: Context, log: Path) -> tuple[subprocess.Popen, str]:
    """``changelake serve`` on the benchmark's warehouse, any free port; (process, base URL)."""
    env = {k: v for k, v in os.environ.items() if k != "CHANGELAKE_SERVE_TOKEN"}
    command = [sys.executable, "-m", "changelake.cli", "--catalog", ctx.session.catalog.url]
    command += ["serve", ctx.session.warehouse.root, "--host", "127.0.0.1", "--port", "0"]
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while "listening on http://" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"changelake serve did not start: {log.read_text()}")
        time.sleep(0.05)
    return process, log.read_text().split("listening on ", 1)[1].split()[0]


class _Http:
    """One keep-alive connection; every call must answer 200."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)

    def call(self, method: str, path: str, body: bytes | None = None, kind: str = "") -> dict:
        headers = {"Content-Type": kind} if kind else {}
        self._connection.request(method, path, body=body, headers=headers)
        response = self._connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"{method} {path} answered {response.status}: {answer}")
        return answer

    def close(self) -> None:
        self._connection.close()


def run(ctx: Context) -> Result:
    rows = ctx.rows(FULL_ROWS)
    batches = [dict_rows(lo, min(BATCH, rows - lo)) for lo in range(0, rows, BATCH)]
    bodies = [json_lines(b) for b in batches]
    for table in (TABLE, SDK_TABLE):
        create_table(ctx, table)
    token = iter(range(1 << 62))
    rows_path = f"/v1/tables/{TABLE}/channels/{CHANNEL}/rows"

    process, url = _start(ctx, ctx.scratch / "ingest_http_serve.log")
    web = _Http(url)
    try:
        web.call("PUT", f"/v1/tables/{TABLE}/channels/{CHANNEL}")
        with Client(ctx.session.warehouse.root) as client:
            channel = client.open_channel("sdk", table=SDK_TABLE)

            def ours() -> None:
                for body in bodies:
                    path = f"{rows_path}?end_offset_token={next(token)}"
                    answer = web.call("POST", path, body, "application/x-ndjson")
                    if answer["rows_errored"]:
                        raise RuntimeError(f"rows rejected: {answer['errors'][:3]}")
                web.call("POST", "/v1/flush")

            def theirs() -> None:
                for b in batches:
                    channel.insert_rows(b, end_offset_token=str(next(token)))
                client.flush()

            jobs = SparkJobClock(ctx.spark)
            ours_s, theirs_s = alternate(python_only(ctx, (process.pid,)), ours, theirs)
            spark_jobs = jobs.since()[0]
        status = web.call("GET", f"/v1/tables/{TABLE}/channels/{CHANNEL}/status")
    finally:
        web.close()
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
    runs = ctx.repeat + 1
    for table in (TABLE, SDK_TABLE):
        landed = ctx.session.sql(f"SELECT count(*) FROM {table}").first()[0]
        if landed != runs * rows:
            raise AssertionError(f"{table} holds {landed} rows, expected {runs * rows}")

    ours_rate, theirs_rate = rate(rows, ours_s.wall_s), rate(rows, theirs_s.wall_s)
    body_mb = sum(map(len, bodies)) / len(bodies) / 1e6
    return Result(
        name=NAME,
        description=f"{rows:,} rows as JSON lines to `changelake serve` (subprocess,"
        f" 127.0.0.1), one client, requests of {BATCH:,} lines, then POST /v1/flush; rows/s",
        changelake_s=ours_s.wall_s,
        baseline_s=theirs_s.wall_s,
        changelake_cpu_s=ours_s.cpu_s,
        baseline_cpu_s=theirs_s.cpu_s,
        cpu_ratio=ours_s.cpu_s / theirs_s.cpu_s,
        baseline="for context: the same rows through the Python SDK in-process (insert_rows of"
        " dicts in batches of 10k, then client.flush())",
        ratio=ours_s.wall_s / theirs_s.wall_s,
        ratio_meaning="changelake HTTP / in-process SDK (time)",
        target=f">= {per_second(TARGET_ROWS_PER_S)} rows/s",
        met=ours_rate >= TARGET_ROWS_PER_S,
        rows=rows,
        notes=f"HTTP {per_second(ours_rate)} rows/s ({body_mb:.2f} MB per request,"
        f" {per_second(rate(rows, ours_s.cpu_s))} rows per CPU-second of client + server);"
        f" in-process SDK {per_second(theirs_rate)} rows/s;"
        f" server status after the run: {status['rows_inserted']:,} rows inserted,"
        f" {status['rows_errored']} errored; Spark jobs: {spark_jobs} (the server and the SDK"
        " start no JVM); CPU of HTTP = this process + the server process",
        extra={
            "rows_per_s": ours_rate,
            "baseline_rows_per_s": theirs_rate,
            "spark_jobs": float(spark_jobs),
        },
    )

"""`changelake serve` keeps dynamic tables up to date and runs tasks, over real processes and
real time: a second serve takes over when the first is SIGKILLed (mid-refresh or mid-run, or
not), no refresh or task run commits twice, every dynamic table still equals its query at its
data timestamp, a triggered task archived every row of its stream exactly once; the HTTP
routes."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import rows

import changelake
from changelake.scheduling.scheduler import LEASE

LEASE_SECONDS = 3.0


def _serve(wh: str, catalog: str, log: Path) -> tuple[subprocess.Popen, str]:
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "changelake.cli",
                "serve",
                wh,
                "--catalog",
                catalog,
                "--port",
                "0",
                "--scheduler-lease",
                str(LEASE_SECONDS),
            ],
            env={k: v for k, v in os.environ.items() if k != "CHANGELAKE_SERVE_TOKEN"},
            stderr=stderr,
        )
    deadline = time.monotonic() + 60
    while "listening on http://" not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process, log.read_text().split("listening on ", 1)[1].split()[0]


def _call(url: str, method: str, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        url + path, method=method, data=b"" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _wait(what: str, condition, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _refreshes(s, name: str) -> list:
    return s.catalog.refresh_history(s.catalog.table(name).table_id)


def _ts(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ")


# Each run costs two service JVMs and a minute and a half: the default run takes the SQLite
# catalog, the nightly run (README) PostgreSQL too; the lease's PostgreSQL locking is also tested
# in process (test_scheduler.py).
@pytest.mark.parametrize(
    "catalog_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.nightly)], indirect=True
)
def test_a_second_serve_takes_over_scheduling_when_the_first_is_killed(
    spark, catalog_url, tmp_path: Path
):
    wh = str(tmp_path / "wh")
    s = changelake.connect(wh, catalog=catalog_url, spark=spark)
    s.sql("CREATE TABLE src (k INT, v INT)")
    s.sql("INSERT INTO src VALUES (1, 1), (2, 2)")
    query = "SELECT k, SUM(v) AS total, COUNT(*) AS n FROM src GROUP BY k"
    s.sql(f"CREATE VIEW q AS {query}")
    s.sql(f"CREATE DYNAMIC TABLE agg TARGET_LAG = '2 seconds' AS {query}")
    s.sql("CREATE DYNAMIC TABLE top TARGET_LAG = '4 seconds' AS SELECT k FROM agg WHERE total > 2")
    s.sql("CREATE TABLE arch (k INT, v INT)")
    s.sql("CREATE TABLE ticks (at TIMESTAMP)")
    s.sql("CREATE STREAM st ON TABLE src")
    s.sql(
        "CREATE TASK archive USER_TASK_MINIMUM_TRIGGER_INTERVAL_IN_SECONDS = 1"
        " WHEN SYSTEM$STREAM_HAS_DATA('st')"
        " AS INSERT INTO arch SELECT k, v FROM st WHERE METADATA$ACTION = 'INSERT'"
    )
    s.sql("CREATE TASK tick SCHEDULE = '2 SECONDS' AS INSERT INTO ticks SELECT CURRENT_TIMESTAMP()")
    s.sql("ALTER TASK archive RESUME")
    s.sql("ALTER TASK tick RESUME")
    first, url = _serve(wh, catalog_url, tmp_path / "a.log")
    second = None
    try:
        status, listed = _call(url, "GET", "/v1/dynamic-tables")
        assert status == 200 and sorted(d["name"] for d in listed) == ["agg", "top"]
        for i in range(3, 6):
            s.sql(f"INSERT INTO src VALUES ({i % 3}, {i})")
            time.sleep(0.5)
        done = len(_refreshes(s, "agg"))
        _wait("scheduled refreshes", lambda: len(_refreshes(s, "agg")) >= done + 2)
        # kill it while it works: a refresh may be half done
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        before_kill = {r.refresh_id for r in s.catalog.refresh_history()}
        second, url = _serve(wh, catalog_url, tmp_path / "b.log")
        s.sql("INSERT INTO src VALUES (7, 70)")
        _wait(
            "the second serve's refreshes",
            lambda: any(
                r.refresh_id not in before_kill and r.record.state == "SUCCEEDED"
                for r in _refreshes(s, "top")
            ),
        )
        status, refreshed = _call(url, "POST", "/v1/dynamic-tables/agg/refresh")
        assert status == 200 and refreshed["state"] == "SUCCEEDED", refreshed
        status, detail = _call(url, "POST", "/v1/dynamic-tables/top/suspend")
        assert status == 200 and detail["scheduling_state"] == "SUSPENDED"
        status, history = _call(url, "GET", "/v1/dynamic-tables/agg/history?limit=3")
        assert status == 200 and len(history) == 3
        assert _call(url, "GET", "/v1/dynamic-tables/nope")[0] == 404
        _wait(
            "the archive task to catch up",
            lambda: not s.sql("SELECT SYSTEM$STREAM_HAS_DATA('st')").collect()[0][0],
        )
        status, listed = _call(url, "GET", "/v1/tasks")
        assert status == 200 and sorted(t["name"] for t in listed) == ["archive", "tick"]
        status, detail = _call(url, "POST", "/v1/tasks/tick/suspend")
        assert status == 200 and detail["state"] == "suspended"
        tick = s.catalog.find_task("tick").task_id
        _wait(  # a run that had started goes on: one graph run at a time
            "tick's last scheduled run",
            lambda: not s.catalog.task_runs(task_id=tick, state="EXECUTING"),
        )
        status, ran = _call(url, "POST", "/v1/tasks/tick/execute")
        assert status == 200 and [(r["name"], r["state"], r["trigger"]) for r in ran] == [
            ("tick", "SUCCEEDED", "MANUAL")
        ]
        status, history = _call(url, "GET", "/v1/tasks/archive/history?limit=2")
        assert status == 200 and all(r["trigger"] == "TRIGGERED" for r in history)
        assert _call(url, "GET", "/v1/tasks/nope")[0] == 404
        status, described = _call(url, "GET", "/openapi.json")
        assert status == 200
        assert {"/v1/tasks/{name}/execute", "/v1/dynamic-tables/{name}/refresh"} <= set(
            described["paths"]
        )
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=90)
    with s.catalog.engine.connect() as conn:
        epoch = conn.exec_driver_sql(f"SELECT epoch FROM cl_leases WHERE name = '{LEASE}'").scalar()
    assert epoch >= 2  # the second serve took the lease over
    for name in ("agg", "top"):
        succeeded = [
            r.record.data_timestamp for r in _refreshes(s, name) if r.record.state == "SUCCEEDED"
        ]
        assert succeeded == sorted(succeeded, reverse=True)
        assert len(set(succeeded)) == len(succeeded)  # no refresh committed twice
    at = s.catalog.find_dynamic_table("agg").data_timestamp
    assert Counter(rows(s.sql("SELECT * FROM agg"))) == Counter(
        rows(s.sql(f"SELECT * FROM q AT (TIMESTAMP => '{_ts(at)}')"))
    )
    # every row of the stream archived once; every tick committed with exactly its run
    inserted = Counter(rows(s.sql("SELECT * FROM src"))) - Counter([(1, 1), (2, 2)])  # before st
    assert Counter(rows(s.sql("SELECT * FROM arch"))) == inserted
    runs = s.catalog.task_runs()
    assert not [r for r in runs if r.state == "EXECUTING"]
    ticked = [r for r in runs if r.task_id == tick and r.state == "SUCCEEDED"]
    assert len(ticked) == rows(s.sql("SELECT COUNT(*) FROM ticks"))[0][0] >= 2
    scheduled = [r.scheduled_at for r in ticked if r.trigger == "SCHEDULED"]
    assert len(set(scheduled)) == len(scheduled)  # no slot ran twice

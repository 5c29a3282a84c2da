"""Ingest producers as real OS processes (``ingest_worker.py``): killed with SIGKILL at random
points and at each step of a flush, then restarted from the committed offset token, they land every
row exactly once; several processes on one table (SQLite and PostgreSQL catalogs) do too; and a
paused process whose channel was reopened elsewhere (a zombie) commits nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import changelake
from changelake.ingest import Client

WORKER = Path(__file__).with_name("ingest_worker.py")
TIMEOUT_SECONDS = 120


def _run(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=TIMEOUT_SECONDS)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{out}\n{err}"
    return out


def _ids(session: changelake.Session, table: str, producer: str | None = None) -> list[int]:
    where = f" WHERE producer = '{producer}'" if producer else ""
    return sorted(r[0] for r in session.sql(f"SELECT id FROM {table}{where}").collect())


def _table(session: changelake.Session, name: str = "events") -> None:
    session.sql(f"CREATE TABLE {name} (id BIGINT NOT NULL, producer STRING)")


@pytest.mark.parametrize("point", ["write", "commit", "committed"])
def test_a_producer_killed_at_each_step_of_a_flush_resumes_exactly_once(session, point):
    _table(session)
    wh = session.warehouse.root
    total = 400
    for k in (1, 3):
        proc = _run(wh, "-", "events", "p", str(total), "--batch", "5", "--kill-at", f"{point}:{k}")
        proc.communicate(timeout=TIMEOUT_SECONDS)
        assert proc.returncode == -signal.SIGKILL
    out = _finish(_run(wh, "-", "events", "p", str(total)))
    assert "DONE" in out
    assert _ids(session, "events") == list(range(total))


def test_a_producer_killed_at_random_times_lands_every_row_exactly_once(session):
    _table(session)
    wh = session.warehouse.root
    total, rng = 3000, random.Random(7)
    resumed = []
    for _ in range(5):
        proc = _run(wh, "-", "events", "p", str(total), "--batch", "20", "--lag", "0.02")
        assert proc.stdout is not None
        # The clock starts once the channel is open (start-up time depends on the machine's
        # load), then the producer inserts and flushes for a random time before the kill.
        resumed.append(proc.stdout.readline().strip())
        time.sleep(0.3 + rng.random() * 1.5)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=TIMEOUT_SECONDS)
    out = _finish(_run(wh, "-", "events", "p", str(total)))
    assert "DONE" in out
    assert _ids(session, "events") == list(range(total))
    # The kills landed mid-run: some restarts resumed from a committed token.
    assert any(line != "RESUMED None" for line in resumed), resumed


def test_producers_in_several_processes_share_a_table(spark, tmp_path, catalog_url):
    wh = str(tmp_path / "wh")
    session = changelake.connect(wh, catalog=catalog_url, spark=spark)
    try:
        _table(session)
        total = 600
        procs = [
            _run(wh, catalog_url, "events", f"p{i}", str(total), "--seed", str(i)) for i in range(3)
        ]
        for proc in procs:
            assert "DONE" in _finish(proc)
        for i in range(3):
            assert _ids(session, "events", f"p{i}") == list(range(total))
        tokens = Client(wh, catalog=catalog_url).latest_committed_offset_tokens(
            ["p0", "p1", "p2"], table="events"
        )
        assert tokens == {"p0": "599", "p1": "599", "p2": "599"}
    finally:
        session.close()


def test_a_paused_producer_whose_channel_was_reopened_is_fenced(session):
    _table(session)
    wh = session.warehouse.root
    zombie = _run(wh, "-", "events", "p", "10", "--pause-after-buffer", "--lag", "30", stdin=True)
    assert zombie.stdout is not None and zombie.stdin is not None
    for line in zombie.stdout:
        if line.startswith("BUFFERED"):
            break
    zombie.send_signal(signal.SIGSTOP)
    with Client(wh) as client:
        channel = client.open_channel("p", table="events")
        channel.insert_rows([{"id": 1, "producer": "new holder"}], end_offset_token="1")
        channel.wait_for_commit("1", timeout=30)
    zombie.send_signal(signal.SIGCONT)
    zombie.stdin.write("go\n")
    zombie.stdin.flush()
    out = _finish(zombie)
    assert "FENCED" in out and "reopened elsewhere" in out
    assert [tuple(r) for r in session.sql("SELECT id, producer FROM events").collect()] == [
        (1, "new holder")
    ]

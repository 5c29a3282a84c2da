"""Concurrent writers and crashed writers, as separate OS processes on one warehouse.

Each worker (``worker.py``) starts its own local[1] Spark, so a test costs a JVM start per process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import rows, state_of

import changelake
from changelake.dml.maintenance import ORPHAN_MARGIN_SECONDS
from changelake.storage.snapshot import RID, state_relation

WORKER = Path(__file__).with_name("worker.py")
PROCESS_TIMEOUT_SECONDS = 300


def _start(*args: str) -> subprocess.Popen[str]:
    env = os.environ | {"CHANGELAKE_SPARK_MASTER": "local[1]", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the JVM dies with it when killed
    )


def _outcome(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=PROCESS_TIMEOUT_SECONDS)
    found = [line for line in out.splitlines() if line.startswith("OUTCOME ")]
    assert proc.returncode == 0 and len(found) == 1, (
        f"worker exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err[-3000:]}"
    )
    return json.loads(found[0].removeprefix("OUTCOME "))


def _files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for top in ("data", "dv")
        for p in (root / top).rglob("*.parquet")
        if p.is_file()
    }


@pytest.fixture
def warehouse(tmp_path: Path, spark, clock):
    """A warehouse with table ``t`` holding ids 1..3 (version 1), opened by this process too."""
    path = tmp_path / "wh"
    session = changelake.connect(str(path), spark=spark, clock=clock)
    session.sql("CREATE TABLE t (id INT, name STRING, n INT)")
    session.sql("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)")
    yield path, session
    session.close()


def test_concurrent_appends_all_commit(warehouse):
    path, session = warehouse
    workers = [_start("append", str(path), "t", str(w), "50") for w in (1, 2)]
    outcomes = [_outcome(p) for p in workers]

    assert all(o["status"] == "committed" for o in outcomes)
    info = session.catalog.table("t")
    assert info.current_version == 101
    history = session.catalog.versions(info.table_id, after_exclusive=1)
    assert [v.version for v in history] == list(range(2, 102))
    assert [v.operation for v in history] == ["INSERT"] * 100
    assert len({v.statement_id for v in history}) == 100
    assert all(v.rows_inserted == 1 for v in history)
    expected = [(1, "a", 10), (2, "b", 20), (3, "c", 30)]
    expected += [(w * 1000 + i, f"w{w}", w) for w in (1, 2) for i in range(50)]
    assert rows(session.sql("SELECT * FROM t")) == sorted(expected)
    # Every row keeps a distinct identity although both writers allocated ids concurrently.
    state = state_relation(
        session.spark, session.warehouse, state_of(session, info), identity=True
    ).frame(session.spark)
    ids = [r[RID] for r in state.collect()]
    assert len(set(ids)) == len(ids) == 103


def test_concurrent_updates_of_same_rows_one_conflicts(warehouse, tmp_path):
    path, session = warehouse
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = {w: _start("update", str(path), "t", w, str(barrier)) for w in ("A", "B")}
    outcomes = {w: _outcome(p) for w, p in workers.items()}

    statuses = sorted(o["status"] for o in outcomes.values())
    assert statuses == ["committed", "conflict"], outcomes
    (winner,) = [w for w, o in outcomes.items() if o["status"] == "committed"]
    (loser,) = [w for w, o in outcomes.items() if o["status"] == "conflict"]
    assert outcomes[winner]["version"] == 2
    message = outcomes[loser]["message"]
    assert re.search(r"\btable t\b", message), message
    assert re.search(r"\bversion 2\b", message), message

    info = session.catalog.table("t")
    assert info.current_version == 2
    assert rows(session.sql("SELECT * FROM t")) == [
        (1, f"by {winner}", 11),
        (2, f"by {winner}", 21),
        (3, f"by {winner}", 31),
    ]
    history = session.catalog.versions(info.table_id)
    assert [v.operation for v in history].count("UPDATE") == 1
    assert history[-1].rows_updated == 3


def test_killed_writer_leaves_table_unchanged_and_vacuum_removes_its_files(warehouse, clock):
    path, session = warehouse
    before = _files(path)
    proc = _start("crash", str(path), "t")
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT_SECONDS
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "READY" or time.monotonic() > deadline:
                break
        else:
            pytest.fail(f"worker ended before writing its files:\n{proc.stderr.read()[-3000:]}")
        assert line.strip() == "READY"
        orphans = _files(path) - before
        assert any(f.startswith("data/") for f in orphans), orphans
        assert any(f.startswith("dv/") for f in orphans), orphans
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    info = session.catalog.table("t")
    assert info.current_version == 1
    expected = [(1, "a", 10), (2, "b", 20), (3, "c", 30)]
    assert rows(session.sql("SELECT * FROM t")) == expected

    session.sql("VACUUM t")  # inside the safety margin: a live writer could still commit them
    assert orphans <= _files(path)

    clock.advance(seconds=ORPHAN_MARGIN_SECONDS + 600)
    session.sql("VACUUM t")
    assert _files(path) == before
    assert rows(session.sql("SELECT * FROM t")) == expected
    session.sql("UPDATE t SET n = n + 1 WHERE id = 1")
    assert rows(session.sql("SELECT * FROM t")) == [(1, "a", 11), (2, "b", 20), (3, "c", 30)]

"""Streams under concurrency (issue 3, item 8).

Several streams on one table advance independently; two OS processes consuming one stream at once
(each with its own Spark, ``stream_worker.py``): exactly one commits, the other gets
StreamConsumedError and writes nothing, and every change reaches the target exactly once. The race
runs against the SQLite and the PostgreSQL catalog.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rows

import changelake
from changelake.errors import StreamConsumedError

WORKER = Path(__file__).with_name("stream_worker.py")
PROCESS_TIMEOUT_SECONDS = 400


def _frontier(session, name: str) -> int:
    return session.catalog.stream(name).frontier_version


def test_streams_on_one_table_advance_independently(session):
    session.sql("CREATE TABLE t (id INT, name STRING)")
    session.sql("CREATE TABLE sink (id INT, name STRING, action STRING, consumer STRING)")
    for name, options in (("a", ""), ("b", "APPEND_ONLY = TRUE"), ("c", "")):
        session.sql(f"CREATE STREAM {name} ON TABLE t {options}")
    consume = "INSERT INTO sink SELECT id, name, METADATA$ACTION, '{0}' FROM {0}"

    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")  # version 1
    session.sql(consume.format("a"))
    session.sql("DELETE FROM t WHERE id = 1")  # version 2
    session.sql("INSERT INTO t VALUES (3, 'c')")  # version 3
    session.sql(consume.format("b"))
    session.sql("UPDATE t SET name = 'B' WHERE id = 2")  # version 4

    assert (_frontier(session, "a"), _frontier(session, "b"), _frontier(session, "c")) == (1, 3, 0)
    change = "SELECT id, name, METADATA$ACTION FROM {}"
    assert rows(session.sql(change.format("a"))) == [
        (1, "a", "DELETE"),
        (2, "B", "INSERT"),
        (2, "b", "DELETE"),
        (3, "c", "INSERT"),
    ]
    assert rows(session.sql(change.format("b"))) == []
    assert rows(session.sql(change.format("c"))) == [(2, "B", "INSERT"), (3, "c", "INSERT")]
    assert rows(session.sql("SELECT * FROM sink")) == [
        (1, "a", "INSERT", "a"),
        (1, "a", "INSERT", "b"),
        (2, "b", "INSERT", "a"),
        (2, "b", "INSERT", "b"),
        (3, "c", "INSERT", "b"),
    ]
    # Consuming or dropping one stream leaves the others where they are.
    session.sql(consume.format("c"))
    session.sql("DROP STREAM a")
    assert (_frontier(session, "b"), _frontier(session, "c")) == (3, 4)
    shown = {r["name"]: r["frontier_version"] for r in session.sql("SHOW STREAMS").collect()}
    assert shown == {"b": 3, "c": 4}


def _start(*args: str) -> subprocess.Popen[str]:
    env = os.environ | {"CHANGELAKE_SPARK_MASTER": "local[1]", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _outcome(proc: subprocess.Popen[str]) -> dict:
    try:
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    found = [line for line in out.splitlines() if line.startswith("OUTCOME ")]
    assert proc.returncode == 0 and len(found) == 1, (
        f"worker exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err[-3000:]}"
    )
    return json.loads(found[0].removeprefix("OUTCOME "))


# Each case starts two JVMs: the default run covers each catalog kind and each source kind once,
# the nightly run (README) the other two pairs.
@pytest.mark.parametrize(
    ("catalog_url", "source"),
    [
        ("sqlite", "VIEW v"),
        ("postgresql", "TABLE t"),
        pytest.param("sqlite", "TABLE t", marks=pytest.mark.nightly),
        pytest.param("postgresql", "VIEW v", marks=pytest.mark.nightly),
    ],
    indirect=["catalog_url"],
)
def test_two_processes_racing_on_one_stream_consume_it_exactly_once(
    tmp_path, spark, clock, catalog_url, source
):
    warehouse = str(tmp_path / "wh")
    session = changelake.connect(warehouse, catalog=catalog_url, spark=spark, clock=clock)
    session.sql("CREATE TABLE t (id INT, name STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    session.sql("CREATE VIEW v AS SELECT id, name FROM t WHERE id > 0")
    session.sql(f"CREATE STREAM s ON {source}")
    session.sql("CREATE TABLE sink (id INT, name STRING, action STRING, worker INT)")
    session.sql("INSERT INTO t VALUES (4, 'd'), (5, 'e')")
    session.sql("UPDATE t SET name = 'A' WHERE id = 1")
    session.sql("DELETE FROM t WHERE id = 2")
    pending = [
        (1, "A", "INSERT"),
        (1, "a", "DELETE"),
        (2, "b", "DELETE"),
        (4, "d", "INSERT"),
        (5, "e", "INSERT"),
    ]
    assert rows(session.sql("SELECT id, name, METADATA$ACTION FROM s")) == pending
    source_version = session.catalog.table("t").current_version

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = [_start(warehouse, catalog_url, "s", "sink", str(barrier), str(w)) for w in (1, 2)]
    outcomes = [_outcome(p) for p in workers]

    statuses = sorted(o["status"] for o in outcomes)
    assert statuses == ["committed", "consumed"], outcomes
    assert all(o["read"] == len(pending) for o in outcomes), "both read before either committed"
    loser = next(o for o in outcomes if o["status"] == "consumed")
    assert "consumed concurrently" in loser["message"]
    winner = 1 + [o["status"] for o in outcomes].index("committed")

    # Exactly the winner's rows, once; the loser wrote no version.
    sink = session.catalog.table("sink")
    assert sink.current_version == 1
    assert rows(session.sql("SELECT * FROM sink")) == [(*p, winner) for p in pending]
    assert session.catalog.stream("s").frontiers == ((1, source_version),)
    assert session.stream_has_data("s") is False

    # Nothing lost either: later changes are consumed once, by whoever reads next.
    session.sql("INSERT INTO t VALUES (6, 'f')")
    session.sql("INSERT INTO sink SELECT id, name, METADATA$ACTION, 0 FROM s")
    assert rows(session.sql("SELECT * FROM sink")) == sorted(
        [(*p, winner) for p in pending] + [(6, "f", "INSERT", 0)]
    )
    assert rows(session.sql("SELECT * FROM s")) == []
    session.close()


def test_consume_in_process_loses_cleanly_to_a_concurrent_session(session, spark):
    """The same race between two sessions of one process: the later COMMIT fails whole."""
    session.sql("CREATE TABLE t (id INT)")
    session.sql("CREATE STREAM s ON TABLE t")
    session.sql("CREATE TABLE sink (id INT, who STRING)")
    session.sql("INSERT INTO t VALUES (1), (2)")
    other = changelake.connect(session.warehouse.root, spark=spark, clock=session.clock)
    try:
        mine, theirs = other, session
        for who, s in (("mine", mine), ("theirs", theirs)):
            s.sql("BEGIN")
            s.sql(f"INSERT INTO sink SELECT id, '{who}' FROM s")
        mine.sql("COMMIT")
        with pytest.raises(StreamConsumedError, match="consumed concurrently"):
            theirs.sql("COMMIT")
        assert rows(session.sql("SELECT * FROM sink")) == [(1, "mine"), (2, "mine")]
        assert theirs.transaction is None, "the failed COMMIT ended the transaction"
        assert session.catalog.table("sink").current_version == 1
    finally:
        other.close()

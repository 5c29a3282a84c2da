"""Stream staleness and retention (issue 3, item 9; paper 2.3, 3.3).

A stream keeps the history after its frontier readable — VACUUM spares it — for at most
max(DATA_RETENTION_TIME_IN_DAYS, MAX_DATA_EXTENSION_TIME_IN_DAYS) days after its first unconsumed
change; past that the stream is stale. Time is the ManualClock's; nothing sleeps.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest
from conftest import rows

from changelake.errors import InvalidStatementError, StaleStreamError, TimeTravelError

DAY = 86400.0
CHANGE = "SELECT id, name, METADATA$ACTION, METADATA$ISUPDATE FROM {}"


def _committed_at(session, table: str, version: int) -> float:
    return session.catalog.version_info(session.catalog.table(table).table_id, version).committed_at


def _shown(session, stream: str) -> tuple[bool, dt.datetime | None]:
    (row,) = [r for r in session.sql("SHOW STREAMS").collect() if r["name"] == stream]
    described = session.sql(f"DESCRIBE STREAM {stream}").first()
    assert (described["stale"], described["stale_after"]) == (row["stale"], row["stale_after"])
    return row["stale"], row["stale_after"]


def _at(epoch: float) -> dt.datetime:
    """How SHOW STREAMS renders an epoch (a session-local TIMESTAMP, microseconds)."""
    return dt.datetime.fromtimestamp(round(epoch, 6))


def _on_disk(session, table: str) -> dict[str, bool]:
    """Every registered data file of ``table`` (by path) and whether it still exists."""
    files = session.catalog.all_file_paths(session.catalog.table(table).table_id)
    return {path: os.path.exists(session.warehouse.fs_path(path)) for path, _, _ in files}


def test_retention_properties_in_create_and_alter_set_the_stale_after_time(session, clock):
    session.sql(
        "CREATE TABLE t (id INT) DATA_RETENTION_TIME_IN_DAYS = 1 MAX_DATA_EXTENSION_TIME_IN_DAYS = 3"
    )
    info = session.catalog.table("t")
    assert (info.retention_days(), info.max_extension_days()) == (1.0, 3.0)
    session.sql("CREATE STREAM s ON TABLE t")
    assert _shown(session, "s") == (False, None)  # nothing pending, nothing to expire

    clock.advance(seconds=90)
    session.sql("INSERT INTO t VALUES (1)")
    first = _committed_at(session, "t", 1)
    assert _shown(session, "s") == (False, _at(first + 3 * DAY))

    session.sql("ALTER TABLE t SET MAX_DATA_EXTENSION_TIME_IN_DAYS = 5")
    assert session.catalog.table("t").max_extension_days() == 5.0
    assert _shown(session, "s") == (False, _at(first + 5 * DAY))
    # Retention longer than the extension: the stream keeps history for the retention period.
    session.sql("ALTER TABLE t SET DATA_RETENTION_TIME_IN_DAYS = 7")
    assert _shown(session, "s") == (False, _at(first + 7 * DAY))
    session.sql("ALTER TABLE t SET MAX_DATA_EXTENSION_TIME_IN_DAYS = 0")
    assert _shown(session, "s") == (False, _at(first + 7 * DAY))
    # The clock is measured from the first *unconsumed* change: consuming restarts it.
    session.sql("ALTER TABLE t SET DATA_RETENTION_TIME_IN_DAYS = 1")
    clock.advance(days=0.5)
    session.sql("CREATE TABLE sink (id INT)")
    session.sql("INSERT INTO sink SELECT id FROM s")
    assert _shown(session, "s") == (False, None)
    clock.advance(days=0.75)
    session.sql("INSERT INTO t VALUES (2)")
    assert _shown(session, "s") == (False, _at(_committed_at(session, "t", 2) + 1 * DAY))

    for bad in ("-1", "'soon'"):
        with pytest.raises(InvalidStatementError, match="MAX_DATA_EXTENSION_TIME_IN_DAYS"):
            session.sql(f"ALTER TABLE t SET MAX_DATA_EXTENSION_TIME_IN_DAYS = {bad}")
    with pytest.raises(InvalidStatementError, match="MAX_DATA_EXTENSION_TIME_IN_DAYS"):
        session.sql("CREATE TABLE u (id INT) MAX_DATA_EXTENSION_TIME_IN_DAYS = -2")
    assert session.catalog.find_table("u") is None
    assert session.catalog.table("t").max_extension_days() == 0.0


def _history(session, table: str) -> None:
    """Versions 1-3 (file A inserted, then removed; file B inserted), all at the same time."""
    session.sql(
        f"CREATE TABLE {table} (id INT, name STRING)"
        " DATA_RETENTION_TIME_IN_DAYS = 1 MAX_DATA_EXTENSION_TIME_IN_DAYS = 3"
    )
    session.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    session.sql(f"DELETE FROM {table} WHERE id = 1")
    session.sql(f"INSERT INTO {table} VALUES (2, 'b')")


def test_vacuum_keeps_what_a_live_stream_needs_until_it_goes_stale(session, clock):
    _history(session, "t")
    _history(session, "control")  # the same history, no stream
    session.sql("CREATE STREAM s ON TABLE t")  # frontier: version 3
    clock.advance(seconds=60)
    session.sql("UPDATE t SET name = 'B' WHERE id = 2")  # version 4 replaces file B
    session.sql("UPDATE control SET name = 'B' WHERE id = 2")
    pending = [(2, "B", "INSERT", True), (2, "b", "DELETE", True)]
    deadline = _committed_at(session, "t", 4) + 3 * DAY

    # Two days on, retention (1 day) has expired versions 1-3 of both tables.
    clock.advance(days=2)
    session.sql("VACUUM t")
    session.sql("VACUUM control")
    assert sorted(_on_disk(session, "control").values()) == [True], "only the live file is left"
    kept = _on_disk(session, "t")
    assert len(kept) == 2 and all(kept.values()), "the stream still needs file B"
    for table in ("t", "control"):
        for version in (1, 3):
            with pytest.raises(TimeTravelError, match="retention"):
                session.sql(f"SELECT * FROM {table} AT (VERSION => {version})").collect()
    # ... but the stream reads its changes, from the data VACUUM kept for it.
    assert _shown(session, "s") == (False, _at(deadline))
    assert rows(session.sql(CHANGE.format("s"))) == pending
    assert session.stream_has_data("s") is True

    # Just before the maximum extension runs out the stream is live; just after, stale.
    clock.advance(seconds=deadline - clock.now() - 1)
    assert _shown(session, "s") == (False, _at(deadline))
    session.sql("VACUUM t")
    assert len(_on_disk(session, "t")) == 2
    clock.advance(seconds=2)
    assert _shown(session, "s") == (True, _at(deadline))

    session.sql("CREATE TABLE sink (id INT, name STRING)")
    for read in (
        CHANGE.format("s"),
        "INSERT INTO sink SELECT id, name FROM s",
        "SELECT SYSTEM$STREAM_HAS_DATA('s')",
        "SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (STREAM => 's')",
    ):
        with pytest.raises(StaleStreamError) as caught:
            session.sql(read).collect()
        message = str(caught.value)
        assert "Stream s is stale" in message
        assert "CREATE OR REPLACE STREAM s ON TABLE t" in message
        assert "MAX_DATA_EXTENSION_TIME_IN_DAYS = 3" in message
    assert session.catalog.table("sink").current_version == 0
    assert session.catalog.stream("s").frontier_version == 3

    # A stale stream protects nothing: VACUUM now removes file B.
    session.sql("VACUUM t")
    assert sorted(_on_disk(session, "t").values()) == [True]
    assert _shown(session, "s")[0] is True

    # Recreated as the error says, the stream is live again, from the table's current rows.
    session.sql("CREATE OR REPLACE STREAM s ON TABLE t SHOW_INITIAL_ROWS = TRUE")
    assert _shown(session, "s") == (False, None)
    assert rows(session.sql(CHANGE.format("s"))) == [(2, "B", "INSERT", False)]
    session.sql("INSERT INTO sink SELECT id, name FROM s")
    assert rows(session.sql("SELECT * FROM sink")) == [(2, "B")]


def test_a_stream_that_consumes_in_time_never_goes_stale(session, clock):
    session.sql(
        "CREATE TABLE t (id INT) DATA_RETENTION_TIME_IN_DAYS = 0 MAX_DATA_EXTENSION_TIME_IN_DAYS = 1"
    )
    session.sql("CREATE TABLE sink (id INT)")
    session.sql("CREATE STREAM s ON TABLE t")
    session.sql("CREATE STREAM idle ON TABLE t")
    for i in range(3):
        session.sql(f"INSERT INTO t VALUES ({i})")
        session.sql(f"DELETE FROM t WHERE id = {i - 1}")
        clock.advance(days=0.75)
        session.sql("INSERT INTO sink SELECT id FROM s WHERE METADATA$ACTION = 'INSERT'")
        session.sql("VACUUM t")
        assert _shown(session, "s") == (False, None)
    assert rows(session.sql("SELECT * FROM sink")) == [(0,), (1,), (2,)]
    assert _shown(session, "idle")[0] is True
    with pytest.raises(StaleStreamError, match="CREATE OR REPLACE STREAM idle ON TABLE t"):
        session.sql("SELECT * FROM idle").collect()


def test_a_stream_on_a_replaced_table_is_stale_and_says_how_to_recreate_it(session):
    session.sql("CREATE TABLE t (id INT)")
    session.sql("CREATE STREAM s ON TABLE t")
    session.sql("INSERT INTO t VALUES (1)")
    session.sql("ALTER TABLE t RENAME TO t_old")  # renaming keeps the table, and the stream live
    assert _shown(session, "s")[0] is False
    session.sql("ALTER TABLE t_old RENAME TO t")
    session.sql("CREATE OR REPLACE TABLE t (id INT, note STRING)")
    assert _shown(session, "s")[0] is True
    for read in (
        "SELECT * FROM s",
        "SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (STREAM => 's')",
    ):
        with pytest.raises(StaleStreamError, match="replaced") as caught:
            session.sql(read).collect()
        assert "CREATE OR REPLACE STREAM s ON TABLE t" in str(caught.value)
    session.sql("CREATE OR REPLACE STREAM s ON TABLE t")
    session.sql("INSERT INTO t VALUES (2, 'new')")
    assert rows(session.sql("SELECT id, note, METADATA$ACTION FROM s")) == [(2, "new", "INSERT")]

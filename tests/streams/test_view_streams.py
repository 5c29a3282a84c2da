"""Streams on views (issue 8, item 6): a frontier per base table, consumed exactly once inside
ordinary DML, equal to the view's CHANGES over the same interval, stale when the view is
redefined or a base table's changes fall out of retention."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import rows
from support.paper import LISTING_8, listing_6, listing_8_changes

from changelake.errors import (
    InvalidStatementError,
    StaleStreamError,
    StreamConsumedError,
    UnsupportedError,
)

DAY = 86400.0
CHANGE = "name, item, METADATA$ACTION, METADATA$ISUPDATE"


def test_a_stream_on_a_view_is_consumed_exactly_once_by_dml(session, clock):
    listing_6(session)
    session.sql("CREATE STREAM oi_stream ON VIEW owner_and_items")
    session.sql("CREATE TABLE audit (name STRING, item STRING, action STRING, isupdate BOOLEAN)")
    assert session.stream_has_data("oi_stream") is False
    assert rows(session.sql(f"SELECT {CHANGE} FROM oi_stream")) == []
    clock.advance(seconds=60)
    listing_8_changes(session)
    assert session.stream_has_data("oi_stream") is True

    # the stream and CHANGES AT (STREAM => ...) agree, with the same ROW_IDs
    from_stream = session.sql(f"SELECT {CHANGE}, METADATA$ROW_ID FROM oi_stream").collect()
    changes = session.sql(
        f"SELECT {CHANGE}, METADATA$ROW_ID FROM owner_and_items"
        " CHANGES (INFORMATION => DEFAULT) AT (STREAM => 'oi_stream')"
    ).collect()
    assert sorted(map(tuple, from_stream)) == sorted(map(tuple, changes))
    assert sorted(tuple(r)[:4] for r in from_stream) == LISTING_8

    session.sql(
        "INSERT INTO audit SELECT name, item, METADATA$ACTION, METADATA$ISUPDATE FROM oi_stream"
    )
    assert rows(session.sql("SELECT * FROM audit")) == LISTING_8
    assert rows(session.sql(f"SELECT {CHANGE} FROM oi_stream")) == []
    assert session.stream_has_data("oi_stream") is False
    assert dict(session.catalog.stream("oi_stream").frontiers) == {
        session.catalog.table("people").table_id: 2,
        session.catalog.table("items").table_id: 4,
    }

    # a change to either table reaches the stream once
    session.sql("INSERT INTO people VALUES (5, 'Bunny')")
    session.sql("INSERT INTO items VALUES (16, 5, 'Toe', NULL)")
    session.sql("UPDATE people SET name = 'The Dude' WHERE id = 1")
    assert rows(session.sql(f"SELECT {CHANGE} FROM oi_stream")) == [
        ("Bunny", "Toe", "INSERT", False),
        ("Jeffrey", "Ford", "DELETE", True),
        ("The Dude", "Ford", "INSERT", True),
    ]
    session.sql(
        "INSERT INTO audit SELECT name, item, METADATA$ACTION, METADATA$ISUPDATE FROM oi_stream"
    )
    assert len(rows(session.sql("SELECT * FROM audit"))) == len(LISTING_8) + 3
    assert rows(session.sql("SELECT * FROM oi_stream")) == []


def test_a_stream_on_a_view_equals_the_snapshot_diff_of_the_view(session, clock):
    """The oracle: what a stream returns equals the view's EXCEPT ALL diff between the points."""
    session.sql("CREATE TABLE t (k INT, v INT)")
    session.sql("CREATE TABLE d (k INT, label STRING)")
    session.sql("INSERT INTO t VALUES (1, 10), (2, 20), (3, 30), (4, 40)")
    session.sql("INSERT INTO d VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    session.sql(
        "CREATE VIEW agg AS SELECT label, COUNT(*) AS n, SUM(v) AS total"
        " FROM t LEFT JOIN d ON t.k = d.k WHERE v > 5 GROUP BY label"
    )
    session.sql("CREATE STREAM s ON VIEW agg")
    clock.advance(seconds=10)
    start = dt.datetime.fromtimestamp(clock.now()).isoformat(sep=" ")
    clock.advance(seconds=10)
    session.sql("UPDATE t SET v = 1 WHERE k = 1")
    session.sql("INSERT INTO t VALUES (5, 50), (6, 60)")
    session.sql("UPDATE d SET label = 'TWO' WHERE k = 2")
    session.sql("INSERT INTO d VALUES (5, 'five')")
    got = rows(session.sql("SELECT label, n, total, METADATA$ACTION FROM s"))
    before = f"SELECT label, n, total FROM agg AT (TIMESTAMP => '{start}')"
    now = "SELECT label, n, total FROM agg"
    diff = rows(
        session.sql(
            f"SELECT *, 'DELETE' FROM ({before} EXCEPT ALL {now})"
            f" UNION ALL SELECT *, 'INSERT' FROM ({now} EXCEPT ALL {before})"
        )
    )
    assert got == diff and got


def test_reads_inside_a_transaction_repeat_and_consume_once(session):
    listing_6(session)
    session.sql("CREATE STREAM s ON VIEW owner_and_items")
    session.sql("CREATE TABLE audit (name STRING, item STRING, action STRING)")
    listing_8_changes(session)
    session.sql("BEGIN")
    first = rows(session.sql("SELECT name, item, METADATA$ACTION FROM s"))
    session.sql("INSERT INTO people VALUES (9, 'Smokey')")  # not the stream's business yet
    session.sql("INSERT INTO audit SELECT name, item, METADATA$ACTION FROM s")
    assert rows(session.sql("SELECT name, item, METADATA$ACTION FROM s")) == first
    session.sql("ROLLBACK")
    assert rows(session.sql("SELECT name, item, METADATA$ACTION FROM s")) == first
    assert rows(session.sql("SELECT * FROM audit")) == []

    session.sql("BEGIN")
    session.sql("INSERT INTO audit SELECT name, item, METADATA$ACTION FROM s")
    session.sql("INSERT INTO audit SELECT name, item, METADATA$ACTION FROM s")
    session.sql("COMMIT")
    assert rows(session.sql("SELECT * FROM audit")) == sorted(first + first)
    assert rows(session.sql("SELECT * FROM s")) == []


def test_two_sessions_consuming_one_view_stream_commit_once(session, spark):
    import changelake

    listing_6(session)
    session.sql("CREATE STREAM s ON VIEW owner_and_items")
    session.sql("CREATE TABLE audit (name STRING, who STRING)")
    listing_8_changes(session)
    other = changelake.connect(session.warehouse.root, spark=spark, clock=session.clock)
    try:
        for who, s in (("mine", other), ("theirs", session)):
            s.sql("BEGIN")
            s.sql(f"INSERT INTO audit SELECT name, '{who}' FROM s")
        other.sql("COMMIT")
        with pytest.raises(StreamConsumedError, match="consumed concurrently"):
            session.sql("COMMIT")
        assert {r[1] for r in rows(session.sql("SELECT * FROM audit"))} == {"mine"}
        assert rows(session.sql("SELECT * FROM s")) == []
    finally:
        other.close()


def test_append_only_and_initial_rows_on_views(session):
    listing_6(session)
    session.sql("CREATE STREAM ao ON VIEW owner_and_items APPEND_ONLY = TRUE")
    session.sql("CREATE STREAM init ON VIEW owner_and_items SHOW_INITIAL_ROWS = TRUE")
    assert session.stream_has_data("init") is True
    initial = rows(session.sql(f"SELECT {CHANGE} FROM init"))
    assert initial == [
        (n, i, "INSERT", False) for n, i in rows(session.sql("SELECT * FROM owner_and_items"))
    ]
    # like APPEND_ONLY on a table: rows the view gains through inserts, never through updates
    listing_8_changes(session)
    assert rows(session.sql(f"SELECT {CHANGE} FROM ao")) == []
    session.sql("INSERT INTO items VALUES (16, 4, 'Toe', NULL), (17, 7, 'Nobody''s', NULL)")
    session.sql("INSERT INTO people VALUES (7, 'Bunny')")
    assert rows(session.sql(f"SELECT {CHANGE} FROM ao")) == [
        ("Bunny", "Nobody's", "INSERT", False),
        ("Maude", "Toe", "INSERT", False),
    ]
    session.sql("CREATE TABLE sink (name STRING)")
    session.sql("INSERT INTO sink SELECT name FROM init")
    assert rows(session.sql(f"SELECT {CHANGE} FROM init")) == []

    session.sql("CREATE VIEW counts AS SELECT oid, COUNT(*) AS n FROM items GROUP BY oid")
    with pytest.raises(UnsupportedError, match="APPEND_ONLY = TRUE.*GROUP BY"):
        session.sql("CREATE STREAM bad ON VIEW counts APPEND_ONLY = TRUE")
    assert session.catalog.find_stream("bad") is None


def test_show_streams_and_wrong_object_kinds(session):
    listing_6(session)
    session.sql("CREATE STREAM on_t ON TABLE items")
    session.sql("CREATE STREAM on_v ON VIEW owner_and_items COMMENT = 'owners'")
    shown = {
        r["name"]: (r["table_name"], r["source_type"], r["base_tables"], r["frontier_version"])
        for r in session.sql("SHOW STREAMS").collect()
    }
    assert shown == {
        "on_t": ("items", "TABLE", "items", 1),
        "on_v": ("owner_and_items", "VIEW", "items, people", None),
    }
    described = session.sql("DESCRIBE STREAM on_v").first()
    assert (described["source_type"], described["comment"], described["stale"]) == (
        "VIEW",
        "owners",
        False,
    )
    with pytest.raises(InvalidStatementError, match="is a view: write CREATE STREAM x ON VIEW"):
        session.sql("CREATE STREAM x ON TABLE owner_and_items")
    with pytest.raises(InvalidStatementError, match="is a table: write CREATE STREAM x ON TABLE"):
        session.sql("CREATE STREAM x ON VIEW items")
    with pytest.raises(InvalidStatementError, match="on view owner_and_items, not table items"):
        session.sql("SELECT * FROM items CHANGES (INFORMATION => DEFAULT) AT (STREAM => 'on_v')")
    with pytest.raises(InvalidStatementError, match="on a table, not on view owner_and_items"):
        session.sql(
            "SELECT * FROM owner_and_items CHANGES (INFORMATION => DEFAULT) AT (STREAM => 'on_t')"
        )
    lines = [r[0] for r in session.sql("EXPLAIN SELECT * FROM on_v").collect()]
    assert lines[0] == "STREAM on_v on view owner_and_items:"
    assert any(line.startswith("derivative:") for line in lines)


def test_a_stream_starts_at_a_point_on_every_base_table(session, clock):
    listing_6(session)
    clock.advance(seconds=60)
    at = dt.datetime.fromtimestamp(clock.now()).isoformat(sep=" ")
    clock.advance(seconds=60)
    listing_8_changes(session)
    session.sql(f"CREATE STREAM s ON VIEW owner_and_items AT (TIMESTAMP => '{at}')")
    assert sorted(tuple(r)[:4] for r in session.sql(f"SELECT {CHANGE} FROM s").collect()) == (
        LISTING_8
    )


def test_redefining_or_dropping_the_view_makes_its_streams_stale(session):
    listing_6(session)
    session.sql("CREATE VIEW names AS SELECT name FROM owner_and_items")
    session.sql("CREATE STREAM s ON VIEW owner_and_items")
    session.sql("CREATE STREAM over ON VIEW names")
    session.sql("CREATE STREAM fine ON VIEW owner_and_items")
    session.sql("CREATE OR REPLACE VIEW owner_and_items AS SELECT name, item FROM people, items")
    for stream in ("s", "over"):
        with pytest.raises(StaleStreamError, match="was redefined.*CREATE OR REPLACE STREAM"):
            session.sql(f"SELECT * FROM {stream}")
    assert {r["name"]: r["stale"] for r in session.sql("SHOW STREAMS").collect()} == {
        "s": True,
        "over": True,
        "fine": True,
    }
    session.sql("CREATE OR REPLACE STREAM s ON VIEW owner_and_items")
    assert rows(session.sql("SELECT * FROM s")) == []
    session.sql("DROP VIEW names")
    with pytest.raises(StaleStreamError, match="view names was dropped"):
        session.sql("SELECT * FROM over")


def test_a_view_stream_keeps_base_history_and_goes_stale_past_retention(session, clock):
    session.sql(
        "CREATE TABLE t (id INT, name STRING)"
        " DATA_RETENTION_TIME_IN_DAYS = 1 MAX_DATA_EXTENSION_TIME_IN_DAYS = 3"
    )
    session.sql("CREATE TABLE u (id INT)")
    session.sql("INSERT INTO t VALUES (1, 'a')")
    session.sql("INSERT INTO u VALUES (1)")
    session.sql("CREATE VIEW tu AS SELECT t.id, name FROM t JOIN u ON t.id = u.id")
    session.sql("CREATE STREAM s ON VIEW tu")
    clock.advance(seconds=60)
    session.sql("UPDATE t SET name = 'b' WHERE id = 1")
    changed = session.catalog.version_info(session.catalog.table("t").table_id, 2).committed_at
    (row,) = session.sql("SHOW STREAMS").collect()
    assert (row["stale"], row["stale_after"]) == (
        False,
        dt.datetime.fromtimestamp(round(changed + 3 * DAY, 6)),
    )
    clock.advance(seconds=2 * DAY)
    session.sql("VACUUM t")  # the stream holds t's history back past retention
    assert rows(session.sql("SELECT id, name, METADATA$ACTION FROM s")) == [
        (1, "a", "DELETE"),
        (1, "b", "INSERT"),
    ]
    clock.advance(seconds=2 * DAY)
    with pytest.raises(StaleStreamError, match="on table t fell out of retention"):
        session.sql("SELECT * FROM s")
    assert session.sql("SHOW STREAMS").first()["stale"] is True

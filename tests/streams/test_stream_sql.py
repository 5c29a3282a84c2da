"""STREAM objects in SQL (issue 3, items 6 and 7).

CREATE / DROP / SHOW / DESCRIBE STREAM, SYSTEM$STREAM_HAS_DATA, and which statements move a
stream's frontier: queries never do; every DML kind that reads the stream does, in the same catalog
transaction as its own write; inside BEGIN ... COMMIT the stream reads the same changes throughout.
"""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import rows

import changelake
from changelake.catalog import commit as commit_path
from changelake.errors import (
    ConflictError,
    InvalidStatementError,
    ObjectExistsError,
    StreamNotFoundError,
    TableNotFoundError,
    TimeTravelError,
    TransactionError,
)

CHANGE = "id, name, METADATA$ACTION, METADATA$ISUPDATE"


def _frontier(session, name: str) -> int:
    return session.catalog.stream(name).frontier_version


def _version(session, table: str) -> int:
    return session.catalog.table(table).current_version


def _changes(session, stream: str) -> list[tuple]:
    return rows(session.sql(f"SELECT {CHANGE} FROM {stream}"))


def _has_data(session, stream: str) -> bool:
    in_sql = session.sql(f"SELECT SYSTEM$STREAM_HAS_DATA('{stream}') AS d").first()["d"]
    assert in_sql is session.stream_has_data(stream)
    return in_sql


@pytest.fixture
def t(session):
    """Table ``t`` holding (1, 'a'), (2, 'b') at version 1."""
    session.sql("CREATE TABLE t (id INT, name STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    return session


# -- CREATE STREAM and its options ------------------------------------------------------------


def test_stream_reads_changes_after_its_creation_and_selecting_does_not_move_it(t):
    created = t.sql("CREATE STREAM s ON TABLE t").first()
    assert (created["operation"], created["object"], created["version"]) == (
        "CREATE STREAM",
        "s",
        1,
    )
    empty = t.sql("SELECT * FROM s")
    assert empty.columns == [
        "id",
        "name",
        "METADATA$ACTION",
        "METADATA$ISUPDATE",
        "METADATA$ROW_ID",
    ]
    assert empty.collect() == []
    assert _has_data(t, "s") is False

    t.sql("INSERT INTO t VALUES (3, 'c')")
    t.sql("UPDATE t SET name = 'B' WHERE id = 2")
    t.sql("DELETE FROM t WHERE id = 1")
    expected = [
        (1, "a", "DELETE", False),
        (2, "B", "INSERT", True),
        (2, "b", "DELETE", True),
        (3, "c", "INSERT", False),
    ]
    assert _has_data(t, "s") is True
    assert _changes(t, "s") == expected
    assert rows(t.sql("SELECT name, METADATA$ACTION FROM s WHERE id = 3")) == [("c", "INSERT")]
    assert rows(t.sql("SELECT COUNT(*) FROM s")) == [(4,)]
    # Queries, however often, leave the frontier where it was.
    assert _frontier(t, "s") == 1
    assert _changes(t, "s") == expected
    pair = {r["METADATA$ROW_ID"] for r in t.sql("SELECT * FROM s WHERE id = 2").collect()}
    assert len(pair) == 1, "an update's DELETE and INSERT share the row id"


def test_append_only_stream_ignores_deletes_and_updates(t):
    t.sql("CREATE STREAM s_all ON TABLE t")
    t.sql("CREATE STREAM s_ins ON TABLE t APPEND_ONLY = TRUE")
    t.sql("INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    t.sql("UPDATE t SET name = 'C' WHERE id = 3")  # updated after its insert: inserted values
    t.sql("DELETE FROM t WHERE id IN (1, 4)")  # a pre-existing row and an interval row
    t.sql("UPDATE t SET name = 'B' WHERE id = 2")
    assert _changes(t, "s_ins") == [(3, "c", "INSERT", False), (4, "d", "INSERT", False)]
    assert _changes(t, "s_all") == [
        (1, "a", "DELETE", False),
        (2, "B", "INSERT", True),
        (2, "b", "DELETE", True),
        (3, "C", "INSERT", False),
    ]
    # Deletes alone give an append-only stream nothing to consume.
    t.sql("CREATE TABLE sink (id INT, name STRING)")
    t.sql("INSERT INTO sink SELECT id, name FROM s_ins")
    t.sql("DELETE FROM t WHERE id = 2")
    assert _changes(t, "s_ins") == []
    assert _has_data(t, "s_ins") is False
    assert rows(t.sql("SELECT * FROM sink")) == [(3, "c"), (4, "d")]
    shown = {r["name"]: r["mode"] for r in t.sql("SHOW STREAMS").collect()}
    assert shown == {"s_all": "DEFAULT", "s_ins": "APPEND_ONLY"}


def test_show_initial_rows_first_read_is_the_table_then_changes(t):
    t.sql("CREATE STREAM s ON TABLE t SHOW_INITIAL_ROWS = TRUE")
    t.sql("CREATE STREAM s_ins ON TABLE t APPEND_ONLY = TRUE SHOW_INITIAL_ROWS = TRUE")
    t.sql("UPDATE t SET name = 'A' WHERE id = 1")
    initial = [(1, "A", "INSERT", False), (2, "b", "INSERT", False)]
    assert _has_data(t, "s") is True
    assert _changes(t, "s") == initial
    assert _changes(t, "s_ins") == initial
    t.sql("CREATE TABLE sink (id INT, name STRING, action STRING)")
    t.sql("INSERT INTO sink SELECT id, name, METADATA$ACTION FROM s")
    assert rows(t.sql("SELECT * FROM sink")) == [(1, "A", "INSERT"), (2, "b", "INSERT")]
    assert _frontier(t, "s") == 2
    assert _changes(t, "s") == [] and _has_data(t, "s") is False
    t.sql("DELETE FROM t WHERE id = 2")
    assert _changes(t, "s") == [(2, "b", "DELETE", False)]
    shown = {r["name"]: r["show_initial_rows"] for r in t.sql("SHOW STREAMS").collect()}
    assert shown == {"s": True, "s_ins": True}


def test_stream_starting_points(t, clock):
    first = t.sql("INSERT INTO t VALUES (3, 'c')").first()  # version 2
    clock.advance(seconds=60)
    t.sql("INSERT INTO t VALUES (4, 'd')")  # version 3
    t.sql("CREATE STREAM at_v1 ON TABLE t AT (VERSION => 1)")
    t.sql("CREATE STREAM before_v3 ON TABLE t BEFORE (VERSION => 3)")
    t.sql(f"CREATE STREAM before_stmt ON TABLE t BEFORE (STATEMENT => '{first['statement_id']}')")
    t.sql("CREATE STREAM at_offset ON TABLE t AT (OFFSET => -30)")
    t.sql("CREATE STREAM clone ON TABLE t AT (STREAM => 'before_v3')")
    frontiers = {r["name"]: r["frontier_version"] for r in t.sql("SHOW STREAMS").collect()}
    assert frontiers == {"at_v1": 1, "before_v3": 2, "before_stmt": 1, "at_offset": 2, "clone": 2}
    both = [(3, "c", "INSERT", False), (4, "d", "INSERT", False)]
    assert _changes(t, "at_v1") == both and _changes(t, "before_stmt") == both
    assert _changes(t, "before_v3") == [(4, "d", "INSERT", False)]
    assert _changes(t, "clone") == [(4, "d", "INSERT", False)]
    # A clone copies the position once; afterwards the two move independently.
    t.sql("CREATE TABLE sink (id INT)")
    t.sql("INSERT INTO sink SELECT id FROM before_v3")
    assert _frontier(t, "before_v3") == 3 and _frontier(t, "clone") == 2
    assert _changes(t, "clone") == [(4, "d", "INSERT", False)]
    # CHANGES ... AT (STREAM => ...) reads from a stream's position without consuming it.
    assert rows(
        t.sql("SELECT id FROM t CHANGES (INFORMATION => DEFAULT) AT (STREAM => 'clone')")
    ) == [(4,)]
    assert _frontier(t, "clone") == 2


def test_or_replace_if_not_exists_comment_and_drop(t):
    t.sql("CREATE STREAM s ON TABLE t COMMENT = 'it''s mine; AT (VERSION => 0) APPEND_ONLY = TRUE'")
    t.sql("INSERT INTO t VALUES (3, 'c')")
    described = t.sql("DESCRIBE STREAM s").first()
    assert described["comment"] == "it's mine; AT (VERSION => 0) APPEND_ONLY = TRUE"
    assert (described["mode"], described["frontier_version"]) == ("DEFAULT", 1)

    with pytest.raises(ObjectExistsError, match="already exists"):
        t.sql("CREATE STREAM s ON TABLE t")
    kept = t.sql("CREATE STREAM IF NOT EXISTS s ON TABLE t APPEND_ONLY = TRUE").first()
    assert kept.message.startswith("Stream s kept (it exists) on t")  # the old one
    assert _frontier(t, "s") == 1 and _changes(t, "s") == [(3, "c", "INSERT", False)]
    assert t.sql("DESCRIBE STREAM s").first()["mode"] == "DEFAULT"

    t.sql("CREATE OR REPLACE STREAM s ON TABLE t APPEND_ONLY = TRUE COMMENT = 'new'")
    described = t.sql("DESC STREAM s").first()
    assert (described["mode"], described["frontier_version"], described["comment"]) == (
        "APPEND_ONLY",
        2,
        "new",
    )
    assert _changes(t, "s") == []

    with pytest.raises(ObjectExistsError):
        t.sql("CREATE STREAM t ON TABLE t")  # a stream may not take a table's name
    with pytest.raises(ObjectExistsError):
        t.sql("CREATE TABLE s (x INT)")  # nor a table a stream's

    dropped = t.sql("DROP STREAM s").first()
    assert (dropped["operation"], dropped["object"]) == ("DROP STREAM", "s")
    assert t.sql("SHOW STREAMS").collect() == []
    with pytest.raises(TableNotFoundError):
        t.sql("SELECT * FROM s")
    assert "did not exist" in t.sql("DROP STREAM IF EXISTS s").first()["message"]
    with pytest.raises(StreamNotFoundError):
        t.sql("DROP STREAM s")
    t.sql("CREATE STREAM s ON TABLE t")  # the name is free again
    assert _frontier(t, "s") == 2


def test_show_and_describe_streams(t, clock):
    t.sql("CREATE TABLE u (x INT)")
    t.sql("CREATE STREAM s_t ON TABLE t COMMENT = 'on t'")
    t.sql("CREATE STREAM s_u ON TABLE u APPEND_ONLY = TRUE")
    shown = t.sql("SHOW STREAMS")
    assert shown.columns[:6] == [
        "name",
        "table_name",
        "mode",
        "frontier_version",
        "stale",
        "stale_after",
    ]
    got = [tuple(r)[:6] for r in shown.collect()]
    assert got == [
        ("s_t", "t", "DEFAULT", 1, False, None),
        ("s_u", "u", "APPEND_ONLY", 0, False, None),
    ]
    # With a change pending, stale_after is the commit time of the first unconsumed change plus
    # the longer of retention (1 day by default) and the maximum extension (14 days by default).
    clock.advance(seconds=30)
    t.sql("INSERT INTO t VALUES (3, 'c')")
    committed = t.catalog.version_info(t.catalog.table("t").table_id, 2).committed_at
    row = t.sql("DESCRIBE STREAM s_t").first()
    assert row["stale"] is False
    expected = dt.datetime.fromtimestamp(committed + 14 * 86400)
    assert abs((row["stale_after"] - expected).total_seconds()) < 0.001
    assert row["comment"] == "on t" and row["show_initial_rows"] is False
    assert abs(row["created_at"].timestamp() - (clock.now() - 30)) < 0.001
    assert t.sql("DESCRIBE STREAM s_u").first()["stale_after"] is None


# -- errors: clear, and nothing created -------------------------------------------------------


def test_stream_errors_are_clear_and_create_nothing(t):
    t.sql("CREATE STREAM people_stream ON TABLE t")
    t.sql("CREATE TABLE other (x INT)")
    t.sql("CREATE STREAM other_stream ON TABLE other")

    for statement in (
        "SELECT * FROM people_strem",
        "DESCRIBE STREAM people_strem",
        "DROP STREAM people_strem",
        "SELECT SYSTEM$STREAM_HAS_DATA('people_strem')",
        "CREATE STREAM s2 ON TABLE t AT (STREAM => 'people_strem')",
    ):
        with pytest.raises((StreamNotFoundError, TableNotFoundError), match="people_stream"):
            t.sql(statement)
    with pytest.raises(StreamNotFoundError, match="Did you mean people_stream"):
        t.stream_has_data("people_strem")

    bad = {
        "CREATE STREAM s2 ON TABLE tt": (TableNotFoundError, "Did you mean t"),
        "CREATE STREAM s2 ON TABLE t APPEND_ONLY = maybe": (InvalidStatementError, "APPEND_ONLY"),
        "CREATE STREAM s2 ON TABLE t SHOW_INITIAL_ROWS = 1": (InvalidStatementError, "Options"),
        "CREATE STREAM s2 ON TABLE t FOO = TRUE": (InvalidStatementError, "FOO"),
        "CREATE STREAM s2 ON TABLE t APPEND_ONLY = TRUE APPEND_ONLY = FALSE": (
            InvalidStatementError,
            "APPEND_ONLY",
        ),
        "CREATE OR REPLACE STREAM IF NOT EXISTS s2 ON TABLE t": (
            InvalidStatementError,
            "OR REPLACE",
        ),
        "CREATE STREAM s2 ON TABLE t AT (VERSION => 9)": (TimeTravelError, "no version 9"),
        "CREATE STREAM s2 ON TABLE t AT (VERSION => -1)": (TimeTravelError, "did not exist"),
        "CREATE STREAM s2 ON TABLE t AT (STREAM => 'other_stream')": (
            InvalidStatementError,
            "on table other",
        ),
        "CREATE STREAM s2 ON TABLE t BEFORE (STREAM => 'people_stream')": (
            InvalidStatementError,
            "AT \\(STREAM",
        ),
        "CREATE STREAM s2 ON TABLE t AT (VERSION => 1": (InvalidStatementError, "parenthes"),
        "CREATE STREAM s2 ON VIEW nope": (TableNotFoundError, "View .nope. does not exist"),
        "SELECT * FROM people_stream AT (VERSION => 0)": (InvalidStatementError, "is a stream"),
        "SELECT SYSTEM$STREAM_HAS_DATA(people_stream)": (InvalidStatementError, "one stream name"),
    }
    for statement, (error, message) in bad.items():
        with pytest.raises(error, match=message):
            t.sql(statement)
    assert sorted(t.catalog.stream_names()) == ["other_stream", "people_stream"]

    t.sql("BEGIN")
    for statement in ("CREATE STREAM s2 ON TABLE t", "DROP STREAM people_stream"):
        with pytest.raises(TransactionError, match="inside a transaction"):
            t.sql(statement)
    t.sql("ROLLBACK")
    assert sorted(t.catalog.stream_names()) == ["other_stream", "people_stream"]


# -- consumption by DML -----------------------------------------------------------------------

_CONSUMERS = {
    "insert": "INSERT INTO sink SELECT id, name FROM s WHERE METADATA$ACTION = 'INSERT'",
    "merge": (
        "MERGE INTO sink USING (SELECT id, name, METADATA$ACTION AS a FROM s) c ON sink.id = c.id"
        " WHEN MATCHED AND c.a = 'DELETE' THEN DELETE"
        " WHEN MATCHED THEN UPDATE SET name = c.name"
        " WHEN NOT MATCHED AND c.a = 'INSERT' THEN INSERT (id, name) VALUES (c.id, c.name)"
    ),
    "merge_bare_stream": (
        "MERGE INTO sink USING s ON sink.id = s.id"
        " WHEN MATCHED AND s.METADATA$ACTION = 'DELETE' THEN DELETE"
        " WHEN MATCHED THEN UPDATE SET name = s.name"
        " WHEN NOT MATCHED AND s.METADATA$ACTION = 'INSERT' THEN INSERT (id, name)"
        " VALUES (s.id, s.name)"
    ),
    "delete_where_in": "DELETE FROM sink WHERE id IN (SELECT id FROM s)",
    "update_from": (
        "UPDATE sink SET name = c.name FROM (SELECT id, name FROM s) c WHERE sink.id = c.id"
    ),
    "delete_using": "DELETE FROM sink USING (SELECT id FROM s) c WHERE sink.id = c.id",
    "ctas": "CREATE TABLE sink AS SELECT id, name FROM s",
}
# sink after the statement, given sink = (1, 'x'), (3, 'x'), (9, 'x') beforehand
_RESULTS = {
    "insert": [(1, "x"), (3, "c"), (3, "x"), (4, "d"), (9, "x")],
    "merge": [(3, "c"), (4, "d"), (9, "x")],
    "merge_bare_stream": [(3, "c"), (4, "d"), (9, "x")],
    "delete_where_in": [(9, "x")],
    "update_from": [(1, "a"), (3, "c"), (9, "x")],
    "delete_using": [(9, "x")],
    "ctas": [(1, "a"), (3, "c"), (4, "d")],
}


@pytest.mark.parametrize("kind", sorted(_CONSUMERS))
def test_each_dml_kind_that_reads_a_stream_consumes_it_in_its_commit(t, kind, monkeypatch):
    t.sql("CREATE STREAM s ON TABLE t")
    t.sql("INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    t.sql("DELETE FROM t WHERE id = 1")  # version 3: s holds +3, +4, -1
    if kind != "ctas":
        t.sql("CREATE TABLE sink (id INT, name STRING)")
        t.sql("INSERT INTO sink VALUES (1, 'x'), (3, 'x'), (9, 'x')")
    before = None if kind == "ctas" else _version(t, "sink")

    # The frontier moves in the same catalog transaction as the write: if the write's commit
    # fails, the stream is not consumed either.
    # The failure is injected inside the catalog transaction, after the request's updates
    # (the write and the frontier move) were applied.
    real = commit_path._record_versions

    def fail(*args, **kwargs):
        real(*args, **kwargs)
        raise ConflictError("injected failure after the write")

    monkeypatch.setattr(commit_path, "_record_versions", fail)
    with pytest.raises(ConflictError, match="injected"):
        t.sql(_CONSUMERS[kind])
    monkeypatch.undo()
    assert _frontier(t, "s") == 1
    if kind == "ctas":
        assert t.catalog.find_table("sink") is None
    else:
        assert _version(t, "sink") == before

    t.sql(_CONSUMERS[kind])
    assert rows(t.sql("SELECT * FROM sink")) == _RESULTS[kind]
    stream = t.catalog.stream("s")
    assert stream.frontier_version == 3
    sink = t.catalog.table("sink")
    assert sink.current_version == (0 if kind == "ctas" else before + 1)
    made = t.catalog.version_info(sink.table_id, sink.current_version)
    assert stream.consumed_at == made.committed_at
    assert _changes(t, "s") == [] and _has_data(t, "s") is False


def test_dml_that_reads_a_stream_but_writes_nothing_still_consumes_it(t):
    t.sql("CREATE STREAM s ON TABLE t")
    t.sql("CREATE TABLE sink (id INT, name STRING)")
    t.sql("INSERT INTO t VALUES (3, 'c')")
    t.sql("INSERT INTO sink SELECT id, name FROM s WHERE METADATA$ACTION = 'DELETE'")
    assert _frontier(t, "s") == 2 and _version(t, "sink") == 0
    t.sql("INSERT INTO t VALUES (4, 'd')")
    t.sql("UPDATE sink SET name = c.name FROM (SELECT id, name FROM s) c WHERE sink.id = c.id")
    assert _frontier(t, "s") == 3 and _version(t, "sink") == 0
    t.sql("INSERT INTO t VALUES (5, 'e')")
    t.sql("DELETE FROM sink USING (SELECT id FROM s) c WHERE sink.id = c.id")
    assert _frontier(t, "s") == 4 and _version(t, "sink") == 0
    assert _changes(t, "s") == []


def test_statements_that_do_not_read_the_stream_do_not_consume_it(t):
    t.sql("CREATE STREAM s ON TABLE t")
    t.sql("CREATE TABLE sink (id INT, name STRING)")
    t.sql("INSERT INTO t VALUES (3, 'c')")
    pending = t.sql("SELECT id, name FROM s")  # read, not consumed
    t.sql("INSERT INTO sink VALUES (7, 'g')")
    t.sql("UPDATE sink SET name = 'h'")
    t.append("sink", t.spark.createDataFrame([(8, "i")], "id INT, name STRING"))
    t.sql("CREATE TABLE copy AS SELECT * FROM t")
    t.sql("CREATE TABLE IF NOT EXISTS copy AS SELECT id, name FROM s")  # exists: nothing runs
    assert t.stream_has_data("s") is True
    assert _frontier(t, "s") == 1
    assert rows(pending) == [(3, "c")]


def test_stream_of_another_table_is_consumed_only_by_statements_reading_it(t):
    t.sql("CREATE TABLE u (id INT, name STRING)")
    t.sql("CREATE STREAM s_t ON TABLE t")
    t.sql("CREATE STREAM s_u ON TABLE u")
    t.sql("INSERT INTO t VALUES (3, 'c')")
    t.sql("INSERT INTO u VALUES (5, 'e')")
    t.sql("CREATE TABLE sink (id INT, name STRING)")
    t.sql("INSERT INTO sink SELECT id, name FROM s_t UNION ALL SELECT id, name FROM s_u")
    assert (_frontier(t, "s_t"), _frontier(t, "s_u")) == (2, 1)
    assert rows(t.sql("SELECT * FROM sink")) == [(3, "c"), (5, "e")]


# -- transactions -----------------------------------------------------------------------------


def test_transaction_reads_the_same_changes_and_commits_the_frontier_at_commit(t, spark):
    t.sql("CREATE STREAM s ON TABLE t")
    t.sql("CREATE TABLE sink (id INT, name STRING, action STRING)")
    t.sql("INSERT INTO t VALUES (3, 'c')")  # version 2
    other = changelake.connect(t.warehouse.root, spark=spark, clock=t.clock)
    try:
        t.sql("BEGIN")
        t.clock.advance(seconds=1)
        assert _changes(t, "s") == [(3, "c", "INSERT", False)]
        other.sql("INSERT INTO t VALUES (4, 'd')")  # version 3, after BEGIN
        other.sql("DELETE FROM t WHERE id = 1")  # version 4
        assert _changes(t, "s") == [(3, "c", "INSERT", False)]
        assert t.stream_has_data("s") is True
        t.sql("INSERT INTO sink SELECT id, name, METADATA$ACTION FROM s")
        assert _changes(t, "s") == [(3, "c", "INSERT", False)], "still the same inside"
        t.sql("INSERT INTO sink SELECT id, name, 'again' FROM s WHERE id = 3")
        # Other sessions see neither the staged rows nor a moved frontier before COMMIT.
        assert _frontier(other, "s") == 1
        assert rows(other.sql("SELECT * FROM sink")) == []
        assert len(other.sql("SELECT * FROM s").collect()) == 3
        t.sql("COMMIT")
        assert _frontier(other, "s") == 2
        assert rows(other.sql("SELECT * FROM sink")) == [(3, "c", "INSERT"), (3, "c", "again")]
        # What the transaction's snapshot excluded is still pending.
        assert _changes(t, "s") == [(1, "a", "DELETE", False), (4, "d", "INSERT", False)]
    finally:
        other.close()


def test_rollback_after_another_session_commits_leaves_the_frontier(t, spark):
    t.sql("CREATE STREAM s ON TABLE t")
    t.sql("CREATE TABLE sink (id INT)")
    t.sql("INSERT INTO t VALUES (3, 'c')")
    t.sql("BEGIN")
    t.sql("INSERT INTO sink SELECT id FROM s")
    other = changelake.connect(t.warehouse.root, spark=spark, clock=t.clock)
    other.sql("INSERT INTO t VALUES (4, 'd')")
    other.close()
    t.sql("ROLLBACK")
    assert _frontier(t, "s") == 1
    assert rows(t.sql("SELECT id FROM s")) == [(3,), (4,)]
    assert rows(t.sql("SELECT * FROM sink")) == []
    with pytest.raises(TransactionError):
        t.sql("ROLLBACK")

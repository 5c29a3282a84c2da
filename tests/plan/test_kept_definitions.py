"""Bound definitions kept across statements (plan/kept.py): a statement never binds a view or a
dynamic table's query as the catalog defined it before a DDL it can see, whoever made the DDL
(another session, another process), and what it binds is what binding afresh gives."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import rows
from sqlalchemy import event

import changelake
from changelake.errors import StaleStreamError

CHANGES = "CHANGES (INFORMATION => DEFAULT) AT (VERSION => 0)"


def _columns(df) -> list[str]:
    return [c for c in df.columns if not c.startswith("METADATA$")]


def _changes(session, view: str) -> tuple[list[str], list[tuple]]:
    """The columns and rows (without METADATA$ROW_ID) of the view's changes since version 0."""
    df = session.sql(f"SELECT * FROM {view} {CHANGES}")
    return _columns(df), rows(df.drop("METADATA$ROW_ID"))


@pytest.fixture
def other(spark, tmp_path, clock, session):
    """A second session on the same warehouse (its own catalog object)."""
    s = changelake.connect(str(tmp_path / "wh"), spark=spark, clock=clock)
    yield s
    s.close()


@pytest.fixture
def viewed(session, clock):
    """Table t (k, x) with two rows added after version 0, view v over it, its changes read
    once (so that its binding is kept)."""
    session.sql("CREATE TABLE t (k INT, x INT)")
    session.sql("CREATE VIEW v AS SELECT * FROM t")
    clock.advance(seconds=1)
    session.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    assert _changes(session, "v") == (
        ["k", "x"],
        [(1, 10, "INSERT", False), (2, 20, "INSERT", False)],
    )
    return session


def test_a_statement_under_the_same_token_reads_no_view_text(viewed):
    read: list[str] = []

    def executed(_conn, _cursor, statement: str, *_args) -> None:
        read.append(statement)

    event.listen(viewed.catalog.engine, "before_cursor_execute", executed)
    try:
        assert _changes(viewed, "v")[0] == ["k", "x"]
    finally:
        event.remove(viewed.catalog.engine, "before_cursor_execute", executed)
    assert read and not [s for s in read if "cl_views" in s]


def test_a_view_redefined_by_another_session_is_seen_by_the_next_statement(viewed, other, clock):
    clock.advance(seconds=1)
    other.sql("CREATE OR REPLACE VIEW v AS SELECT k, x * 2 AS doubled FROM t WHERE k > 1")
    assert _changes(viewed, "v") == (["k", "doubled"], [(2, 40, "INSERT", False)])
    # and back: the text the session bound first is current again, under a new token
    other.sql("CREATE OR REPLACE VIEW v AS SELECT * FROM t")
    assert _changes(viewed, "v")[0] == ["k", "x"]


def test_columns_added_and_dropped_under_a_view(viewed, other, clock):
    clock.advance(seconds=1)
    other.sql("ALTER TABLE t ADD COLUMN c INT")
    viewed.sql("INSERT INTO t VALUES (3, 30, 300)")
    assert _changes(viewed, "v") == (
        ["k", "x", "c"],
        [
            (1, 10, None, "INSERT", False),
            (2, 20, None, "INSERT", False),
            (3, 30, 300, "INSERT", False),
        ],
    )
    clock.advance(seconds=1)
    viewed.sql("ALTER TABLE t DROP COLUMN x")
    assert _changes(viewed, "v") == (
        ["k", "c"],
        [(1, None, "INSERT", False), (2, None, "INSERT", False), (3, 300, "INSERT", False)],
    )
    other.sql("ALTER TABLE t RENAME COLUMN c TO d")
    assert _changes(viewed, "v")[0] == ["k", "d"]


def test_a_table_dropped_and_created_again_under_a_view(viewed, other, clock):
    clock.advance(seconds=1)
    for statement in (
        "DROP VIEW v",
        "DROP TABLE t",
        "CREATE TABLE t (k INT, name STRING)",
        "CREATE VIEW v AS SELECT * FROM t",  # the same text, another table
    ):
        other.sql(statement)
    clock.advance(seconds=1)
    viewed.sql("INSERT INTO t VALUES (7, 'seven')")
    assert _changes(viewed, "v") == (["k", "name"], [(7, "seven", "INSERT", False)])
    # a table renamed into the name: the view reads it, not the one it read before
    for statement in (
        "DROP VIEW v",
        "CREATE TABLE u (k INT, flag BOOLEAN)",
        "INSERT INTO u VALUES (8, TRUE)",
        "ALTER TABLE t RENAME TO t_old",
        "ALTER TABLE u RENAME TO t",
        "CREATE VIEW v AS SELECT * FROM t",
    ):
        clock.advance(seconds=1)
        other.sql(statement)
    assert _changes(viewed, "v") == (["k", "flag"], [(8, True, "INSERT", False)])


def test_a_transaction_binds_as_binding_afresh_does_after_ddl_since_it_began(viewed, other, clock):
    viewed.sql("BEGIN")
    try:
        assert _changes(viewed, "v")[0] == ["k", "x"]  # kept, under the token of BEGIN
        clock.advance(seconds=1)
        other.sql("ALTER TABLE t ADD COLUMN c INT")
        # a transaction reads tables' columns as they were at BEGIN
        assert _changes(viewed, "v")[0] == ["k", "x"]
        other.sql("CREATE OR REPLACE VIEW v AS SELECT k, x * 2 AS doubled FROM t")
        # and names and view texts as they are now (DDL is not transactional)
        assert _changes(viewed, "v") == (
            ["k", "doubled"],
            [(1, 20, "INSERT", False), (2, 40, "INSERT", False)],
        )
    finally:
        viewed.sql("ROLLBACK")
    other.sql("CREATE OR REPLACE VIEW v AS SELECT * FROM t")
    assert _changes(viewed, "v")[0] == ["k", "x", "c"]


def _now(clock) -> str:
    return dt.datetime.fromtimestamp(clock.now()).isoformat(sep=" ")


def test_time_travel_of_a_view_binds_the_columns_of_then(viewed, other, clock):
    clock.advance(seconds=1)
    before = _now(clock)
    clock.advance(seconds=1)
    other.sql("ALTER TABLE t ADD COLUMN c INT")
    viewed.sql("INSERT INTO t VALUES (3, 30, 300)")
    then = f"SELECT * FROM v AT (TIMESTAMP => '{before}')"
    for _ in range(2):  # bound afresh, then kept
        now = viewed.sql("SELECT * FROM v")
        assert (_columns(now), rows(now)) == (
            ["k", "x", "c"],
            [(1, 10, None), (2, 20, None), (3, 30, 300)],
        )
        old = viewed.sql(then)  # as the table's own time travel reads it: its columns then
        assert (old.columns, rows(old)) == (["k", "x"], [(1, 10), (2, 20)])
        table = viewed.sql(f"SELECT * FROM t AT (TIMESTAMP => '{before}')")
        assert (table.columns, rows(table)) == (old.columns, rows(old))
    clock.advance(seconds=1)
    other.sql("ALTER TABLE t DROP COLUMN x")
    old = viewed.sql(then)
    assert (old.columns, rows(old)) == (["k", "x"], [(1, 10), (2, 20)])
    assert viewed.sql("SELECT * FROM v").columns == ["k", "c"]


def test_a_stream_on_a_view_goes_stale_when_another_session_redefines_it(viewed, other, clock):
    viewed.sql("CREATE STREAM s ON VIEW v")
    viewed.sql("CREATE TABLE sink (k INT, x INT)")
    clock.advance(seconds=1)
    viewed.sql("INSERT INTO t VALUES (3, 30)")
    viewed.sql("INSERT INTO sink SELECT k, x FROM s")  # consumed, with the binding kept
    assert rows(viewed.sql("SELECT * FROM sink")) == [(3, 30)]
    assert rows(viewed.sql("SELECT k FROM s")) == []
    clock.advance(seconds=1)
    other.sql("CREATE OR REPLACE VIEW v AS SELECT * FROM t WHERE k > 1")
    with pytest.raises(StaleStreamError, match="redefined"):
        viewed.sql("SELECT * FROM s").collect()
    viewed.sql("CREATE OR REPLACE STREAM s ON VIEW v")  # a new stream on the new definition
    viewed.sql("INSERT INTO t VALUES (1, 11), (4, 40)")
    assert rows(viewed.sql("SELECT k, x FROM s")) == [(4, 40)]


def test_a_dynamic_table_follows_its_upstream_view_redefined_elsewhere(viewed, other, clock):
    viewed.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '1 day' AS SELECT k FROM v WHERE x > 10")
    assert rows(viewed.sql("SELECT * FROM d")) == [(2,)]
    clock.advance(seconds=1)
    viewed.sql("INSERT INTO t VALUES (3, 30)")
    viewed.sql("ALTER DYNAMIC TABLE d REFRESH")  # binds the query, kept
    assert rows(viewed.sql("SELECT * FROM d")) == [(2,), (3,)]
    clock.advance(seconds=1)
    other.sql("CREATE OR REPLACE VIEW v AS SELECT k, x * 10 AS x FROM t WHERE k < 3")
    clock.advance(seconds=1)
    viewed.sql("ALTER DYNAMIC TABLE d REFRESH")
    assert rows(viewed.sql("SELECT * FROM d")) == [(1,), (2,)]
    assert viewed.catalog.refresh_history(limit=1)[0].record.action == "REINITIALIZE"
    clock.advance(seconds=1)
    viewed.sql("INSERT INTO t VALUES (0, 5)")
    viewed.sql("ALTER DYNAMIC TABLE d REFRESH")
    assert rows(viewed.sql("SELECT * FROM d")) == [(0,), (1,), (2,)]
    assert viewed.catalog.refresh_history(limit=1)[0].record.action == "INCREMENTAL"


# Another process changes the catalog as ALTER TABLE ADD COLUMN and CREATE OR REPLACE VIEW do:
# the commits those statements make, through changelake's catalog (no Spark of its own).
_OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from changelake.catalog import Catalog
    from changelake.catalog.requests import CommitRequest, CreateView, IfExists, SetSchema
    from changelake.clock import ManualClock
    from changelake.schema import Column, TableSchema

    url, now = sys.argv[1], float(sys.argv[2])
    catalog = Catalog(url)
    info = catalog.table("t")
    schema = catalog.schema_at(info.table_id, info.current_version)
    column = Column(max(c.column_id for c in schema.columns) + 1, "c", "int")
    wider = TableSchema((*schema.columns, column))
    add = CommitRequest("other-1", "ALTER TABLE", (SetSchema(info.table_id, wider),))
    catalog.commit([add], clock=ManualClock(now))
    view = CreateView("v", "SELECT k, c FROM t WHERE k > 1", ("t",), IfExists.REPLACE)
    catalog.commit([CommitRequest("other-2", "CREATE VIEW", (view,))], clock=ManualClock(now + 1))
    catalog.close()
    print("OK")
    """
)


def test_ddl_of_another_process_on_a_shared_catalog(spark, tmp_path, clock, catalog_url):
    session = changelake.connect(
        str(tmp_path / "wh"), catalog=catalog_url, spark=spark, clock=clock
    )
    try:
        session.sql("CREATE TABLE t (k INT, x INT)")
        session.sql("CREATE VIEW v AS SELECT * FROM t")
        clock.advance(seconds=1)
        session.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
        assert _changes(session, "v")[0] == ["k", "x"]
        clock.advance(seconds=1)
        done = subprocess.run(
            [sys.executable, "-c", _OTHER_PROCESS, catalog_url, str(clock.now())],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ,
        )
        assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr[-3000:]
        clock.advance(seconds=2)
        session.sql("INSERT INTO t VALUES (3, 30, 300)")
        assert _changes(session, "v") == (
            ["k", "c"],
            [(2, None, "INSERT", False), (3, 300, "INSERT", False)],
        )
    finally:
        session.close()

"""A row whose ROW_ID leaves a table and comes back (issue 37 item 1): a dynamic table's rows
take their ROW_IDs from the defining query, so a DISTINCT row or a group deleted by one refresh
and created again by a later one has the same ROW_ID. The minimum delta over an interval compares
each ROW_ID's row at the start with its row at the end, whatever happened between."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import rows

ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"


def _changes(session, table: str, version: int, information: str = "DEFAULT") -> list[tuple]:
    return rows(
        session.sql(
            f"SELECT * FROM {table} CHANGES (INFORMATION => {information})"
            f" AT (VERSION => {version})"
        ).drop(ROW_ID)
    )


def _refresh(session, clock, table: str) -> int:
    clock.advance(seconds=1)
    session.sql(f"ALTER DYNAMIC TABLE {table} REFRESH")
    return session.catalog.table(table).current_version


@pytest.fixture
def tags(session, clock):
    session.sql("CREATE TABLE tags (tag STRING, n INT)")
    session.sql("INSERT INTO tags VALUES ('a', 1), ('a', 1), ('b', 2)")
    clock.advance(seconds=1)
    session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '1 hour' AS SELECT DISTINCT tag, n FROM tags")
    session.sql(
        "CREATE DYNAMIC TABLE g TARGET_LAG = '1 hour' AS"
        " SELECT tag, SUM(n) AS total FROM tags GROUP BY tag"
    )
    return session.catalog.table("d").current_version, session.catalog.table("g").current_version


def test_a_distinct_row_deleted_and_created_again_is_no_change(session, clock, tags):
    start, _ = tags
    session.sql("CREATE STREAM s ON DYNAMIC TABLE d")
    session.sql("DELETE FROM tags WHERE tag = 'a'")  # every duplicate
    _refresh(session, clock, "d")
    assert _changes(session, "d", start) == [("a", 1, "DELETE", False)]
    session.sql("INSERT INTO tags VALUES ('a', 1)")
    end = _refresh(session, clock, "d")
    assert _changes(session, "d", start) == []
    assert rows(session.sql("SELECT tag, n, METADATA$ACTION FROM s")) == []
    # REDO keeps every version's own delta: the row left, then came back
    assert _changes(session, "d", start, "REDO") == [
        ("a", 1, "DELETE", False, end - 1, _ts(session, "d", end - 1)),
        ("a", 1, "INSERT", False, end, _ts(session, "d", end)),
    ]


def test_a_group_deleted_and_created_again_with_other_values_is_one_update(session, clock, tags):
    _, start = tags
    session.sql("CREATE STREAM s ON DYNAMIC TABLE g")
    ids = {r.tag: r[ROW_ID] for r in session.sql("SELECT * FROM s").collect()} or None
    session.sql("DELETE FROM tags WHERE tag = 'a'")
    _refresh(session, clock, "g")
    session.sql("INSERT INTO tags VALUES ('a', 5)")
    _refresh(session, clock, "g")
    assert _changes(session, "g", start) == [
        ("a", 2, "DELETE", True),
        ("a", 5, "INSERT", True),
    ]
    streamed = session.sql("SELECT * FROM s").collect()
    assert sorted((r.tag, r.total, r[ACTION], r[ISUPDATE]) for r in streamed) == [
        ("a", 2, "DELETE", True),
        ("a", 5, "INSERT", True),
    ]
    assert len({r[ROW_ID] for r in streamed}) == 1
    assert ids is None  # the stream had nothing before the refreshes


def test_a_changelog_of_a_dynamic_table_comes_in_row_id_order(session, clock):
    """Its ROW_IDs are the query's (row keys), not scrambled identities: the changelog is still
    ordered by ROW_ID, an update's DELETE half first."""
    session.sql("CREATE TABLE t (k INT, n INT)")
    session.sql("INSERT INTO t SELECT id % 40, id FROM range(0, 200)")
    session.sql(
        "CREATE DYNAMIC TABLE g TARGET_LAG = '1 hour' AS SELECT k, SUM(n) AS total FROM t"
        " GROUP BY k"
    )
    start = session.catalog.table("g").current_version
    session.sql("UPDATE t SET n = n + 1 WHERE k % 3 = 0")
    session.sql("DELETE FROM t WHERE k % 7 = 0")
    session.sql("INSERT INTO t VALUES (100, 1), (101, 2)")
    _refresh(session, clock, "g")
    odf = session.sql(f"SELECT * FROM g CHANGES (FORMAT => ODF) AT (VERSION => {start})").collect()
    ids = [(r[ROW_ID], r.op) for r in odf]
    assert len(odf) == 2 * 12 + 6 + 2  # 12 groups updated, 6 deleted, 2 new
    assert ids == sorted(ids, key=lambda i: (i[0], i[1] != 2))  # ODF op 2 is -C, before +C
    assert [r.offset for r in odf] == sorted(r.offset for r in odf)


def _ts(session, table: str, version: int) -> dt.datetime:
    info = session.catalog.table(table)
    done = session.catalog.version_info(info.table_id, version)
    return dt.datetime.fromtimestamp(done.committed_at)

"""The hard cases of change queries (issue 3 item 3), each with its exact expected result."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import rows

from changelake.errors import ChangelakeError, InvalidStatementError, TimeTravelError

ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"


def changes(df, *columns: str) -> list[tuple]:
    """(columns..., action, isupdate) of every change row, sorted."""
    return rows(df.select(*columns, ACTION, ISUPDATE))


def row_ids(df, key: str = "id") -> dict[tuple, str]:
    """(key, action) -> METADATA$ROW_ID."""
    return {(r[key], r[ACTION]): r[ROW_ID] for r in df.collect()}


def since(session, version: int, information: str = "DEFAULT", end: str = "") -> object:
    return session.sql(
        f"SELECT * FROM t CHANGES (INFORMATION => {information}) AT (VERSION => {version}) {end}"
    )


def current(session, name: str = "t") -> int:
    return session.catalog.table(name).current_version


@pytest.fixture
def t(session) -> int:
    """Table t (id INT, v STRING) holding (1, 'a'), (2, 'b'), (3, 'c'); returns that version."""
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    return current(session)


def test_insert_then_delete_inside_the_interval(session, t):
    session.sql("INSERT INTO t VALUES (4, 'd'), (5, 'e')")
    session.sql("DELETE FROM t WHERE id = 4")
    assert changes(since(session, t), "id", "v") == [(5, "e", "INSERT", False)]
    assert changes(since(session, t, "APPEND_ONLY"), "id", "v") == [
        (4, "d", "INSERT", False),
        (5, "e", "INSERT", False),
    ]
    session.sql("DELETE FROM t WHERE id = 5")
    assert changes(since(session, t), "id", "v") == []
    assert len(changes(since(session, t, "APPEND_ONLY"), "id", "v")) == 2


def test_update_then_revert_is_no_change(session, t):
    session.sql("UPDATE t SET v = 'x' WHERE id = 2")
    session.sql("UPDATE t SET v = 'b' WHERE id = 2")
    assert changes(since(session, t), "id", "v") == []
    assert changes(since(session, t, "APPEND_ONLY"), "id", "v") == []
    # Each statement on its own still changed the row.
    redo = since(session, t, "REDO")
    assert [
        (r["METADATA$COMMIT_VERSION"] - t, r["v"], r[ACTION], r[ISUPDATE]) for r in redo.collect()
    ] == [
        (1, "b", "DELETE", True),
        (1, "x", "INSERT", True),
        (2, "x", "DELETE", True),
        (2, "b", "INSERT", True),
    ]


def test_update_to_the_same_value_is_no_change(session, t):
    session.sql("UPDATE t SET v = 'b' WHERE id = 2")
    assert current(session) == t + 1
    for information in ("DEFAULT", "APPEND_ONLY", "REDO"):
        assert changes(since(session, t, information), "id", "v") == [], information


def test_several_updates_of_one_row_are_one_pair(session, t):
    for value in ("x", "y", "z"):
        session.sql(f"UPDATE t SET v = '{value}' WHERE id = 3")
    df = since(session, t)
    assert changes(df, "id", "v") == [(3, "c", "DELETE", True), (3, "z", "INSERT", True)]
    ids = row_ids(df)
    assert ids[(3, "DELETE")] == ids[(3, "INSERT")]
    assert len(since(session, t, "REDO").collect()) == 6


def test_delete_and_reinsert_of_a_key_is_not_an_update(session, t):
    session.sql("DELETE FROM t WHERE id = 1")
    session.sql("INSERT INTO t VALUES (1, 'a')")
    df = since(session, t)
    assert changes(df, "id", "v") == [(1, "a", "DELETE", False), (1, "a", "INSERT", False)]
    ids = row_ids(df)
    assert ids[(1, "DELETE")] != ids[(1, "INSERT")]
    assert changes(since(session, t, "APPEND_ONLY"), "id", "v") == [(1, "a", "INSERT", False)]


def test_merge_updates_deletes_and_inserts(session, t):
    session.sql("CREATE TABLE src (id INT, v STRING, op STRING)")
    session.sql("INSERT INTO src VALUES (1, 'A', 'U'), (2, NULL, 'D'), (4, 'd', 'I')")
    session.sql(
        "MERGE INTO t USING src ON t.id = src.id"
        " WHEN MATCHED AND src.op = 'D' THEN DELETE"
        " WHEN MATCHED THEN UPDATE SET v = src.v"
        " WHEN NOT MATCHED THEN INSERT (id, v) VALUES (src.id, src.v)"
    )
    assert rows(session.sql("SELECT * FROM t")) == [(1, "A"), (3, "c"), (4, "d")]
    df = since(session, t)
    assert changes(df, "id", "v") == [
        (1, "A", "INSERT", True),
        (1, "a", "DELETE", True),
        (2, "b", "DELETE", False),
        (4, "d", "INSERT", False),
    ]
    ids = row_ids(df)
    assert ids[(1, "DELETE")] == ids[(1, "INSERT")]
    assert changes(since(session, t, "APPEND_ONLY"), "id", "v") == [(4, "d", "INSERT", False)]
    redo = since(session, t, "REDO")
    assert changes(redo, "id", "v") == changes(df, "id", "v")
    assert {r["METADATA$COMMIT_VERSION"] for r in redo.collect()} == {t + 1}


def test_truncate_deletes_every_row(session, t):
    session.sql("INSERT INTO t VALUES (4, 'd')")
    start = current(session)
    session.sql("TRUNCATE TABLE t")
    assert changes(since(session, start), "id", "v") == [
        (1, "a", "DELETE", False),
        (2, "b", "DELETE", False),
        (3, "c", "DELETE", False),
        (4, "d", "DELETE", False),
    ]
    # Inserted and truncated inside the interval: nothing in DEFAULT, the insert in APPEND_ONLY.
    assert changes(since(session, t), "id", "v") == [
        (1, "a", "DELETE", False),
        (2, "b", "DELETE", False),
        (3, "c", "DELETE", False),
    ]
    assert changes(since(session, t, "APPEND_ONLY"), "id", "v") == [(4, "d", "INSERT", False)]


def test_optimize_and_vacuum_inside_the_interval_add_no_changes(session, clock):
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("ALTER TABLE t SET DATA_RETENTION_TIME_IN_DAYS = 2")
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    session.sql("DELETE FROM t WHERE id = 1")
    session.sql("OPTIMIZE t")  # removes the first file: it expires during the interval
    clock.advance(days=3)
    session.sql("INSERT INTO t VALUES (3, 'c')")
    start = current(session)
    clock.advance(seconds=60)
    session.sql("UPDATE t SET v = 'b2' WHERE id = 2")
    session.sql("INSERT INTO t VALUES (4, 'd')")
    optimized = session.sql("OPTIMIZE t").first()
    assert optimized["version"] == start + 3, optimized["message"]
    clock.advance(days=1)
    vacuumed = session.sql("VACUUM t").first()["message"]
    assert vacuumed.startswith("Removed 1 expired file(s)"), vacuumed
    session.sql("INSERT INTO t VALUES (5, 'e')")
    session.sql("DELETE FROM t WHERE id = 3")  # a row compacted twice, then deleted
    expected = [
        (2, "b", "DELETE", True),
        (2, "b2", "INSERT", True),
        (3, "c", "DELETE", False),
        (4, "d", "INSERT", False),
        (5, "e", "INSERT", False),
    ]
    df = since(session, start)
    assert changes(df, "id", "v") == expected
    redo = since(session, start, "REDO")
    assert changes(redo, "id", "v") == expected
    assert start + 3 not in {r["METADATA$COMMIT_VERSION"] for r in redo.collect()}
    assert changes(since(session, start, "APPEND_ONLY"), "id", "v") == [
        (4, "d", "INSERT", False),
        (5, "e", "INSERT", False),
    ]
    # An interval of only the compaction is empty; rows keep their ROW_IDs across it.
    assert changes(since(session, start + 2, end=f"END (VERSION => {start + 3})"), "id") == []
    inserted = row_ids(since(session, start - 1, "APPEND_ONLY", f"END (VERSION => {start})"))
    assert row_ids(df)[(3, "DELETE")] == inserted[(3, "INSERT")]
    assert rows(session.sql("SELECT * FROM t")) == [(2, "b2"), (4, "d"), (5, "e")]


def _assert_user_error(error: ChangelakeError, *words: str) -> None:
    text = str(error)
    assert "java" not in text.lower() and "Traceback" not in text, text
    for word in words:
        assert word in text, text


def test_interval_beyond_retention_is_a_clear_error(session, clock, t):
    clock.advance(days=2)  # default retention: 1 day
    session.sql("INSERT INTO t VALUES (4, 'd')")
    with pytest.raises(TimeTravelError) as caught:
        since(session, t - 1)
    _assert_user_error(caught.value, "retention", "DATA_RETENTION_TIME_IN_DAYS")
    # The last version before the new one is still the start of a readable interval.
    assert changes(since(session, t), "id", "v") == [(4, "d", "INSERT", False)]


def test_interval_before_the_table_existed_is_a_clear_error(session, clock, t):
    created = session.catalog.table("t").created_at
    early = dt.datetime.fromtimestamp(created - 3600).isoformat(sep=" ")
    with pytest.raises(TimeTravelError) as caught:
        session.sql(f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) AT (TIMESTAMP => '{early}')")
    _assert_user_error(caught.value, "did not exist", "created")
    with pytest.raises(TimeTravelError) as caught:
        session.sql("SELECT * FROM t CHANGES (INFORMATION => DEFAULT) BEFORE (VERSION => 0)")
    _assert_user_error(caught.value, "did not exist")
    with pytest.raises(TimeTravelError) as caught:
        since(session, t + 5)
    _assert_user_error(caught.value, f"version {t + 5}")
    with pytest.raises(InvalidStatementError) as caught:
        since(session, t, end="END (VERSION => 0)")
    _assert_user_error(caught.value, "after the end")


def test_empty_interval_has_the_schema_of_a_full_one(session, t):
    session.sql("INSERT INTO t VALUES (4, 'd')")
    full = since(session, t)
    for information in ("DEFAULT", "APPEND_ONLY", "REDO"):
        empty = since(session, current(session), information)
        nonempty = since(session, t, information)
        assert empty.collect() == [], information
        assert [(f.name, f.dataType) for f in empty.schema] == [
            (f.name, f.dataType) for f in nonempty.schema
        ], information
    # Changes that cancel out: no rows, same columns as well.
    session.sql("DELETE FROM t WHERE id = 4")
    cancelled = since(session, t)
    assert cancelled.collect() == []
    assert cancelled.schema.names == full.schema.names


def test_add_column_inside_the_interval(session, t):
    session.sql("ALTER TABLE t ADD COLUMN w INT")
    session.sql("INSERT INTO t VALUES (4, 'd', 40)")
    session.sql("UPDATE t SET w = 10 WHERE id = 1")
    assert since(session, t).columns[:3] == ["id", "v", "w"]
    assert changes(since(session, t), "id", "v", "w") == [
        (1, "a", None, "DELETE", True),
        (1, "a", 10, "INSERT", True),
        (4, "d", 40, "INSERT", False),
    ]
    assert changes(since(session, 0, "APPEND_ONLY"), "id", "v", "w") == [
        (1, "a", None, "INSERT", False),
        (2, "b", None, "INSERT", False),
        (3, "c", None, "INSERT", False),
        (4, "d", 40, "INSERT", False),
    ]


@pytest.fixture
def timeline(session, clock) -> dict[str, object]:
    """v1 insert 1, v2 insert 2, v3 update 1, v4 delete 2, a minute apart; their results."""
    session.sql("CREATE TABLE t (id INT, v STRING)")
    out: dict[str, object] = {}
    for key, text in (
        ("v1", "INSERT INTO t VALUES (1, 'a')"),
        ("v2", "INSERT INTO t VALUES (2, 'b')"),
        ("v3", "UPDATE t SET v = 'A' WHERE id = 1"),
        ("v4", "DELETE FROM t WHERE id = 2"),
    ):
        clock.advance(seconds=60)
        out[key] = session.sql(text).first()
    clock.advance(seconds=90)
    return out


UP_TO_V3 = [(1, "A", "INSERT", True), (1, "a", "DELETE", True), (2, "b", "INSERT", False)]


def test_end_forms(session, timeline):
    v1, v3 = timeline["v1"]["version"], timeline["v3"]["version"]
    assert (v1, v3) == (1, 3)
    v3_time = session.catalog.version_info(1, v3).committed_at
    ends = {
        "VERSION": "END (VERSION => 3)",
        "TIMESTAMP": f"END (TIMESTAMP => '{dt.datetime.fromtimestamp(v3_time).isoformat(sep=' ')}')",
        "OFFSET": "END (OFFSET => -120)",  # 30 s after v3, 30 s before v4
        "STATEMENT": f"END (STATEMENT => '{timeline['v3']['statement_id']}')",
    }
    for kind, end in ends.items():
        assert changes(since(session, 1, end=end), "id", "v") == UP_TO_V3, kind


def test_before_statement_start(session, timeline):
    sid = timeline["v3"]["statement_id"]
    df = session.sql(
        f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) BEFORE (STATEMENT => '{sid}')"
    )
    assert changes(df, "id", "v") == [
        (1, "A", "INSERT", True),
        (1, "a", "DELETE", True),
        (2, "b", "DELETE", False),
    ]
    at = f"AT (STATEMENT => '{timeline['v1']['statement_id']}')"
    df = session.sql(f"SELECT * FROM t CHANGES (INFORMATION => DEFAULT) {at} END (VERSION => 3)")
    assert changes(df, "id", "v") == UP_TO_V3


def test_changes_compose_with_filters_joins_and_aggregates(session, timeline):
    clause = "CHANGES (INFORMATION => DEFAULT) AT (VERSION => 2)"
    assert rows(session.sql(f"SELECT id, v FROM t {clause} WHERE METADATA$ACTION = 'INSERT'")) == [
        (1, "A")
    ]
    assert rows(
        session.sql(
            f"SELECT METADATA$ACTION, METADATA$ISUPDATE, count(*) FROM t {clause}"
            " GROUP BY METADATA$ACTION, METADATA$ISUPDATE"
        )
    ) == [("DELETE", False, 1), ("DELETE", True, 1), ("INSERT", True, 1)]  # 2 gone, 1 updated
    session.sql("CREATE TABLE names (id INT, name STRING)")
    session.sql("INSERT INTO names VALUES (1, 'one'), (2, 'two')")
    assert rows(
        session.sql(
            f"SELECT n.name, c.v, c.METADATA$ACTION FROM t {clause} AS c"
            " JOIN names n ON n.id = c.id WHERE NOT c.METADATA$ISUPDATE"
        )
    ) == [("two", "b", "DELETE")]


def test_changes_feed_insert_and_merge(session, timeline):
    session.sql("CREATE TABLE audit (id INT, v STRING, action STRING, is_update BOOLEAN)")
    session.sql(
        "INSERT INTO audit SELECT id, v, METADATA$ACTION, METADATA$ISUPDATE"
        " FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 0)"
    )
    assert rows(session.sql("SELECT * FROM audit")) == [(1, "A", "INSERT", False)]

    session.sql("CREATE TABLE mirror (id INT, v STRING)")
    session.sql("INSERT INTO mirror VALUES (1, 'a'), (2, 'b')")  # t at version 2
    session.sql(
        "MERGE INTO mirror m USING ("
        "  SELECT id, v, METADATA$ACTION AS action, METADATA$ISUPDATE AS is_update"
        "  FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 2)"
        "  WHERE NOT (METADATA$ACTION = 'DELETE' AND METADATA$ISUPDATE)"
        ") c ON m.id = c.id"
        " WHEN MATCHED AND c.action = 'DELETE' THEN DELETE"
        " WHEN MATCHED THEN UPDATE SET v = c.v"
        " WHEN NOT MATCHED THEN INSERT (id, v) VALUES (c.id, c.v)"
    )
    assert rows(session.sql("SELECT * FROM mirror")) == rows(session.sql("SELECT * FROM t"))
    assert rows(session.sql("SELECT * FROM mirror")) == [(1, "A")]


def apply_redo(start: dict[str, tuple], redo_rows, columns: list[str]) -> dict[str, tuple]:
    """Replay REDO rows (in their order) on a ROW_ID -> values map."""
    state = dict(start)
    last = -1
    for r in redo_rows:
        assert r["METADATA$COMMIT_VERSION"] >= last, "REDO is in commit order"
        last = r["METADATA$COMMIT_VERSION"]
        if r[ACTION] == "DELETE":
            assert state.pop(r[ROW_ID]) == tuple(r[c] for c in columns)
        else:
            assert r[ROW_ID] not in state
            state[r[ROW_ID]] = tuple(r[c] for c in columns)
    return state


def test_redo_replayed_on_the_start_gives_the_end(session, t):
    session.sql("UPDATE t SET v = 'x' WHERE id = 1")
    session.sql("DELETE FROM t WHERE id = 2")
    session.sql("INSERT INTO t VALUES (2, 'b'), (4, 'd')")
    session.sql("UPDATE t SET v = 'y' WHERE id IN (1, 4)")
    session.sql("OPTIMIZE t")
    session.sql("DELETE FROM t WHERE id = 3")
    initial = since(session, 0, "APPEND_ONLY", f"END (VERSION => {t})")
    start = {r[ROW_ID]: (r["id"], r["v"]) for r in initial.collect()}
    end = apply_redo(start, since(session, t, "REDO").collect(), ["id", "v"])
    assert sorted(end.values()) == rows(session.sql("SELECT * FROM t"))
    # The end state's ROW_IDs are those of its rows' whole lives.
    now = {r[ROW_ID]: (r["id"], r["v"]) for r in since(session, 0).collect()}
    assert now == end

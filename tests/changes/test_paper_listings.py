"""The paper's listings 1-5 and 9 as acceptance tests (seeds/000_b99e4e5d0fa2cf8b.txt)."""

from __future__ import annotations

from conftest import rows

import changelake


def _people_history(session, clock) -> int:
    """Listings 1 and 2; returns the version that holds listing 1's state."""
    session.sql("CREATE TABLE people (id INT, name STRING)")
    clock.advance(seconds=60)
    session.sql("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')")
    start = session.catalog.table("people").current_version
    clock.advance(seconds=60)
    session.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud'), (5, 'Uli')")
    clock.advance(seconds=60)
    session.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    clock.advance(seconds=60)
    session.sql("UPDATE people SET name = 'Maude' WHERE id = 4")
    clock.advance(seconds=60)
    session.sql("DELETE FROM people WHERE id in (2, 5)")
    return start


def _by_key(df):
    """(id, name, action, isupdate) rows plus a map of id-side row ids for identity checks."""
    got = df.collect()
    return sorted(
        (r["id"], r["name"], r["METADATA$ACTION"], r["METADATA$ISUPDATE"]) for r in got
    ), {(r["id"], r["METADATA$ACTION"], r["name"]): r["METADATA$ROW_ID"] for r in got}


def test_listing_4_append_only(session, clock):
    start = _people_history(session, clock)
    assert rows(session.sql("SELECT * FROM people")) == [
        (1, "Jeffrey"),
        (3, "Walter"),
        (4, "Maude"),
    ]
    got, ids = _by_key(
        session.sql(
            f"SELECT * FROM people CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => {start})"
        )
    )
    assert got == [
        (3, "Walter", "INSERT", False),
        (4, "Maud", "INSERT", False),
        (5, "Uli", "INSERT", False),
    ]
    assert len(set(ids.values())) == 3


def test_listing_5_minimum_delta_with_timestamp_start(session, clock):
    _people_history(session, clock)
    # AT (TS => 12:00): the paper's start, i.e. right after listing 1's rows were committed.
    history = session.sql("DESCRIBE HISTORY people").orderBy("version").collect()
    at = history[1]["committed_at"].isoformat(sep=" ")
    got, ids = _by_key(
        session.sql(f"SELECT * FROM people CHANGES (INFORMATION => DEFAULT) AT (TS => '{at}')")
    )
    assert got == [
        (1, "Jeff", "DELETE", True),
        (1, "Jeffrey", "INSERT", True),
        (2, "Donny", "DELETE", False),
        (3, "Walter", "INSERT", False),
        (4, "Maude", "INSERT", False),
    ]
    # An update's pair shares one row id; distinct rows have distinct ids.
    assert ids[(1, "DELETE", "Jeff")] == ids[(1, "INSERT", "Jeffrey")]
    assert (
        len(
            {
                ids[(2, "DELETE", "Donny")],
                ids[(3, "INSERT", "Walter")],
                ids[(4, "INSERT", "Maude")],
                ids[(1, "DELETE", "Jeff")],
            }
        )
        == 4
    )


def test_listing_3_redo_history(session, clock):
    start = _people_history(session, clock)
    df = session.sql(f"SELECT * FROM people CHANGES (INFORMATION => REDO) AT (VERSION => {start})")
    got = [
        (
            r["METADATA$COMMIT_VERSION"] - start,
            r["id"],
            r["name"],
            r["METADATA$ACTION"],
            r["METADATA$ISUPDATE"],
        )
        for r in df.collect()
    ]
    assert sorted(got) == sorted(
        [
            (1, 3, "Walter", "INSERT", False),
            (1, 4, "Maud", "INSERT", False),
            (1, 5, "Uli", "INSERT", False),
            (2, 1, "Jeff", "DELETE", True),
            (2, 1, "Jeffrey", "INSERT", True),
            (3, 4, "Maud", "DELETE", True),
            (3, 4, "Maude", "INSERT", True),
            (4, 2, "Donny", "DELETE", False),
            (4, 5, "Uli", "DELETE", False),
        ]
    )
    versions = [g[0] for g in got]
    assert versions == sorted(versions), "REDO is in commit order"
    maud = {r["METADATA$ROW_ID"] for r in df.collect() if r["id"] == 4}
    assert len(maud) == 1, "Maud's insert and update share one row id"


def test_listing_9_transactional_stream_consumption(session, clock, spark, tmp_path):
    session.sql("CREATE TABLE people (id INT, name STRING)")
    session.sql("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')")
    clock.advance(seconds=60)  # 12:00
    session.sql("CREATE STREAM people_stream ON TABLE people SHOW_INITIAL_ROWS = true")
    session.sql("CREATE TABLE people_changes (name varchar, action varchar, isUpdate varchar)")
    consume = "INSERT INTO people_changes SELECT name, $ACTION, $ISUPDATE FROM people_stream"
    session.sql(consume)

    def changes_table():
        return sorted(
            (n, a, u.upper()) for n, a, u in rows(session.sql("SELECT * FROM people_changes"))
        )

    assert changes_table() == [("Donny", "INSERT", "FALSE"), ("Jeff", "INSERT", "FALSE")]

    clock.advance(seconds=60)  # 12:01
    session.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud'), (5, 'Uli')")
    session.sql("TRUNCATE TABLE people_changes")
    session.sql(consume)
    assert changes_table() == [
        ("Maud", "INSERT", "FALSE"),
        ("Uli", "INSERT", "FALSE"),
        ("Walter", "INSERT", "FALSE"),
    ]
    session.sql("TRUNCATE TABLE people_changes")

    clock.advance(seconds=60)  # 12:02
    session.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    clock.advance(seconds=60)  # 12:03
    session.sql("UPDATE people SET name = 'Maude' WHERE id = 4")
    session.sql("BEGIN")
    other = changelake.connect(session.warehouse.root, spark=spark, clock=clock)
    clock.advance(seconds=60)  # 12:04, another session
    other.sql("DELETE FROM people WHERE id in (2, 5)")
    clock.advance(seconds=120)  # 12:06
    session.sql(consume)
    # Inside the transaction the stream keeps returning the same changes.
    assert len(session.sql("SELECT * FROM people_stream").collect()) == 4
    clock.advance(seconds=180)  # 12:09
    session.sql("COMMIT")
    clock.advance(seconds=60)
    assert changes_table() == [
        ("Jeff", "DELETE", "TRUE"),
        ("Jeffrey", "INSERT", "TRUE"),
        ("Maud", "DELETE", "TRUE"),
        ("Maude", "INSERT", "TRUE"),
    ]
    # Then the deletes excluded by the transaction's snapshot.
    session.sql("TRUNCATE TABLE people_changes")
    session.sql(consume)
    assert changes_table() == [("Donny", "DELETE", "FALSE"), ("Uli", "DELETE", "FALSE")]
    assert session.stream_has_data("people_stream") is False
    other.close()


def test_rollback_leaves_stream_frontier(session, clock):
    session.sql("CREATE TABLE t (id INT)")
    session.sql("CREATE TABLE sink (id INT, action STRING)")
    session.sql("CREATE STREAM s ON TABLE t")
    session.sql("INSERT INTO t VALUES (1), (2)")
    session.sql("BEGIN")
    session.sql("INSERT INTO sink SELECT id, METADATA$ACTION FROM s")
    session.sql("ROLLBACK")
    assert rows(session.sql("SELECT id FROM s")) == [(1,), (2,)]
    assert rows(session.sql("SELECT * FROM sink")) == []
    session.sql("INSERT INTO sink SELECT id, METADATA$ACTION FROM s")
    assert rows(session.sql("SELECT * FROM sink")) == [(1, "INSERT"), (2, "INSERT")]
    assert rows(session.sql("SELECT id FROM s")) == []

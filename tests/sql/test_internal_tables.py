"""Internal tables (catalog/internal.py), with APPLY CHANGES state as the case: left out of SHOW
TABLES and listed by SHOW INTERNAL TABLES, readable, refused for every user statement that
would change them (which then changes nothing), dropped with their owner, kept across its
rename, never confused with a user's table of a similar name, and moved into the internal
namespace when a warehouse of an earlier changelake applies again."""

from __future__ import annotations

import pytest
from conftest import rows

from changelake.catalog.requests import CommitRequest, RenameTable
from changelake.errors import InternalTableError, InvalidStatementError
from changelake.txn.context import StatementContext

APPLY = "APPLY CHANGES INTO t FROM src KEYS (id) SEQUENCE BY seq APPLY AS DELETE WHEN op = 'D'"


def _applied(session, *events):
    """Apply ``events`` (id, v, seq, op) to ``t`` from the table ``src``; the rows of ``t``."""
    session.sql("TRUNCATE TABLE src")
    values = ", ".join(
        f"({i}, {'NULL' if v is None else repr(v)}, {q}, '{o}')" for i, v, q, o in events
    )
    session.sql(f"INSERT INTO src VALUES {values}")
    session.sql(APPLY)
    return rows(session.sql("SELECT * FROM t"))


@pytest.fixture
def applied(session):
    """``t`` with an APPLY CHANGES state: key 1 live, key 2 deleted (a tombstone)."""
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("CREATE TABLE src (id INT, v STRING, seq BIGINT, op STRING)")
    assert _applied(session, (1, "a", 1, "U"), (2, "b", 1, "U"), (2, None, 5, "D")) == [(1, "a")]
    return session


def _internal(session, owner: str | None = None) -> list[tuple]:
    where = f" IN TABLE {owner}" if owner else ""
    found = session.sql(f"SHOW INTERNAL TABLES{where}").collect()
    return [(r.name, r.owner, r.purpose) for r in found]


def _state(session) -> str:
    (found,) = _internal(session, "t")
    return found[0]


def test_the_state_is_listed_by_show_internal_tables_only_and_may_be_read(applied):
    session = applied
    t = session.catalog.table("t")
    name = f"#{t.table_id}#apply_state"
    assert [r.name for r in session.sql("SHOW TABLES").collect()] == ["src", "t"]
    assert _internal(session) == [(name, "t", "APPLY CHANGES state")]
    assert _internal(session, "t") == [(name, "t", "APPLY CHANGES state")]
    assert _internal(session, "src") == []
    shown = session.sql("SHOW INTERNAL TABLES").first()
    assert (shown.version, shown.rows) == (0, 2)
    state = rows(session.sql(f"SELECT id, __seq, __deleted FROM `{name}`"))
    assert state == [(1, 1, False), (2, 5, True)]
    assert [r.name for r in session.sql(f"DESCRIBE TABLE `{name}`").collect()][:2] == [
        "id",
        "__seq",
    ]


def test_user_statements_cannot_change_the_state_and_change_nothing(applied):
    session = applied
    name = _state(session)
    q = f"`{name}`"
    refused = [
        f"INSERT INTO {q} SELECT * FROM {q}",
        f"INSERT OVERWRITE {q} SELECT * FROM {q}",
        f"UPDATE {q} SET __seq = 0",
        f"DELETE FROM {q} WHERE id = 2",
        f"DELETE FROM {q}",
        f"MERGE INTO {q} s USING src ON s.id = src.id WHEN MATCHED THEN DELETE",
        f"TRUNCATE TABLE {q}",
        f"ALTER TABLE {q} ADD COLUMN x INT",
        f"ALTER TABLE {q} RENAME TO mine",
        f"ALTER TABLE {q} SET DATA_RETENTION_TIME_IN_DAYS = 30",
        f"DROP TABLE {q}",
        f"DROP TABLE IF EXISTS {q}",
        f"APPLY CHANGES INTO {q} FROM src KEYS (id) SEQUENCE BY seq",
        f"CREATE VIEW v AS SELECT id FROM {q}",
        f"CREATE STREAM s ON TABLE {q}",
    ]
    before = (session.catalog.table(name), rows(session.sql(f"SELECT * FROM {q}")))
    for statement in refused:
        with pytest.raises(InternalTableError) as error:
            session.sql(statement)
        message = str(error.value)
        assert f"table {name}: it is internal" in message, statement  # what
        assert "APPLY CHANGES state of table t" in message, statement  # why
        assert "DROP TABLE t drops it too" in message, statement  # how
    with pytest.raises(InternalTableError, match="internal"):
        session.append(name, session.spark.createDataFrame([(9,)], "id INT"))
    # names in the reserved namespace: refused whether the table exists or not
    for statement in (
        f"CREATE OR REPLACE TABLE {q} (id INT)",
        f"CREATE TABLE IF NOT EXISTS {q} AS SELECT 1 AS id",
        "CREATE TABLE `#99#apply_state` (id INT)",
        "ALTER TABLE src RENAME TO `#99#x`",
        "CREATE VIEW `#99#v` AS SELECT 1 AS one",
        "CREATE STREAM `#99#s` ON TABLE src",
    ):
        with pytest.raises(InternalTableError, match="names starting with # are reserved"):
            session.sql(statement)
    assert (session.catalog.table(name), rows(session.sql(f"SELECT * FROM {q}"))) == before
    assert [r.name for r in session.sql("SHOW TABLES").collect()] == ["src", "t"]
    assert session.sql("SHOW VIEWS").collect() == session.sql("SHOW STREAMS").collect() == []
    # APPLY CHANGES still works with the state it kept: key 2's tombstone holds off an older
    # upsert, a newer one brings the key back
    assert _applied(session, (2, "old", 4, "U"), (1, "b", 2, "U")) == [(1, "b")]
    assert _applied(session, (2, "new", 6, "U")) == [(1, "b"), (2, "new")]


def test_dropping_or_replacing_the_owner_drops_its_state(applied):
    session = applied
    name = _state(session)
    session.sql("DROP TABLE t")
    assert session.catalog.find_table(name) is None
    assert _internal(session) == []
    # a new t starts with a new state: nothing of the old tombstones
    session.sql("CREATE TABLE t (id INT, v STRING)")
    assert _applied(session, (2, "b", 1, "U")) == [(2, "b")]
    replaced = _state(session)
    session.sql("CREATE OR REPLACE TABLE t AS SELECT * FROM t")  # the way to start over
    assert session.catalog.find_table(replaced) is None
    assert _internal(session) == []
    assert rows(session.sql("SELECT * FROM t")) == [(2, "b")]


def test_renaming_the_owner_keeps_its_state(applied):
    session = applied
    name = _state(session)
    session.sql("ALTER TABLE t RENAME TO u")
    assert _internal(session) == [(name, "u", "APPLY CHANGES state")]
    with pytest.raises(InternalTableError, match="APPLY CHANGES state of table u"):
        session.sql(f"DELETE FROM `{name}`")
    session.sql("ALTER TABLE u RENAME TO t")
    assert _applied(session, (2, "old", 4, "U")) == [(1, "a")]  # the tombstone still holds


def test_a_user_table_with_a_similar_name_is_a_table_like_any_other(session):
    session.sql("CREATE TABLE t__apply_state (id INT, note STRING)")
    session.sql("INSERT INTO t__apply_state VALUES (1, 'mine')")
    session.sql("CREATE TABLE t (id INT, v STRING)")
    session.sql("CREATE TABLE src (id INT, v STRING, seq BIGINT, op STRING)")
    assert _applied(session, (1, "a", 1, "U")) == [(1, "a")]
    session.sql("UPDATE t__apply_state SET note = 'still mine'")
    assert [r.name for r in session.sql("SHOW TABLES").collect()] == ["src", "t", "t__apply_state"]
    session.sql("DROP TABLE t")
    assert rows(session.sql("SELECT * FROM t__apply_state")) == [(1, "still mine")]
    with pytest.raises(InvalidStatementError, match="reserved"):
        session.sql("CREATE TABLE `#1#t` (id INT)")


def test_a_legacy_state_table_becomes_internal_on_the_next_apply(applied):
    session = applied
    name = _state(session)
    legacy = session.catalog.table(name)
    # the layout of an earlier changelake: the state as the ordinary table t__apply_state
    StatementContext(session.catalog, session.clock).commit(
        CommitRequest("legacy", "RENAME TABLE", (RenameTable(legacy.table_id, "t__apply_state"),))
    )
    assert _internal(session) == []
    assert _applied(session, (2, "old", 4, "U")) == [(1, "a")]  # the tombstone came along
    assert session.catalog.find_table("t__apply_state") is None
    assert session.catalog.table(name).table_id == legacy.table_id
    assert [r.name for r in session.sql("SHOW TABLES").collect()] == ["src", "t"]
    assert _applied(session, (2, "new", 6, "U")) == [(1, "a"), (2, "new")]


def test_ingest_channels_cannot_write_an_internal_table(applied, tmp_path):
    from changelake.ingest import Client

    session = applied
    state = _state(session)
    before = session.catalog.table(state).current_version
    with Client(str(tmp_path / "wh"), compact_after_files=None) as client:
        with pytest.raises(InternalTableError, match="Cannot open an ingest channel on table #"):
            client.open_channel("c", table=state)
        with pytest.raises(InternalTableError, match="names starting with # are reserved"):
            client.open_channel("c", table="t", error_table=state)
    assert session.catalog.table(state).current_version == before
    assert session.catalog.list_channels(session.catalog.table(state).table_id) == []

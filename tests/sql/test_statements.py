"""Every statement of the SQL surface through ``session.sql``, checked against expected rows."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from conftest import rows, state_of

from changelake.errors import (
    InvalidStatementError,
    TableNotFoundError,
    TimeTravelError,
    TransactionError,
)


def version_of(session, name: str) -> int:
    return session.catalog.table(name).current_version


@pytest.fixture
def people(session):
    session.sql("CREATE TABLE people (id INT, name STRING)")
    session.sql("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')")
    return session


# -- CREATE / DROP / ALTER ------------------------------------------------------------------------


def test_create_table_with_every_type(session):
    result = session.sql(
        "CREATE TABLE t (i INT NOT NULL, b BIGINT, n NUMBER(10,2), d DECIMAL(5,1), f FLOAT,"
        " x DOUBLE, ok BOOLEAN, s STRING, v VARCHAR(20), day DATE, at TIMESTAMP, raw BINARY)"
    ).first()
    assert (result.operation, result.object, result.version) == ("CREATE TABLE", "t", 0)
    assert len(result.statement_id) == 36
    described = [tuple(r) for r in session.sql("DESCRIBE TABLE t").collect()]
    assert described == [
        ("i", "INT", False),
        ("b", "BIGINT", True),
        ("n", "DECIMAL(10,2)", True),
        ("d", "DECIMAL(5,1)", True),
        ("f", "DOUBLE", True),
        ("x", "DOUBLE", True),
        ("ok", "BOOLEAN", True),
        ("s", "STRING", True),
        ("v", "STRING", True),
        ("day", "DATE", True),
        ("at", "TIMESTAMP", True),
        ("raw", "BINARY", True),
    ]
    session.sql(
        "INSERT INTO t VALUES (1, 10000000000, 12.345, 1.25, 0.5, 2.5, TRUE, 'a', 'b',"
        " '2024-05-01', TIMESTAMP '2024-05-01 12:30:00', X'0102')"
    )
    session.sql("INSERT INTO t (i, s) VALUES (2, 'only')")
    assert rows(session.sql("SELECT * FROM t")) == [
        (
            1,
            10000000000,
            decimal.Decimal("12.35"),
            decimal.Decimal("1.3"),
            0.5,
            2.5,
            True,
            "a",
            "b",
            dt.date(2024, 5, 1),
            dt.datetime(2024, 5, 1, 12, 30),
            bytearray(b"\x01\x02"),
        ),
        (2, None, None, None, None, None, None, "only", None, None, None, None),
    ]


def test_literal_values_fast_path_matches_spark_path(session):
    columns = "(i INT, n DECIMAL(6,2), ok BOOLEAN, s STRING, day DATE, raw BINARY, x DOUBLE)"
    session.sql(f"CREATE TABLE a {columns}")
    session.sql(f"CREATE TABLE b {columns}")
    for values in (
        "(1, 1.005, TRUE, 'x', '2024-01-02', 'ab', 1)",
        "(-2, -3, FALSE, NULL, NULL, NULL, NULL)",
        "(2.7, -1.005, 'yes', 5, '2024-02-29', 'c', 2.5)",
        "(-2.5, '2.345', 0, 'z', NULL, NULL, '1e3')",
        "('7', 12, 2, TRUE, NULL, NULL, -0.5)",
        "(-1e1, 2e0, 1.5, 2.5e0, NULL, NULL, -1e-1)",
    ):
        session.sql(f"INSERT INTO a VALUES {values}")  # literals: written by the driver
        session.sql(f"INSERT INTO b SELECT * FROM VALUES {values}")  # through a Spark job
    assert rows(session.sql("SELECT * FROM a")) == rows(session.sql("SELECT * FROM b"))
    assert len(rows(session.sql("SELECT * FROM a"))) == 6


def test_create_table_as_select_and_replace(people):
    result = people.sql("CREATE TABLE names AS SELECT id * 10 AS k, upper(name) AS n FROM people")
    assert result.first().rows_inserted == 2
    assert rows(people.sql("SELECT * FROM names")) == [(10, "JEFF"), (20, "DONNY")]
    assert [r.type for r in people.sql("DESCRIBE TABLE names").collect()] == ["INT", "STRING"]

    people.sql("CREATE OR REPLACE TABLE names (z BOOLEAN)")
    assert rows(people.sql("SELECT * FROM names")) == []
    assert people.sql("SELECT * FROM names").columns == ["z"]
    assert version_of(people, "names") == 0
    people.sql("CREATE OR REPLACE TABLE names AS SELECT * FROM range(3)")
    assert rows(people.sql("SELECT * FROM names")) == [(0,), (1,), (2,)]
    people.sql("CREATE TABLE IF NOT EXISTS names (other INT)")
    assert people.sql("SELECT * FROM names").columns == ["id"]


def test_drop_table(people):
    result = people.sql("DROP TABLE people").first()
    assert result.operation == "DROP TABLE"
    with pytest.raises(TableNotFoundError):
        people.sql("SELECT * FROM people")
    assert "did not exist" in people.sql("DROP TABLE IF EXISTS people").first().message
    people.sql("CREATE TABLE people (x INT)")
    assert rows(people.sql("SELECT * FROM people")) == []


def test_alter_table_add_column_reads_null_for_older_rows(people):
    people.sql("ALTER TABLE people ADD COLUMN age INT")
    people.sql("INSERT INTO people VALUES (3, 'Walter', 40)")
    assert rows(people.sql("SELECT * FROM people")) == [
        (1, "Jeff", None),
        (2, "Donny", None),
        (3, "Walter", 40),
    ]
    assert people.sql("SELECT * FROM people AT (VERSION => 1)").columns == ["id", "name"]
    people.sql("UPDATE people SET age = 1 WHERE id = 1")
    assert rows(people.sql("SELECT id, age FROM people WHERE age IS NOT NULL")) == [(1, 1), (3, 40)]


def test_alter_table_rename_column_and_table(people):
    people.sql("ALTER TABLE people RENAME COLUMN name TO full_name")
    assert rows(people.sql("SELECT full_name FROM people WHERE id = 1")) == [("Jeff",)]
    assert people.sql("SELECT * FROM people AT (VERSION => 1)").columns == ["id", "name"]
    people.sql("ALTER TABLE people RENAME TO persons")
    assert rows(people.sql("SELECT * FROM persons")) == [(1, "Jeff"), (2, "Donny")]
    with pytest.raises(TableNotFoundError, match="'people' does not exist"):
        people.sql("SELECT * FROM people")
    assert [r.operation for r in people.sql("DESCRIBE HISTORY persons").collect()] == [
        "CREATE TABLE",
        "INSERT",
        "RENAME COLUMN",
    ]


def test_alter_table_set_retention(people):
    people.sql("ALTER TABLE people SET DATA_RETENTION_TIME_IN_DAYS = 7")
    assert people.catalog.table("people").retention_days() == 7.0
    assert [r.retention_days for r in people.sql("SHOW TABLES").collect()] == [7.0]
    people.sql("CREATE TABLE kept (x INT) DATA_RETENTION_TIME_IN_DAYS = 3")
    assert people.catalog.table("kept").retention_days() == 3.0


def test_boolean_table_properties_take_the_keywords(people):
    people.sql("CREATE TABLE plain (x INT) BEFORE_IMAGES = FALSE CHANGE_TRACKING = TRUE")
    info = people.catalog.table("plain")
    assert not info.before_images() and info.properties["change_tracking"] == "true"
    people.sql("ALTER TABLE plain SET BEFORE_IMAGES = TRUE")
    assert people.catalog.table("plain").before_images()
    with pytest.raises(InvalidStatementError, match="BEFORE_IMAGES must be TRUE or"):
        people.sql("ALTER TABLE plain SET BEFORE_IMAGES = 3")


# -- INSERT / UPDATE / DELETE / MERGE / TRUNCATE ---------------------------------------------------


def test_insert_values_select_and_column_list(people):
    people.sql("CREATE TABLE other (name STRING, id INT, extra DOUBLE)")
    people.sql("INSERT INTO other (id, name) VALUES (7, 'Seven'), (8, upper('eight'))")
    assert rows(people.sql("SELECT * FROM other")) == [("EIGHT", 8, None), ("Seven", 7, None)]
    result = people.sql("INSERT INTO people SELECT id, name FROM other WHERE id = 7").first()
    assert (result.operation, result.rows_inserted, result.version) == ("INSERT", 1, 2)
    people.sql("INSERT INTO people (name, id) SELECT 'Uli', 5")
    assert rows(people.sql("SELECT * FROM people")) == [
        (1, "Jeff"),
        (2, "Donny"),
        (5, "Uli"),
        (7, "Seven"),
    ]


def test_update(people):
    result = people.sql("UPDATE people SET name = name || '!' WHERE id > 1").first()
    assert (result.operation, result.rows_updated, result.version) == ("UPDATE", 1, 2)
    assert rows(people.sql("SELECT * FROM people")) == [(1, "Jeff"), (2, "Donny!")]
    assert people.sql("UPDATE people SET name = 'x' WHERE id = 99").first().rows_updated == 0
    people.sql("UPDATE people SET id = id + 100")
    assert rows(people.sql("SELECT id FROM people")) == [(101,), (102,)]


def test_update_from(people):
    people.sql("CREATE TABLE renames (pid INT, new_name STRING)")
    people.sql("INSERT INTO renames VALUES (2, 'Theodore'), (3, 'nobody')")
    result = people.sql(
        "UPDATE people SET name = r.new_name FROM renames r WHERE people.id = r.pid"
    ).first()
    assert result.rows_updated == 1
    assert rows(people.sql("SELECT * FROM people")) == [(1, "Jeff"), (2, "Theodore")]


def test_delete(people):
    people.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud')")
    result = people.sql("DELETE FROM people WHERE id IN (2, 4)").first()
    assert (result.operation, result.rows_deleted) == ("DELETE", 2)
    assert rows(people.sql("SELECT * FROM people")) == [(1, "Jeff"), (3, "Walter")]
    assert people.sql("DELETE FROM people").first().rows_deleted == 2
    assert rows(people.sql("SELECT * FROM people")) == []


def test_delete_using(people):
    people.sql("CREATE TABLE gone (pid INT)")
    people.sql("INSERT INTO gone VALUES (1), (9)")
    result = people.sql("DELETE FROM people USING gone WHERE people.id = gone.pid").first()
    assert result.rows_deleted == 1
    assert rows(people.sql("SELECT * FROM people")) == [(2, "Donny")]


def test_merge(people):
    people.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud')")
    people.sql("CREATE TABLE src (id INT, name STRING, op STRING)")
    people.sql(
        "INSERT INTO src VALUES (1, 'Jeffrey', 'upd'), (2, NULL, 'del'), (3, 'Walt', 'keep'),"
        " (5, 'Uli', 'new'), (6, 'Nope', 'skip')"
    )
    result = people.sql(
        """
        MERGE INTO people t USING src s ON t.id = s.id
        WHEN MATCHED AND s.op = 'del' THEN DELETE
        WHEN MATCHED AND s.op = 'upd' THEN UPDATE SET name = s.name
        WHEN NOT MATCHED AND s.op <> 'skip' THEN INSERT (id, name) VALUES (s.id, s.name)
        """
    ).first()
    assert (result.operation, result.rows_inserted, result.rows_updated, result.rows_deleted) == (
        "MERGE",
        1,
        1,
        1,
    )
    assert rows(people.sql("SELECT * FROM people")) == [
        (1, "Jeffrey"),
        (3, "Walter"),
        (4, "Maud"),
        (5, "Uli"),
    ]


def test_merge_insert_without_column_list_and_update_all_matched(people):
    people.sql(
        "MERGE INTO people USING (SELECT 2 AS id, 'D' AS name UNION ALL SELECT 9, 'N') s"
        " ON people.id = s.id"
        " WHEN MATCHED THEN UPDATE SET people.name = lower(s.name)"
        " WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.name)"
    )
    assert rows(people.sql("SELECT * FROM people")) == [(1, "Jeff"), (2, "d"), (9, "N")]


def test_truncate(people):
    result = people.sql("TRUNCATE TABLE people").first()
    assert (result.operation, result.rows_deleted, result.version) == ("TRUNCATE", 2, 2)
    assert rows(people.sql("SELECT * FROM people")) == []
    assert rows(people.sql("SELECT * FROM people AT (VERSION => 1)")) == [(1, "Jeff"), (2, "Donny")]


def test_updated_rows_keep_identity_in_hidden_columns_not_select_star(people):
    people.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    people.sql("OPTIMIZE people")
    for query in ("SELECT * FROM people", "SELECT p.* FROM people p"):
        assert people.sql(query).columns == ["id", "name"]
    assert rows(people.sql("SELECT * FROM people")) == [(1, "Jeffrey"), (2, "Donny")]
    from changelake.storage.snapshot import RID, state_relation

    info = people.catalog.table("people")
    identities = state_relation(
        people.spark, people.warehouse, state_of(people, info), identity=True
    ).frame(people.spark)
    assert rows(identities.select("id", RID)) == [(1, 0), (2, 1)]


# -- views and queries ----------------------------------------------------------------------------


def test_views(people):
    people.sql("CREATE VIEW named AS SELECT id, upper(name) AS shout FROM people WHERE id > 1")
    people.sql("CREATE VIEW named_twice AS SELECT shout, shout AS again FROM named")
    assert people.catalog.view_sql("named") is not None
    assert [r.name for r in people.sql("SHOW VIEWS").collect()] == ["named", "named_twice"]
    assert rows(people.sql("SELECT * FROM named")) == [(2, "DONNY")]
    assert rows(people.sql("SELECT * FROM named_twice")) == [("DONNY", "DONNY")]
    people.sql("INSERT INTO people VALUES (3, 'Walter')")
    assert rows(people.sql("SELECT * FROM named_twice")) == [
        ("DONNY", "DONNY"),
        ("WALTER", "WALTER"),
    ]
    people.sql("CREATE OR REPLACE VIEW named AS SELECT id, name AS shout FROM people")
    assert rows(people.sql("SELECT shout FROM named_twice")) == [("Donny",), ("Jeff",), ("Walter",)]
    assert people.sql("DROP VIEW named_twice").first().operation == "DROP VIEW"
    with pytest.raises(TableNotFoundError, match="named_twice"):
        people.sql("SELECT * FROM named_twice")
    people.sql("DROP VIEW IF EXISTS named_twice")


def test_a_view_with_a_cte_read_twice_inside_a_cte(people):
    """Each read keeps the view's WITH in its own subquery: the two do not clash (dbt's
    ephemeral models are such CTEs, and its table comparisons read a view twice)."""
    people.sql("CREATE VIEW v AS WITH c AS (SELECT * FROM people) SELECT id, name FROM c")
    query = (
        "WITH diff AS (SELECT count(*) AS n FROM ((SELECT id FROM people EXCEPT SELECT id FROM v)"
        " UNION ALL (SELECT id FROM v EXCEPT SELECT id FROM people)) AS d) SELECT n FROM diff"
    )
    assert rows(people.sql(query)) == [(0,)]


def test_view_is_stored_in_the_catalog(people, spark):
    import changelake

    people.sql("CREATE VIEW v AS SELECT name FROM people WHERE id = 2")
    other = changelake.connect(people.warehouse.root, spark=spark)
    try:
        assert rows(other.sql("SELECT * FROM v")) == [("Donny",)]
    finally:
        other.close()


def test_spark_sql_queries(people):
    people.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud')")
    people.sql("CREATE TABLE items (id INT, oid INT, item STRING)")
    people.sql("INSERT INTO items VALUES (11, 2, 'Ball'), (12, 2, 'Surfboard'), (13, 1, 'Car')")
    people.sql("CREATE VIEW owned AS SELECT oid, count(*) AS n FROM items GROUP BY oid")
    joined = people.sql(
        "SELECT p.name, i.item FROM people p JOIN items i ON p.id = i.oid WHERE i.id > 11"
    )
    assert rows(joined) == [("Donny", "Surfboard"), ("Jeff", "Car")]
    cte = people.sql(
        "WITH counts AS (SELECT oid, n FROM owned) "
        "SELECT name, coalesce(n, 0) AS n FROM people LEFT JOIN counts ON id = oid"
    )
    assert rows(cte) == [("Donny", 2), ("Jeff", 1), ("Maud", 0), ("Walter", 0)]
    subquery = people.sql(
        "SELECT name FROM people WHERE id IN (SELECT oid FROM items)"
        " AND id = (SELECT max(oid) FROM items)"
    )
    assert rows(subquery) == [("Donny",)]
    window = people.sql(
        "SELECT item, row_number() OVER (PARTITION BY oid ORDER BY id DESC) AS rn FROM items"
    )
    assert rows(window) == [("Ball", 2), ("Car", 1), ("Surfboard", 1)]
    assert rows(people.sql("SELECT id * 2 FROM range(3)")) == [(0,), (2,), (4,)]
    ranged = people.sql("SELECT r.id, p.name FROM range(1, 3) r JOIN people p ON r.id = p.id")
    assert rows(ranged) == [(1, "Jeff"), (2, "Donny")]
    union = people.sql("SELECT id FROM people UNION ALL SELECT id FROM items ORDER BY 1 LIMIT 2")
    assert [r[0] for r in union.collect()] == [1, 2]


def test_queries_are_lazy(people):
    df = people.sql("SELECT * FROM people")
    people.sql("INSERT INTO people VALUES (3, 'Walter')")
    assert len(df.collect()) == 2  # bound to the version read when the query was planned


# -- time travel ----------------------------------------------------------------------------------


def test_time_travel_version_timestamp_offset_statement(session, clock):
    session.sql("CREATE TABLE people (id INT, name STRING)")
    clock.advance(seconds=60)
    inserted = session.sql("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')").first()
    after_insert = clock.now()
    clock.advance(seconds=60)
    updated = session.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1").first()
    clock.advance(seconds=60)
    session.sql("DELETE FROM people WHERE id = 2")
    clock.advance(seconds=30)

    v1 = [(1, "Jeff"), (2, "Donny")]
    v2 = [(1, "Jeffrey"), (2, "Donny")]
    assert rows(session.sql("SELECT * FROM people AT (VERSION => 1)")) == v1
    assert rows(session.sql("SELECT * FROM people BEFORE (VERSION => 2)")) == v1
    assert rows(session.sql("SELECT * FROM people AT (VERSION => 0)")) == []
    stamp = dt.datetime.fromtimestamp(after_insert + 1).isoformat(sep=" ")
    assert rows(session.sql(f"SELECT * FROM people AT (TIMESTAMP => '{stamp}')")) == v1
    assert (
        rows(session.sql(f"SELECT * FROM people AT (TIMESTAMP => TO_TIMESTAMP('{stamp}'))")) == v1
    )
    # now is 30 s after the delete, 90 s after the update, 150 s after the insert
    assert rows(session.sql("SELECT * FROM people AT (OFFSET => -60)")) == v2
    assert rows(session.sql("SELECT * FROM people AT (OFFSET => -120)")) == v1
    assert rows(session.sql("SELECT * FROM people AT (OFFSET => -180)")) == []
    assert (
        rows(session.sql(f"SELECT * FROM people AT (STATEMENT => '{updated.statement_id}')")) == v2
    )
    assert (
        rows(session.sql(f"SELECT * FROM people BEFORE (STATEMENT => '{updated.statement_id}')"))
        == v1
    )
    assert (
        rows(session.sql(f"SELECT * FROM people BEFORE (STATEMENT => '{inserted.statement_id}')"))
        == []
    )
    assert rows(session.sql("SELECT * FROM people")) == [(1, "Jeffrey")]
    with pytest.raises(TimeTravelError):
        session.sql("SELECT * FROM people AT (STATEMENT => 'no-such-statement')")


def test_time_travel_in_joins_and_dml(people):
    people.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    diff = people.sql(
        "SELECT old.name AS was, new.name AS now FROM people AT (VERSION => 1) old"
        " JOIN people new ON old.id = new.id WHERE old.name <> new.name"
    )
    assert rows(diff) == [("Jeff", "Jeffrey")]
    people.sql("CREATE TABLE snapshot AS SELECT * FROM people AT (VERSION => 1)")
    assert rows(people.sql("SELECT * FROM snapshot")) == [(1, "Jeff"), (2, "Donny")]
    people.sql("TRUNCATE TABLE people")
    people.sql("INSERT INTO people SELECT * FROM people BEFORE (VERSION => 3)")
    assert rows(people.sql("SELECT * FROM people")) == [(1, "Jeffrey"), (2, "Donny")]


# -- metadata statements --------------------------------------------------------------------------


def test_describe_history(people):
    people.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud'), (5, 'Uli')")
    people.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    people.sql("DELETE FROM people WHERE id IN (2, 5)")
    history = people.sql("DESCRIBE HISTORY people")
    assert history.columns == [
        "version",
        "committed_at",
        "operation",
        "statement_id",
        "rows_inserted",
        "rows_updated",
        "rows_deleted",
        "files_added",
        "files_removed",
    ]
    got = [
        (r.version, r.operation, r.rows_inserted, r.rows_updated, r.rows_deleted, r.files_added)
        for r in history.collect()
    ]
    assert got == [
        (0, "CREATE TABLE", 0, 0, 0, 0),
        (1, "INSERT", 2, 0, 0, 1),
        (2, "INSERT", 3, 0, 0, 1),
        (3, "UPDATE", 0, 1, 0, 1),
        (4, "DELETE", 0, 0, 2, 0),
    ]
    times = [r.committed_at for r in history.collect()]
    assert times == sorted(times) and isinstance(times[0], dt.datetime)
    assert len({r.statement_id for r in history.collect()}) == 5


def test_show_tables(people):
    people.sql("CREATE TABLE empty (x INT)")
    people.sql("CREATE VIEW v AS SELECT * FROM people")
    shown = {r.name: (r.version, r.rows) for r in people.sql("SHOW TABLES").collect()}
    assert shown == {"empty": (0, 0), "people": (1, 2)}


# -- transactions ---------------------------------------------------------------------------------


@pytest.fixture
def two_tables(people):
    people.sql("CREATE TABLE audit (id INT, what STRING)")
    return people


def test_transaction_commits_two_tables_atomically(two_tables):
    s = two_tables
    s.sql("BEGIN")
    staged = s.sql("INSERT INTO people VALUES (3, 'Walter')").first()
    assert staged.version is None and "staged" in staged.message
    s.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    s.sql("INSERT INTO audit VALUES (3, 'insert'), (1, 'update')")
    s.sql("DELETE FROM people WHERE id = 2")
    # reads inside the transaction see its own writes
    assert rows(s.sql("SELECT * FROM people")) == [(1, "Jeffrey"), (3, "Walter")]
    assert rows(s.sql("SELECT count(*) FROM audit")) == [(2,)]
    # nothing is visible outside yet
    assert version_of(s, "people") == 1 and version_of(s, "audit") == 0
    done = s.sql("COMMIT").first()
    assert done.operation == "COMMIT"
    assert version_of(s, "people") == 4 and version_of(s, "audit") == 1
    assert rows(s.sql("SELECT * FROM people")) == [(1, "Jeffrey"), (3, "Walter")]
    assert rows(s.sql("SELECT * FROM audit")) == [(1, "update"), (3, "insert")]
    history = s.sql("DESCRIBE HISTORY people").collect()
    assert [r.operation for r in history[2:]] == ["INSERT", "UPDATE", "DELETE"]
    assert rows(s.sql("SELECT * FROM people AT (VERSION => 2)")) == [
        (1, "Jeff"),
        (2, "Donny"),
        (3, "Walter"),
    ]


def test_rollback_leaves_nothing(two_tables):
    s = two_tables
    s.sql("BEGIN")
    s.sql("INSERT INTO people VALUES (3, 'Walter')")
    s.sql(
        "MERGE INTO audit USING people ON audit.id = people.id"
        " WHEN NOT MATCHED THEN INSERT VALUES (people.id, people.name)"
    )
    assert rows(s.sql("SELECT count(*) FROM audit")) == [(3,)]
    s.sql("ROLLBACK")
    assert version_of(s, "people") == 1 and version_of(s, "audit") == 0
    assert rows(s.sql("SELECT * FROM people")) == [(1, "Jeff"), (2, "Donny")]
    assert rows(s.sql("SELECT * FROM audit")) == []


def test_transaction_misuse(two_tables):
    s = two_tables
    with pytest.raises(TransactionError, match="without BEGIN"):
        s.sql("COMMIT")
    with pytest.raises(TransactionError, match="without BEGIN"):
        s.sql("ROLLBACK")
    s.sql("BEGIN TRANSACTION")
    with pytest.raises(TransactionError, match="already open"):
        s.sql("BEGIN")
    with pytest.raises(TransactionError, match="CREATE TABLE"):
        s.sql("CREATE TABLE x (a INT)")
    s.sql("ROLLBACK")
    s.sql("BEGIN WORK")
    s.sql("INSERT INTO audit VALUES (1, 'x')")
    s.sql("COMMIT WORK")
    assert version_of(s, "audit") == 1


# -- pruning --------------------------------------------------------------------------------------


def test_selective_where_reads_fewer_files(session):
    session.sql("CREATE TABLE events (id INT, kind STRING)")
    for start in (0, 100, 200, 300):  # literal VALUES: one file per statement
        values = ", ".join(f"({i}, 'k{i}')" for i in range(start, start + 100))
        session.sql(f"INSERT INTO events VALUES {values}")
    files_read = _files_scanned(session, "SELECT * FROM events WHERE id = 150")
    assert files_read == 1
    assert _files_scanned(session, "SELECT * FROM events WHERE id BETWEEN 150 AND 250") == 2
    assert _files_scanned(session, "SELECT * FROM events WHERE id > 1000") == 0
    assert _files_scanned(session, "SELECT * FROM events") == 4
    assert rows(session.sql("SELECT * FROM events WHERE id = 150")) == [(150, "k150")]
    assert rows(session.sql("SELECT count(*) FROM events WHERE id > 1000")) == [(0,)]
    # deleting rows of one file keeps the others prunable
    session.sql("DELETE FROM events WHERE id = 151")
    assert _files_scanned(session, "SELECT * FROM events WHERE id = 150") == 1
    assert rows(session.sql("SELECT * FROM events WHERE id BETWEEN 150 AND 152")) == [
        (150, "k150"),
        (152, "k152"),
    ]


def _files_scanned(session, query: str) -> int:
    """Parquet data files the plan of ``query`` reads (deletion-vector files are not counted)."""
    data_dir = session.warehouse.uri("data/")
    return sum(1 for f in session.sql(query).inputFiles() if data_dir in f)


# -- the paper's listings (seeds/000: listings 1, 2, 6, 7), run as written -----------------------


def paper_people(session, clock):
    session.sql("CREATE TABLE people (id INT, name STRING)")
    session.sql("INSERT INTO people VALUES (1, 'Jeff'), (2, 'Donny')")
    clock.advance(seconds=60)


def test_paper_listings_1_and_2(session, clock):
    paper_people(session, clock)
    # Listing 1
    assert rows(session.sql("SELECT * FROM people;")) == [(1, "Jeff"), (2, "Donny")]
    # Listing 2, one statement a minute as in the paper
    for statement in (
        "INSERT INTO people VALUES\n(3, 'Walter'),\n(4, 'Maud'),\n(5, 'Uli');",
        "UPDATE people SET name = 'Jeffrey' WHERE id = 1;",
        "UPDATE people SET name = 'Maude' WHERE id = 4;",
        "DELETE FROM people WHERE id in (2, 5);",
    ):
        session.sql(statement)
        clock.advance(seconds=60)
    assert rows(session.sql("SELECT * FROM people;")) == [
        (1, "Jeffrey"),
        (3, "Walter"),
        (4, "Maude"),
    ]
    # and every intermediate state stays readable
    assert rows(session.sql("SELECT * FROM people AT (OFFSET => -90)")) == [
        (1, "Jeffrey"),
        (2, "Donny"),
        (3, "Walter"),
        (4, "Maude"),
        (5, "Uli"),
    ]


def test_paper_listings_6_and_7(session, clock):
    paper_people(session, clock)
    session.sql("INSERT INTO people VALUES (3, 'Walter'), (4, 'Maude')")
    session.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    session.sql("CREATE TABLE items (id INT, oid INT, item STRING, desc STRING)")
    session.sql(
        "INSERT INTO items VALUES (11, 2, 'Ball', 'Bowling'), (12, 2, 'Surfboard', 'Yater'),"
        " (13, 1, 'Car', '1973'), (14, 1, 'Rug', 'Classic'), (15, 4, 'Autobahn LP', NULL)"
    )
    # Listing 6
    assert rows(session.sql("SELECT *\nFROM people;")) == [
        (1, "Jeffrey"),
        (2, "Donny"),
        (3, "Walter"),
        (4, "Maude"),
    ]
    assert rows(session.sql("SELECT * FROM items;")) == [
        (11, 2, "Ball", "Bowling"),
        (12, 2, "Surfboard", "Yater"),
        (13, 1, "Car", "1973"),
        (14, 1, "Rug", "Classic"),
        (15, 4, "Autobahn LP", None),
    ]
    # Listing 7
    session.sql(
        "CREATE VIEW owner_and_items AS SELECT\nname, item FROM people JOIN items ON people.id = oid;"
    )
    assert rows(session.sql("SELECT * FROM owner_and_items;")) == [
        ("Donny", "Ball"),
        ("Donny", "Surfboard"),
        ("Jeffrey", "Car"),
        ("Jeffrey", "Rug"),
        ("Maude", "Autobahn LP"),
    ]
    # the base-table changes that follow Listing 7 (12:14, 12:15)
    for statement in (
        "UPDATE items SET item = 'Ford' WHERE id = 13;",
        "UPDATE items SET oid = 4 WHERE id = 14;",
        "UPDATE items SET desc = 'Techno' WHERE id = 15;",
        "DELETE FROM people WHERE id = 2;",
    ):
        session.sql(statement)
    assert rows(session.sql("SELECT * FROM owner_and_items;")) == [
        ("Jeffrey", "Ford"),
        ("Maude", "Autobahn LP"),
        ("Maude", "Rug"),
    ]
    assert rows(session.sql("SELECT desc FROM items WHERE id = 15")) == [("Techno",)]

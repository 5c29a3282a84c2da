"""Bad input gets a clear error and changes nothing (issue 2, item 8).

Every case checks the error class, what the message says, that no Java or Py4J text leaks into it,
and that the warehouse is exactly as before: same versions, same rows.
"""

from __future__ import annotations

import pytest
from conftest import rows
from pyspark.errors import PySparkException

import changelake
from changelake.errors import (
    ChangelakeError,
    ColumnNotFoundError,
    ConflictError,
    DependencyError,
    InvalidStatementError,
    NotNullViolationError,
    SqlSyntaxError,
    TableNotFoundError,
    TimeTravelError,
    TypeMismatchError,
)

JAVA_MARKERS = ("py4j", "org.apache", "java.", "\tat ", "Traceback", "SQLSTATE", "__cl_ref")


@pytest.fixture
def wh(session):
    session.sql("CREATE TABLE people (id INT NOT NULL, name STRING, born DATE)")
    session.sql("INSERT INTO people VALUES (1, 'Jeff', '1970-01-01'), (2, 'Donny', NULL)")
    session.sql("CREATE TABLE src (id INT, name STRING)")
    session.sql("INSERT INTO src VALUES (1, NULL), (NULL, 'nobody'), (3, 'Walter')")
    return session


def snapshot(session) -> dict:
    """Every live table's version and rows, and the views: what 'nothing changed' compares."""
    tables = {
        info.name: (info.current_version, rows(session.table(info.name)))
        for info in session.catalog.list_tables()
    }
    return {"tables": tables, "views": session.catalog.list_views()}


def fails(session, statement: str, error: type[ChangelakeError], *expected: str) -> str:
    """Run ``statement``, check it raises ``error`` whose message holds ``expected``, and that
    nothing changed; returns the message."""
    before = snapshot(session)
    with pytest.raises(error) as caught:
        session.sql(statement).collect()
    message = str(caught.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    for marker in JAVA_MARKERS:
        assert marker not in message, f"{marker!r} leaked into {message!r}"
    assert len(message) < 400 and message.count("\n") == 0, message
    # Causes are chained on purpose (raise ... from e keeps Spark's error for debugging); what a
    # user reads, the message, is checked above.
    cause = caught.value.__cause__
    assert cause is None or isinstance(cause, ChangelakeError | PySparkException)
    assert snapshot(session) == before
    return message


# -- unknown names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM peeple",
        "SELECT * FROM people JOIN peeple ON true",
        "INSERT INTO peeple VALUES (1, 'x', NULL)",
        "INSERT INTO people SELECT * FROM peeple",
        "UPDATE peeple SET name = 'x'",
        "DELETE FROM peeple WHERE id = 1",
        "MERGE INTO peeple USING src ON peeple.id = src.id WHEN MATCHED THEN DELETE",
        "TRUNCATE TABLE peeple",
        "DROP TABLE peeple",
        "ALTER TABLE peeple ADD COLUMN x INT",
        "DESCRIBE TABLE peeple",
        "DESCRIBE HISTORY peeple",
        "SELECT * FROM peeple AT (VERSION => 1)",
        "CREATE VIEW v AS SELECT * FROM peeple",
    ],
)
def test_unknown_table_suggests_closest_name(wh, statement):
    fails(wh, statement, TableNotFoundError, "'peeple'", "Did you mean people?")


def test_a_view_where_a_table_is_read_says_so(wh):
    wh.sql("CREATE VIEW named AS SELECT id FROM people")
    for statement in ("DESCRIBE HISTORY named", "UPDATE named SET id = 1", "TRUNCATE TABLE named"):
        fails(wh, statement, TableNotFoundError, "named is a view, not a table")


def test_unknown_table_without_a_close_name(wh):
    message = fails(wh, "SELECT * FROM zzz", TableNotFoundError, "'zzz' does not exist")
    assert "Did you mean" not in message


@pytest.mark.parametrize(
    ("statement", "column", "suggestion"),
    [
        ("SELECT nmae FROM people", "nmae", "name"),
        ("SELECT p.nmae FROM people p", "p.nmae", "p.name"),
        ("SELECT * FROM people WHERE idd = 1", "idd", "id"),
        ("INSERT INTO people (id, nmae) VALUES (1, 'x')", "nmae", "name"),
        ("INSERT INTO people (id, nmae) SELECT 1, 'x'", "nmae", "name"),
        ("UPDATE people SET nmae = 'x'", "nmae", "name"),
        ("UPDATE people SET name = 'x' WHERE nmae = 'y'", "nmae", "name"),
        ("DELETE FROM people WHERE idd = 1", "idd", "id"),
        (
            "MERGE INTO people USING src ON people.id = src.id"
            " WHEN MATCHED THEN UPDATE SET nmae = src.name",
            "nmae",
            "name",
        ),
        ("ALTER TABLE people RENAME COLUMN nmae TO x", "nmae", "name"),
    ],
)
def test_unknown_column_suggests_closest_name(wh, statement, column, suggestion):
    fails(wh, statement, ColumnNotFoundError, column, f"Did you mean {suggestion}?")


def test_unknown_column_in_append(wh):
    import pandas as pd

    before = snapshot(wh)
    with pytest.raises(ColumnNotFoundError, match="Did you mean name"):
        wh.append("people", pd.DataFrame({"id": [5], "nmae": ["x"]}))
    assert snapshot(wh) == before


# -- type mismatches ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        # literal VALUES: checked by the driver before anything is written
        ("INSERT INTO people VALUES ('abc', 'x', NULL)", ["people.id", "INT", "'abc'"]),
        ("INSERT INTO people VALUES (3000000000, 'x', NULL)", ["people.id", "3000000000"]),
        ("INSERT INTO people VALUES (3, 'x', 'not a date')", ["people.born", "DATE"]),
        ("INSERT INTO people (id, born) VALUES (3, 'x'), (4, '2020-01-01')", ["people.born"]),
        # INSERT ... SELECT: by the Spark job, or by type before it starts
        ("INSERT INTO people SELECT 'abc', 'x', NULL", ["'abc'", "INT"]),
        ("INSERT INTO people SELECT id, name, 'soon' FROM src WHERE id = 3", ["'soon'", "DATE"]),
        ("INSERT INTO people SELECT 1, 'x', X'01'", ["born", "DATE", "BINARY"]),
        ("INSERT INTO people SELECT 1, 'x', 5", ["born", "DATE", "INT"]),
        ("INSERT INTO people SELECT 3000000000L, 'x', NULL", ["3000000000", "INT"]),
        ("UPDATE people SET born = 5", ["born", "DATE", "INT"]),
        ("UPDATE people SET id = 'abc' WHERE id = 1", ["'abc'", "INT"]),
        (
            "MERGE INTO people USING src ON people.id = src.id"
            " WHEN NOT MATCHED THEN INSERT VALUES (coalesce(src.id, 9), src.name, 'no date')",
            ["'no date'", "DATE"],
        ),
    ],
)
def test_type_mismatch(wh, statement, expected):
    fails(wh, statement, TypeMismatchError, *expected)


def test_type_mismatch_in_append(wh):
    import pyarrow as pa

    before = snapshot(wh)
    with pytest.raises(TypeMismatchError, match="born"):
        wh.append("people", pa.table({"id": [5], "born": [b"\x00"]}))
    assert snapshot(wh) == before


# -- NOT NULL -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO people VALUES (NULL, 'x', NULL)",  # literal fast path
        "INSERT INTO people VALUES (5, 'x', NULL), (NULL, 'y', NULL)",
        "INSERT INTO people (name) VALUES ('x')",  # column left out
        "INSERT INTO people SELECT NULL, 'x', NULL",  # Spark path
        "INSERT INTO people SELECT id, name, NULL FROM src",  # a NULL among good rows
        "INSERT INTO people (name) SELECT 'x'",
        "UPDATE people SET id = NULL WHERE id = 1",
        "UPDATE people SET id = CASE WHEN id = 2 THEN NULL ELSE id END",
        "MERGE INTO people USING src ON people.id = src.id WHEN MATCHED THEN UPDATE SET id = NULL",
        "MERGE INTO people USING src ON people.id = src.id"
        " WHEN NOT MATCHED THEN INSERT (id, name) VALUES (src.id, src.name)",
        "MERGE INTO people USING src ON people.id = src.id"
        " WHEN NOT MATCHED THEN INSERT (name) VALUES (src.name)",
    ],
)
def test_not_null_violation(wh, statement):
    fails(wh, statement, NotNullViolationError, "NOT NULL", "people", "id")


# -- syntax ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statement", "line", "column"),
    [
        ("SELECT * FROM people WHERE", 1, 22),
        ("SELECT *\nFROM people\nWHERE id = = 1", 3, 12),
        ("INSERT INTO people VALUES (1, 'x'", 1, 31),
        ("SELECT 1,\n  'unclosed", 2, 3),
        ("SELECT (1 + FROM people", 1, 13),
        ("SELECT id,\n  name\nFROM people\nWHERE id IN (1,", 4, 15),
        ("UPDATE people\nSET name = \nWHERE id = 1", 3, 1),
    ],
)
def test_syntax_error_has_line_and_column(wh, statement, line, column):
    message = fails(
        wh, statement, SqlSyntaxError, "Syntax error", f"(line {line}, column {column})"
    )
    assert "sqlglot" not in message and "<class" not in message


def test_update_without_set(wh):
    fails(wh, "UPDATE people SET WHERE id = 1", SqlSyntaxError, "UPDATE people needs SET")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE people SET \"name\" = 'x'",
        'MERGE INTO people USING src ON people.id = src.id WHEN MATCHED THEN UPDATE SET "name" = src.name',
    ],
)
def test_a_double_quoted_name_set_is_named_as_a_string(wh, statement):
    """In Spark's SQL "name" is a string: setting it is refused before Spark sees a query."""
    fails(wh, statement, InvalidStatementError, "sets 'name', a string", "`name`")


def test_a_parse_error_spark_raises_keeps_its_message(spark):
    from pyspark.errors import ParseException

    from changelake.spark.errors import translate_analysis

    with pytest.raises(ParseException) as caught:
        spark.sql("SELECT CASE WHEN NOT x FROM")
    message = str(translate_analysis(caught.value))
    assert message.startswith("[PARSE_SYNTAX_ERROR] Syntax error at or near"), message


# -- time travel ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "clause",
    [
        "AT (VERSION => -1)",
        "BEFORE (VERSION => 0)",
        "AT (TIMESTAMP => '2000-01-01 00:00:00')",
        "AT (OFFSET => -86400)",
    ],
)
def test_time_travel_before_creation(wh, clause):
    fails(
        wh, f"SELECT * FROM people {clause}", TimeTravelError, "people", "did not exist", "created"
    )


def test_time_travel_to_a_version_that_does_not_exist(wh):
    fails(wh, "SELECT * FROM people AT (VERSION => 7)", TimeTravelError, "no version 7", "latest")


def test_time_travel_beyond_retention(wh, clock):
    clock.advance(seconds=3600)
    wh.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")  # version 2, an hour after 1
    clock.advance(days=2)  # retention is 1 day by default
    wh.sql("DELETE FROM people WHERE id = 2")  # version 3
    for clause in (
        "AT (VERSION => 1)",
        "BEFORE (VERSION => 2)",
        "AT (OFFSET => -86400 * 2 - 1800)",
    ):
        fails(
            wh,
            f"SELECT * FROM people {clause}",
            TimeTravelError,
            "beyond its retention period",
            "DATA_RETENTION_TIME_IN_DAYS = 1",
        )
    # version 2 was current until a moment ago: still readable
    assert rows(wh.sql("SELECT name FROM people AT (VERSION => 2)")) == [("Donny",), ("Jeffrey",)]


def test_longer_retention_keeps_history_readable(wh, clock):
    wh.sql("ALTER TABLE people SET DATA_RETENTION_TIME_IN_DAYS = 7")
    wh.sql("UPDATE people SET name = 'Jeffrey' WHERE id = 1")
    clock.advance(days=3)
    wh.sql("DELETE FROM people WHERE id = 2")
    assert rows(wh.sql("SELECT name FROM people AT (VERSION => 1)")) == [("Donny",), ("Jeff",)]
    clock.advance(days=5)
    fails(wh, "SELECT * FROM people AT (VERSION => 1)", TimeTravelError, "= 7")


# -- dependencies ---------------------------------------------------------------------------------


def test_drop_table_a_view_depends_on(wh):
    wh.sql("CREATE VIEW named AS SELECT name FROM people")
    wh.sql("CREATE VIEW shouted AS SELECT upper(name) AS n FROM named")
    fails(wh, "DROP TABLE people", DependencyError, "people", "named", "Drop or replace")
    fails(wh, "DROP VIEW named", DependencyError, "named", "shouted")
    fails(wh, "CREATE OR REPLACE TABLE people (x INT)", DependencyError, "named")
    fails(wh, "ALTER TABLE people RENAME TO persons", DependencyError, "named")
    assert rows(wh.sql("SELECT * FROM shouted")) == [("DONNY",), ("JEFF",)]
    wh.sql("DROP VIEW shouted")
    wh.sql("DROP VIEW named")
    wh.sql("DROP TABLE people")
    assert wh.catalog.find_table("people") is None


# -- concurrent writers ---------------------------------------------------------------------------


def test_conflicting_writer_gets_a_conflict_error(wh, spark):
    other = changelake.connect(wh.warehouse.root, spark=spark)
    try:
        wh.sql("BEGIN")
        wh.sql("UPDATE people SET name = 'mine' WHERE id = 1")  # read version 1
        other.sql("DELETE FROM people WHERE id = 1")  # commits version 2 first
        before = snapshot(other)
        with pytest.raises(ConflictError) as caught:
            wh.sql("COMMIT")
        message = str(caught.value)
        assert "people" in message and "version 2" in message
        assert not any(marker in message for marker in JAVA_MARKERS)
        assert snapshot(other) == before
        assert wh.transaction is None  # the failed transaction is over
        assert rows(wh.sql("SELECT id, name FROM people")) == [(2, "Donny")]
    finally:
        other.close()


def test_decimal_overflow_is_a_type_mismatch(wh):
    wh.sql("CREATE TABLE money (amount DECIMAL(4,1))")
    fails(wh, "INSERT INTO money VALUES (12345.6)", TypeMismatchError, "money.amount", "12345.6")
    fails(wh, "INSERT INTO money SELECT 12345.6", TypeMismatchError, "12345.6", "Decimal(4, 1)")

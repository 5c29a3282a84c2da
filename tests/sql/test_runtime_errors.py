"""A user's expression that fails inside a Spark job is a clear changelake error.

Division by zero, overflow, a bad cast or a NULL into a NOT NULL column only show up once Spark
runs the job. Every case checks the error class, that the message names the statement, the
expression and a fix, that no Java text or internal name leaks into it, that the Spark error is
kept as the cause, and that the table is exactly as before: same version, same rows.
"""

from __future__ import annotations

import pytest
from conftest import rows
from pyspark.errors import PySparkException

from changelake.errors import (
    ChangelakeError,
    DuplicateTargetRowError,
    ExpressionError,
    InvalidStatementError,
    NotNullViolationError,
    TypeMismatchError,
)

LEAKS = ("Traceback", "org.apache", "java.", "py4j", "SQLSTATE", "_cl_", "__cl_ref", "\n")
DIVISION_FIX = "try_divide"
OVERFLOW_FIX = "BIGINT or DECIMAL(38, s)"
NOT_NULL_FIX = "make the column nullable"
CAST_FIX = "try_cast"
MERGE = "MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN UPDATE SET "


@pytest.fixture
def wh(session):
    session.sql("CREATE TABLE t (id INT NOT NULL, v INT NOT NULL, s STRING)")
    session.sql("INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b')")
    session.sql("CREATE TABLE src (id INT, v INT)")
    session.sql("INSERT INTO src VALUES (1, 5), (3, 7)")
    return session


def fails(session, statement: str, error: type[ChangelakeError], *expected: str) -> str:
    """Run ``statement``; check it raises ``error`` whose message holds ``expected`` and nothing
    internal, chained from the Spark error, and that ``t`` is unchanged. Returns the message."""
    version = session.catalog.table("t").current_version
    before = rows(session.table("t"))
    with pytest.raises(error) as caught:
        session.sql(statement).collect()
    message = str(caught.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    for leak in LEAKS:
        assert leak not in message, f"{leak!r} leaked into {message!r}"
    assert "nothing was changed" in message
    assert isinstance(caught.value.__cause__, PySparkException)
    assert session.catalog.table("t").current_version == version
    assert rows(session.table("t")) == before
    return message


# -- UPDATE ---------------------------------------------------------------------------------------


def test_division_by_zero_in_update(wh):
    message = fails(
        wh,
        "UPDATE t SET v = 1/0 WHERE id = 1",
        ExpressionError,
        "UPDATE t:",
        "division by zero",
        '"1 / 0"',
        DIVISION_FIX,
        "NULLIF",
    )
    assert message.startswith("UPDATE t: division by zero")


@pytest.mark.parametrize(
    ("assignment", "fragment", "try_function"),
    [
        ("v = v * 2147483647", "v * 2147483647", "try_multiply"),
        ("v = 2147483647 + v", "2147483647 + v", "try_add"),
    ],
)
def test_overflow_in_update(wh, assignment, fragment, try_function):
    fails(
        wh,
        f"UPDATE t SET {assignment}",
        ExpressionError,
        "UPDATE t:",
        "arithmetic overflow",
        f'"{fragment}"',
        OVERFLOW_FIX,
        try_function,
    )


@pytest.mark.parametrize("assignment", ["v = NULL", "v = CASE WHEN id = 1 THEN NULL ELSE v END"])
def test_null_into_not_null_column_in_update(wh, assignment):
    fails(
        wh,
        f"UPDATE t SET {assignment}",
        NotNullViolationError,
        "UPDATE t:",
        "NOT NULL column t.v",
        NOT_NULL_FIX,
    )


def test_bad_cast_in_update(wh):
    fails(
        wh,
        "UPDATE t SET v = CAST('abc' AS INT)",
        TypeMismatchError,
        "UPDATE t:",
        "value 'abc' cannot be converted to INT",
        "\"CAST('abc' AS INT)\"",
        CAST_FIX,
    )


def test_failure_in_delete_condition(wh):
    fails(
        wh, "DELETE FROM t WHERE v / 0 > 1", ExpressionError, "DELETE FROM t:", '"v / 0"', "NULLIF"
    )


# -- MERGE ... WHEN MATCHED THEN UPDATE SET -------------------------------------------------------


def test_division_by_zero_in_merge(wh):
    fails(
        wh,
        MERGE + "v = src.v / 0",
        ExpressionError,
        "MERGE INTO t:",
        "division by zero",
        '"src.v / 0"',
        DIVISION_FIX,
    )


def test_overflow_in_merge(wh):
    fails(
        wh,
        MERGE + "v = t.v * 2147483647",
        ExpressionError,
        "MERGE INTO t:",
        "arithmetic overflow",
        '"t.v * 2147483647"',
        OVERFLOW_FIX,
    )


@pytest.mark.parametrize(
    "assignment", ["v = NULL", "v = CASE WHEN t.id = 1 THEN NULL ELSE t.v END"]
)
def test_null_into_not_null_column_in_merge(wh, assignment):
    fails(
        wh,
        MERGE + assignment,
        NotNullViolationError,
        "MERGE INTO t:",
        "NOT NULL column t.v",
        NOT_NULL_FIX,
    )


# -- INSERT ... SELECT and CREATE TABLE ... AS SELECT ---------------------------------------------


def test_division_by_zero_in_insert_select(wh):
    fails(
        wh,
        "INSERT INTO t SELECT id, 1/0, 'x' FROM src",
        ExpressionError,
        "INSERT INTO t:",
        '"1 / 0"',
        DIVISION_FIX,
    )


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("UPDATE t SET v = 1 WHERE id IN (SELECT id DIV (v - v) FROM src)", "UPDATE t"),
        ("DELETE FROM t WHERE id IN (SELECT id DIV (v - v) FROM src)", "DELETE FROM t"),
        (MERGE.replace("USING src", "USING (SELECT id DIV (v - v) AS id FROM src) src") + "v = 1",
         "MERGE INTO t"),
    ],
    ids=["update", "delete", "merge"],
)  # fmt: skip
def test_division_by_zero_while_building_a_broadcast(wh, statement, named):
    # Without adaptive execution, a job that builds a broadcast runs in another thread and its
    # error reaches the statement inside a Java ExecutionException, which PySpark leaves as is.
    adaptive = wh.spark.conf.get("spark.sql.adaptive.enabled")
    wh.spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        fails(wh, statement, ExpressionError, f"{named}: division by zero", DIVISION_FIX)
    finally:
        wh.spark.conf.set("spark.sql.adaptive.enabled", adaptive)


def test_division_by_zero_in_create_table_as_select(wh):
    with pytest.raises(ExpressionError) as caught:
        wh.sql("CREATE TABLE c AS SELECT id, v / 0 AS w FROM t")
    message = str(caught.value)
    assert message.startswith("CREATE TABLE c: division by zero"), message
    assert DIVISION_FIX in message and "nothing was changed" in message
    assert not any(leak in message for leak in LEAKS), message
    assert wh.catalog.find_table("c") is None


# -- not a Spark error, but a runtime one: a target row matched twice ------------------------------


def test_merge_matching_a_target_row_twice(wh):
    wh.sql("INSERT INTO src VALUES (1, 6)")
    version = wh.catalog.table("t").current_version
    with pytest.raises(DuplicateTargetRowError) as caught:
        wh.sql(MERGE + "v = src.v")
    assert isinstance(caught.value, InvalidStatementError)
    assert "MERGE on t" in str(caught.value) and "deduplicate the source" in str(caught.value)
    assert wh.catalog.table("t").current_version == version


# -- other Spark errors are not ours to rename ----------------------------------------------------


def test_other_spark_errors_are_left_alone(spark):
    from changelake.spark.errors import spark_errors

    with pytest.raises(PySparkException), spark_errors("SELECT"):
        spark.sql("SELECT raise_error('boom')").collect()

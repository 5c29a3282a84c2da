"""A row-level write's condition evaluated inside changelake's reader (``ReaderCondition.java``):
an UPDATE or DELETE that reads its target in one pass reads the condition's columns first and
decodes the other columns only at the rows the condition keeps (``Late.restrict``). Oracles: a
plain-Python model of the table, and the same statement with the reader's condition off (a
non-deterministic condition is never pushed); the errors of a condition are the user's, as
without it."""

from __future__ import annotations

import pytest
from conftest import spark_settings
from tests.sql.test_runtime_errors import DIVISION_FIX, fails

from changelake.errors import ExpressionError
from changelake.runtime.env import ROW_LEVEL_PLAN
from changelake.spark.private import jvm_class

ONE_PASS = {ROW_LEVEL_PLAN: "one-pass"}


def _restricted(spark) -> int:
    return jvm_class(spark, "io.changelake.spark.Late").restrictedFiles()


def _rows(s) -> dict[int, tuple]:
    return {r[0]: tuple(r) for r in s.sql("SELECT id, a, b FROM t").collect()}


@pytest.fixture
def three_files(session):
    s = session
    s.sql(
        "CREATE TABLE t AS SELECT id, CAST(id % 97 AS INT) AS a, concat('r', CAST(id AS STRING))"
        " AS b FROM range(0, 30000, 1, 3)"
    )
    assert len(s.catalog.snapshot_files(s.catalog.table("t").table_id, 0)) == 3
    return s


def test_an_update_decodes_only_the_rows_its_condition_keeps(three_files):
    s = three_files
    model = {i: (i, i % 97, f"r{i}") for i in range(30000)}
    with spark_settings(s.spark, ONE_PASS):
        before = _restricted(s.spark)
        # matches in two of the three files (ids 0..9999, 10000..19999, 20000..29999)
        s.sql("UPDATE t SET b = 'x' WHERE id % 1000 = 7 AND id < 20000")
        assert _restricted(s.spark) - before == 2  # the third file: its condition column only
        for i in range(7, 20000, 1000):
            model[i] = (i, i % 97, "x")
        assert _rows(s) == model
        # rows deleted before are not matched again; the condition on two columns
        s.sql("DELETE FROM t WHERE a = 5 AND id < 15000")
        for i in [i for i in model if i % 97 == 5 and i < 15000]:
            del model[i]
        s.sql("UPDATE t SET a = a + 1000 WHERE a = 5 OR b = 'x'")
        for i, (_, a, b) in list(model.items()):
            if a == 5 or b == "x":
                model[i] = (i, a + 1000, b)
        assert _rows(s) == model
        before = _restricted(s.spark)
        s.sql("UPDATE t SET a = 0 WHERE id = -1")  # nothing matches: no data column decoded
        assert _restricted(s.spark) == before
        assert _rows(s) == model


def test_a_non_deterministic_condition_is_evaluated_by_the_plan_only(three_files):
    s = three_files
    with spark_settings(s.spark, ONE_PASS):
        before = _restricted(s.spark)
        # (a deterministic prefix, `id < 5 AND ...`, Spark filters first itself)
        s.sql("UPDATE t SET b = 'y' WHERE length(uuid()) = 36 AND id < 5")
        assert _restricted(s.spark) == before
    assert {i for i, r in _rows(s).items() if r[2] == "y"} == set(range(5))


def test_an_update_from_a_source_keeps_its_target_filter_in_the_reader(three_files):
    s = three_files
    s.sql("CREATE TABLE src (k BIGINT, w STRING)")
    s.sql("INSERT INTO src VALUES (3, 'p'), (25003, 'q'), (29999, 'r')")
    with spark_settings(s.spark, ONE_PASS):
        s.sql("UPDATE t SET b = src.w FROM src WHERE t.id = src.k AND t.id > 20000")
    changed = {i: r[2] for i, r in _rows(s).items() if r[2] in ("p", "q", "r")}
    assert changed == {25003: "q", 29999: "r"}


def test_a_condition_that_fails_in_the_reader_is_the_user_s_error(session):
    s = session
    s.sql("CREATE TABLE t (id INT NOT NULL, v INT NOT NULL, s STRING)")
    s.sql("INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b')")
    with spark_settings(s.spark, ONE_PASS):
        message = fails(
            s, "UPDATE t SET v = 1 WHERE 10 / (v - v) > 1", ExpressionError, "division by zero"
        )
    assert DIVISION_FIX in message


def test_a_condition_on_a_column_older_files_lack_and_through_spark_s_row_reader(session):
    s = session
    s.sql("CREATE TABLE t (id BIGINT, x INT)")
    s.sql("INSERT INTO t SELECT id, CAST(id % 5 AS INT) FROM range(0, 50)")
    s.sql("ALTER TABLE t ADD COLUMN w INT")
    s.sql("INSERT INTO t SELECT id, 9, CAST(id AS INT) FROM range(50, 60)")
    rows_reader = {"spark.sql.parquet.enableVectorizedReader": "false"}
    with spark_settings(s.spark, ONE_PASS):
        before = _restricted(s.spark)
        s.sql("UPDATE t SET w = -1 WHERE w < 55")  # NULL in the older file: no match there
        assert _restricted(s.spark) == before + 1
        with spark_settings(s.spark, rows_reader):  # rows, not batches, in both passes
            s.sql("DELETE FROM t WHERE x = 3")
    got = {r[0]: r[1] for r in s.sql("SELECT id, w FROM t").collect()}
    expected = {i: None for i in range(50) if i % 5 != 3}
    expected.update({i: -1 if i < 55 else i for i in range(50, 60)})
    assert got == expected

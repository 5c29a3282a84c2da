"""``SELECT COUNT(*) FROM t`` is answered from the catalog (plan/counted.py): the same number a
scan counts, with no Spark job, for every state a table can be read at."""

from __future__ import annotations

import pytest
from conftest import spark_jobs

# The same count, forced through a scan: a filter that holds for every row is not a bare count.
SCANNED = "SELECT count(*) FROM {} WHERE k = k OR k IS NULL"


def _both(session, name: str, at: str = "") -> tuple[int, int]:
    with spark_jobs(session.spark) as jobs:
        df = session.sql(f"SELECT COUNT(*) FROM {name}{at}")
        counted = df.collect()
        assert jobs() == 0, "a bare COUNT(*) of a table runs no Spark job"
    assert df.columns == ["count(1)"]
    scanned = session.sql(SCANNED.format(name + at)).collect()[0][0]
    return counted[0][0], scanned


def test_a_bare_count_is_the_scanned_count_at_every_state(session):
    s = session
    s.sql("CREATE TABLE t (k BIGINT, v STRING)")
    assert _both(s, "t") == (0, 0)
    s.sql("INSERT INTO t SELECT id, CAST(id AS STRING) FROM range(100)")
    s.sql("INSERT INTO t VALUES (NULL, 'null key')")
    v_inserted = s.catalog.table("t").current_version
    s.sql("DELETE FROM t WHERE k % 7 = 0")
    s.sql("UPDATE t SET v = 'x' WHERE k % 5 = 0")
    s.sql("DELETE FROM t WHERE k > 90")
    assert _both(s, "t") == (79, 79)
    assert _both(s, "t", f" AT (VERSION => {v_inserted})") == (101, 101)
    s.sql("BEGIN")
    s.sql("DELETE FROM t WHERE k < 10")
    s.sql("INSERT INTO t VALUES (1000, 'staged')")
    assert _both(s, "t") == (72, 72), "the transaction's own staged writes count"
    s.sql("ROLLBACK")
    assert _both(s, "t") == (79, 79)


@pytest.mark.parametrize(
    ("query", "column"),
    [("SELECT count(1) FROM t", "count(1)"), ("SELECT COUNT(*) AS n FROM t AS x", "n")],
)
def test_count_spellings_keep_their_column_names(session, query, column):
    session.sql("CREATE TABLE t (k BIGINT)")
    session.sql("INSERT INTO t SELECT id FROM range(5)")
    df = session.sql(query)
    assert df.columns == [column]
    assert df.collect()[0][0] == 5
    assert dict(df.dtypes)[column] == "bigint"


def test_anything_more_than_a_bare_count_is_planned_as_a_query(session):
    s = session
    s.sql("CREATE TABLE t (k BIGINT)")
    s.sql("INSERT INTO t SELECT id FROM range(10)")
    s.sql("DELETE FROM t WHERE k < 3")
    assert s.sql("SELECT count(k) FROM t").collect()[0][0] == 7
    assert s.sql("SELECT count(*) FROM t WHERE k > 5").collect()[0][0] == 4
    assert s.sql("SELECT count(*) FROM t GROUP BY k % 2").count() == 2
    assert s.sql("SELECT count(*), 1 FROM t").collect()[0][0] == 7
    assert s.sql("SELECT count(DISTINCT k % 2) FROM t").collect()[0][0] == 2
    assert (
        s.sql(
            "SELECT count(*) FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"
        ).collect()[0][0]
        == 3
    )

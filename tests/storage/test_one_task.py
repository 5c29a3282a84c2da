"""Small plans run as one stage (storage/jvm/OneTask.java): every shuffle to the one partition
of a small plan becomes a coalesce of its input, so the plan has no exchange and runs as one
job of one stage, with the rows Spark's own plan (the rule off) gives."""

from __future__ import annotations

import pytest
from conftest import rows, spark_jobs, spark_settings

from changelake.spark.private import physical_plan_lines

OFF = {"spark.changelake.oneTask": "false"}

QUERIES = {
    "join, group": "SELECT a.k, COUNT(*) AS n, SUM(b.y) AS s FROM a JOIN b ON a.k = b.k"
    " GROUP BY a.k",
    "full outer join": "SELECT COALESCE(a.k, b.k) AS k, a.x, b.y FROM a FULL OUTER JOIN b"
    " ON a.k = b.k",
    "window": "SELECT k, x, RANK() OVER (PARTITION BY k % 3 ORDER BY x, k) AS r FROM a",
    "union, distinct, order": "SELECT DISTINCT k FROM (SELECT k FROM a UNION ALL"
    " SELECT k FROM b) ORDER BY k DESC",
    "global aggregate": "SELECT COUNT(*) AS n, SUM(x) AS s, MAX(k) AS m FROM a",
    "semi, anti": "SELECT k FROM a WHERE k IN (SELECT k FROM b WHERE y > 2)"
    " AND NOT EXISTS (SELECT 1 FROM b WHERE b.k + 1 = a.k)",
}


@pytest.fixture
def tables(session):
    for name, column, step in (("a", "x", 1), ("b", "y", 3)):
        session.sql(
            f"CREATE TABLE {name} AS SELECT CAST(id % 40 AS INT) AS k, CAST(id % 7 AS INT)"
            f" AS {column} FROM range(0, 300, {step}, 4)"
        )
        session.sql(f"INSERT INTO {name} SELECT 41, 1 FROM range(0, 5, 1, 2)")  # another file
        session.sql(f"DELETE FROM {name} WHERE {column} = 3")  # a deletion vector
    return session


@pytest.mark.parametrize("query", QUERIES.values(), ids=QUERIES.keys())
def test_a_small_plan_runs_as_one_stage_with_spark_plans_rows(spark, tables, query):
    df = tables.sql(query)
    plan = "\n".join(physical_plan_lines(df))
    assert "Exchange" not in plan
    assert "Coalesce 1" in plan
    with spark_jobs(spark) as jobs:
        found = rows(df)
        assert jobs() == 1
    with spark_settings(spark, OFF):
        spark_plan = tables.sql(query)
        assert "Exchange" in "\n".join(physical_plan_lines(spark_plan))
        expected = rows(spark_plan)
    assert found == expected
    if query.endswith("ORDER BY k DESC"):  # the order itself, not only the rows
        assert [r.k for r in df.collect()] == sorted({r.k for r in df.collect()}, reverse=True)


def test_a_large_plan_keeps_its_exchanges(spark, tables):
    with spark_settings(spark, {"spark.changelake.smallInputBytes": "0"}):
        df = tables.sql(QUERIES["join, group"])
        assert "Exchange" in "\n".join(physical_plan_lines(df))
        assert rows(df) == rows(tables.sql(QUERIES["join, group"]))

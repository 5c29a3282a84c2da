"""Bound plans (storage/jvm/Bound.java): a plan made again with other files and other per-round
values (a refresh every round) is bound into the analysed plan kept for its shape, not analysed;
it must give what a plan analysed anew gives."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import spark_settings

from changelake.spark.private import jvm_class
from changelake.spark.relation import Relation

BOUND = "io.changelake.spark.Bound"
OFF = {"spark.changelake.boundPlans": "false"}


def _hits(session) -> int:
    return jvm_class(session.spark, BOUND).hits()


def _rows(session, sql: str) -> Counter:
    return Counter(tuple(r) for r in session.sql(sql).collect())


@pytest.mark.parametrize(
    "query",
    [
        "SELECT g, SUM(v) AS total, COUNT(*) AS n, MAX(v) AS hi FROM fact GROUP BY g",
        "SELECT f.id, f.v, d.name FROM fact f JOIN dim d ON f.g = d.g WHERE d.name <> 'n3'",
    ],
)
def test_refreshes_bound_into_a_kept_plan_give_what_an_analysed_plan_gives(session, query):
    session.sql("CREATE TABLE fact (id BIGINT, g INT, v INT)")
    session.sql("CREATE TABLE dim (g INT, name STRING)")
    session.sql("INSERT INTO dim SELECT id, CONCAT('n', id) FROM range(0, 10)")
    session.sql(
        "INSERT INTO fact SELECT id, CAST(id % 10 AS INT), CAST(id % 7 AS INT) FROM range(0, 200)"
    )
    for name in ("bound", "analysed"):
        session.sql(f"CREATE DYNAMIC TABLE {name} TARGET_LAG = '1 hour' AS {query}")
    hits = _hits(session)
    for step in range(4):
        session.sql(f"UPDATE fact SET v = v + 3 WHERE id % 9 = {step}")
        session.sql(f"DELETE FROM fact WHERE id % 23 = {step}")
        session.sql(f"INSERT INTO fact VALUES ({1000 + step}, {step}, 50)")
        session.sql("ALTER DYNAMIC TABLE bound REFRESH")
        with spark_settings(session.spark, OFF):
            session.sql("ALTER DYNAMIC TABLE analysed REFRESH")
        truth = _rows(session, query)
        assert _rows(session, "SELECT * FROM bound") == truth
        assert _rows(session, "SELECT * FROM analysed") == truth
    assert _hits(session) > hits  # the later rounds' deltas were bound, not analysed


def test_a_bound_statement_takes_its_own_values(session):
    """Statements of one shape that differ in a parameter's value (a string compared by =, an
    integer cast to BIGINT) each get their own rows."""
    session.sql("CREATE TABLE t (k STRING, n BIGINT)")
    session.sql("INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', 3)")
    hits = _hits(session)
    for key, n in (("a", 1), ("b", 2), ("c", 3), ("zz", 9)):
        got = session.sql(f"SELECT n + CAST({n} AS BIGINT) AS m FROM t WHERE k = '{key}'").collect()
        assert [r.m for r in got] == ([] if key == "zz" else [2 * n])
    # 'b' and 'c' bound into the plan of 'a' ('zz' reads no file: the statistics prune them all)
    assert _hits(session) >= hits + 2


def test_a_plan_with_a_temporary_function_is_analysed_every_time(session):
    """A temporary function may be replaced between statements: a plan calling one is not
    kept."""
    session.sql("CREATE TABLE t (k STRING, n BIGINT)")
    session.sql("INSERT INTO t VALUES ('a', 1)")
    for factor in (2, 3):
        session.spark.udf.register("scaled", lambda x, f=factor: x * f, "bigint")
        assert [
            r.m for r in session.sql("SELECT scaled(n) AS m FROM t WHERE k = 'a'").collect()
        ] == [factor]


def test_plans_that_differ_but_in_their_parameters_are_not_taken_for_one_another(session):
    """Rows the parser made into data (a VALUES of constants), and a wide plan's 30th column (a
    plan's text shows 25 fields by default), are part of a plan's shape."""
    spark = session.spark
    for n in (101, 150):
        values = Relation.of_sql(f"SELECT * FROM VALUES (CAST({n} AS BIGINT)) AS _c(c)", ["c"])
        assert values.frame(spark).collect()[0].c == n
    session.sql("CREATE TABLE w (a INT)")
    session.sql("INSERT INTO w VALUES (1)")
    for k in (1, 2):
        columns = ", ".join(f"a + {i if i < 29 else k * 100} AS c{i}" for i in range(30))
        assert session.sql(f"SELECT {columns} FROM w").collect()[0].c29 == 1 + k * 100

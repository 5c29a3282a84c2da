"""Optimized plans kept per shape (spark/jvm/Bound.java, ``Bound.optimized``) and the one-pass
apply of a delta (spark/jvm/OnePass.java): a refresh of a small dynamic table runs one job and
gives what its query gives; one whose delta has a shape seen before runs with the optimized plan
kept for it; a shape whose optimization used a parameter's value is optimized every time."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import spark_jobs

from changelake.spark.private import jvm_class, jvm_frame

BOUND = "io.changelake.spark.Bound"
FRAMES = "io.changelake.spark.Frames"


def _optimized_hits(session) -> int:
    return jvm_class(session.spark, BOUND).optimizedHits()


def _rows(session, sql: str) -> Counter:
    return Counter(tuple(r) for r in session.sql(sql).collect())


def _kept_count(session, sql: str) -> int:
    """The rows of ``sql`` run as the one-pass apply runs a plan (``Frames.execution``)."""
    df = session.sql(sql)
    execution = jvm_class(session.spark, FRAMES).execution(jvm_frame(df))
    return len(execution.executedPlan().executeCollect())


@pytest.mark.parametrize(
    "query",
    [
        "SELECT f.id, f.v, d.name FROM fact f JOIN dim d ON f.g = d.g WHERE f.v > 2",
        "SELECT g, SUM(v) AS total, COUNT(*) AS n FROM fact GROUP BY g",
    ],
)
def test_refreshes_apply_updates_deletes_and_inserts_in_one_job(session, query):
    _tables(session)
    session.sql(f"CREATE DYNAMIC TABLE dt TARGET_LAG = '1 hour' AS {query}")
    jobs = []
    for step in range(4):
        session.sql(f"UPDATE fact SET v = v + 3 WHERE id % 11 = {step}")
        session.sql(f"DELETE FROM fact WHERE id % 29 = {step}")
        session.sql(f"INSERT INTO fact VALUES ({1000 + step}, {step}, 50)")
        with spark_jobs(session.spark) as count:
            session.sql("ALTER DYNAMIC TABLE dt REFRESH")
            jobs.append(count())
        assert _rows(session, "SELECT * FROM dt") == _rows(session, query)
        last = session.catalog.refresh_history(session.catalog.table("dt").table_id, limit=1)
        assert last[0].record.action == "INCREMENTAL"
    # the new rows and the DV written by one job: no count before it, no second for the DV
    assert jobs == [1] * 4


def test_refreshes_of_one_shape_run_with_its_kept_optimized_plan(session):
    """A join over tables that only gained rows: each refresh's delta has the same shape, so
    the later ones are bound into the optimized plan kept for it, and follow the query."""
    query = _join_dt(session)
    hits = _optimized_hits(session)
    for step in range(6):
        session.sql(f"INSERT INTO dim VALUES ({20 + step}, 'new{step}')")
        session.sql(f"INSERT INTO fact VALUES ({1000 + step}, {20 + step}, {step})")
        with spark_jobs(session.spark) as count:
            session.sql("ALTER DYNAMIC TABLE dt REFRESH")
            assert count() == 1
        assert _rows(session, "SELECT * FROM dt") == _rows(session, query)
    assert _optimized_hits(session) >= hits + 4  # the later rounds were not optimized again


def test_refreshes_after_an_update_each_round_run_with_the_kept_optimized_plan(session):
    """A refresh after a one-row UPDATE pairs the update by its DV's before-images, whose
    lookup names the DV and data files and the tag: as parameters of the shape, so the later
    rounds are bound into the kept optimized plan (each with its own files and tag) and follow
    the query."""
    query = _join_dt(session)
    hits = _optimized_hits(session)
    for step in range(6):
        session.sql(f"UPDATE fact SET v = v + 5 WHERE id = {step * 7}")
        session.sql("ALTER DYNAMIC TABLE dt REFRESH")
        assert _rows(session, "SELECT * FROM dt") == _rows(session, query)
        changes = session.sql(
            f"SELECT id, v, METADATA$ACTION, METADATA$ISUPDATE FROM dt CHANGES (INFORMATION =>"
            f" DEFAULT) AT (VERSION => {session.catalog.table('dt').current_version - 1})"
        ).collect()
        assert {(r[0], r[2]) for r in changes} <= {(step * 7, "INSERT"), (step * 7, "DELETE")}
    assert _optimized_hits(session) >= hits + 4


def _join_dt(session) -> str:
    """The tables and a dynamic table ``dt`` joining them; returns its query."""
    _tables(session)
    query = "SELECT f.id, f.v, d.name FROM fact f JOIN dim d ON f.g = d.g WHERE f.v > 2"
    session.sql(f"CREATE DYNAMIC TABLE dt TARGET_LAG = '1 hour' AS {query}")
    return query


def _tables(session) -> None:
    session.sql("CREATE TABLE fact (id BIGINT, g INT, v INT)")
    session.sql("CREATE TABLE dim (g INT, name STRING)")
    session.sql("INSERT INTO dim SELECT id, CONCAT('n', id) FROM range(0, 10)")
    session.sql(
        "INSERT INTO fact SELECT id, CAST(id % 10 AS INT), CAST(id % 7 AS INT) FROM range(0, 300)"
    )


def test_a_parameter_the_optimizer_folds_is_not_kept(session):
    """A string compared by = is a parameter; compared with a constant the optimizer folds it,
    so the optimized plan of its shape holds for none of the other values: it is not kept."""
    hits = _optimized_hits(session)
    for value in ("x", "y", "x", "z", "x"):
        sql = f"SELECT k FROM (SELECT 'x' AS k) AS s WHERE k = '{value}'"
        assert _kept_count(session, sql) == (1 if value == "x" else 0)
    assert _optimized_hits(session) == hits


def test_a_kept_optimized_plan_takes_each_statement_s_values(session):
    """An integer cast to BIGINT (folded into a BIGINT literal by the optimizer) and a string
    compared with a column: the kept optimized plan gets each statement's values."""
    session.sql("CREATE TABLE t (k STRING, n BIGINT)")
    session.sql("INSERT INTO t SELECT CONCAT('k', id % 5), id FROM range(0, 100)")
    hits = _optimized_hits(session)
    for key, floor in (("k1", 10), ("k2", 50), ("k1", 90), ("k9", 0), ("k3", 0)):
        sql = f"SELECT n FROM t WHERE k = '{key}' AND n > CAST({floor} AS BIGINT)"
        expected = sum(1 for n in range(100) if f"k{n % 5}" == key and n > floor)
        assert _kept_count(session, sql) == expected
    assert _optimized_hits(session) >= hits + 3

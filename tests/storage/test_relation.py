"""Relations: one SQL text over named leaves, analysed once by the JVM (``Relation.frame``), and
the same text through PySpark's own formatting where changelake's JVM piece is missing."""

from __future__ import annotations

import pytest

from changelake.errors import InvalidStatementError
from changelake.spark.relation import SMALL_INPUT, Relation, output_name


def test_output_names_are_read_from_the_expressions():
    assert output_name("x") == "x"
    assert output_name("_l.`a b`") == "a b"
    assert output_name("CAST(x AS BIGINT) AS y") == "y"
    assert output_name("f(x) as `METADATA$ROW_ID`") == "METADATA$ROW_ID"


def test_a_plan_over_dataframe_leaves_agrees_with_pysparks_formatting(spark):
    df = spark.range(6).selectExpr("id AS k", "id * 2 AS v")
    left = Relation.of_frame(df, ["k", "v"]).where("k > 1").select("k", "v + 1 AS w")
    right = Relation.of_frame(df, ["k", "v"])
    joined = left.join(right, "_l.k = _r.k", columns=["_l.k", "_l.w", "_r.v"])
    both = joined.union(joined.select("k", "w", "v * 10 AS v"))
    # a CTE definition holding a leaf: the JVM puts leaves inside CTEs too
    cte = Relation(
        f"WITH c AS ({both.sql}) SELECT k, sum(v) AS s FROM c GROUP BY k", ("k", "s"), both.leaves
    )
    planned = sorted(cte.frame(spark).collect())
    formatted = sorted(cte._formatted(spark, dict(cte.leaves)).collect())
    assert planned == formatted == [(k, 22 * k) for k in range(2, 6)]


def _explained(session, query: str) -> list[str]:
    return [r[0] for r in session.sql(f"EXPLAIN {query}").collect()]


def test_a_small_input_runs_without_adaptive_execution_and_explain_says_so(session):
    """A plan reading a few bytes runs in a copy of the session without AQE, broadcasts and
    generated code (fewer jobs); past ``spark.changelake.smallInputBytes`` the session's
    settings hold. Both give the same rows, and the user's session settings are untouched."""
    spark = session.spark
    session.sql("CREATE TABLE s (k INT, v INT)")
    session.sql("INSERT INTO s SELECT CAST(id AS INT), CAST(id % 3 AS INT) FROM range(50)")
    query = "SELECT v, count(*) AS n FROM s GROUP BY v"
    small = _explained(session, query)
    assert small[0].startswith("changelake: small input (")
    assert small[0].endswith(
        "adaptive execution off, one shuffle partition, no broadcasts, expressions interpreted"
    )
    assert not any("AdaptiveSparkPlan" in line for line in small)
    got = sorted(session.sql(query).collect())
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"

    spark.conf.set(SMALL_INPUT, "0")
    try:
        large = _explained(session, query)
        assert large[0].startswith("changelake: input of ")
        assert f"(over {SMALL_INPUT} = 0): the session's adaptive execution" in large[0]
        assert any("AdaptiveSparkPlan" in line for line in large)
        assert sorted(session.sql(query).collect()) == got == [(0, 17), (1, 17), (2, 16)]
    finally:
        spark.conf.unset(SMALL_INPUT)


def test_a_bad_small_input_setting_is_refused_and_changes_nothing(session):
    session.sql("CREATE TABLE s (k INT)")
    session.sql("INSERT INTO s VALUES (1), (2)")
    version = session.catalog.table("s").current_version
    session.spark.conf.set(SMALL_INPUT, "lots")
    try:
        with pytest.raises(InvalidStatementError) as e:
            session.sql("DELETE FROM s WHERE k = 1")
    finally:
        session.spark.conf.unset(SMALL_INPUT)
    assert str(e.value).startswith(f"{SMALL_INPUT} is 'lots'; set it to a number of bytes")
    assert session.catalog.table("s").current_version == version
    assert sorted(r.k for r in session.sql("SELECT k FROM s").collect()) == [1, 2]

"""Relations: one SQL text over named leaves, analysed once by the JVM (``Relation.frame``), and
the same text through PySpark's own formatting where changelake's JVM piece is missing."""

from __future__ import annotations

from changelake.storage.relation import Relation, output_name


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

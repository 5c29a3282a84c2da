"""APPEND_ONLY on views (issue 22, item 5; paper 2.2.1): only views whose added rows follow from
their tables' added rows alone. Every other operator is refused, by CHANGES (INFORMATION =>
APPEND_ONLY) and by CREATE STREAM ... APPEND_ONLY = TRUE, naming the operator (also inside a view
read by the view) and what to use instead; redefining a view under an APPEND_ONLY stream with such
an operator makes the stream stale, saying so. Monotonic views keep answering."""

from __future__ import annotations

import doctest

import pytest
from conftest import rows

import changelake.plan.monotonic
from changelake.errors import StaleStreamError, UnsupportedError

APPEND_ONLY = "CHANGES (INFORMATION => APPEND_ONLY) AT (OFFSET => -30)"

# view SQL over t(k, x) and u(k, y), and how the refusal names its operator
REFUSED = {
    "left_join": ("SELECT t.k, x, y FROM t LEFT JOIN u ON t.k = u.k", "LEFT OUTER JOIN ON"),
    "right_join": ("SELECT u.k, x, y FROM t RIGHT OUTER JOIN u ON t.k = u.k", "RIGHT OUTER JOIN"),
    "full_join": ("SELECT t.k, x, y FROM t FULL JOIN u ON t.k = u.k", "FULL OUTER JOIN"),
    "not_exists": (
        "SELECT k, x FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k)",
        "NOT EXISTS",
    ),
    "not_in": ("SELECT k, x FROM t WHERE x <> '' AND k NOT IN (SELECT k FROM u)", "NOT IN"),
    "anti_join": ("SELECT k, x FROM t LEFT ANTI JOIN u ON t.k = u.k", r"anti join \(t.k = u.k\)"),
    "group_by": ("SELECT k, count(*) AS n FROM t GROUP BY k", "GROUP BY"),
    "having": ("SELECT k FROM t GROUP BY k HAVING count(*) > 1", "GROUP BY"),
    "aggregate": ("SELECT count(*) AS n, max(x) AS m FROM t", "aggregate without GROUP BY"),
    "distinct": ("SELECT DISTINCT k FROM t", "DISTINCT"),
    "union": ("SELECT k FROM t UNION SELECT k FROM u", "UNION without ALL"),
    "window": ("SELECT k, rank() OVER (PARTITION BY x ORDER BY k) AS r FROM t", "window function"),
    "qualify": (
        "SELECT k, x FROM t QUALIFY row_number() OVER (PARTITION BY x ORDER BY k) = 1",
        "window function",
    ),
    # inside the subquery of a semi join, which is itself monotonic
    "in_grouped": (
        "SELECT k, x FROM t WHERE k IN (SELECT k FROM u GROUP BY k HAVING count(*) > 1)",
        "GROUP BY",
    ),
}
# no derivative at all yet: refused in every format, naming the operator
NO_DERIVATIVE = {
    "top_n": ("SELECT k, x FROM t ORDER BY k DESC LIMIT 2", r"ORDER BY … LIMIT \(top-N\)"),
    "limit": ("SELECT k, x FROM t LIMIT 2", "LIMIT"),
    "except": ("SELECT k FROM t EXCEPT SELECT k FROM u", "EXCEPT"),
    "minus": ("SELECT k FROM t MINUS SELECT k FROM u", "EXCEPT"),
    "intersect": ("SELECT k FROM t INTERSECT SELECT k FROM u", "INTERSECT"),
}


@pytest.fixture
def tables(session, clock):
    session.sql("CREATE TABLE t (k INT, x STRING)")
    session.sql("CREATE TABLE u (k INT, y STRING)")
    clock.advance(seconds=60)
    return session


def test_the_doctests_hold():
    assert doctest.testmod(changelake.plan.monotonic).failed == 0


@pytest.mark.parametrize("case", REFUSED)
def test_append_only_changes_refuse_the_operator_and_default_answers(tables, case):
    sql, operator = REFUSED[case]
    tables.sql(f"CREATE VIEW v AS {sql}")
    with pytest.raises(UnsupportedError, match=operator) as refused:
        tables.sql(f"SELECT * FROM v {APPEND_ONLY}")
    assert "Use INFORMATION => DEFAULT." in str(refused.value)
    tables.sql("SELECT * FROM v CHANGES (INFORMATION => DEFAULT) AT (OFFSET => -30)")


@pytest.mark.parametrize("case", REFUSED)
def test_append_only_streams_refuse_the_operator(tables, case):
    sql, operator = REFUSED[case]
    tables.sql(f"CREATE VIEW v AS {sql}")
    with pytest.raises(UnsupportedError, match=f"APPEND_ONLY = TRUE.*{operator}") as refused:
        tables.sql("CREATE STREAM s ON VIEW v APPEND_ONLY = TRUE")
    assert "Create the stream without APPEND_ONLY." in str(refused.value)
    assert tables.catalog.find_stream("s") is None
    tables.sql("CREATE STREAM s ON VIEW v")


@pytest.mark.parametrize("case", ["left_join", "not_in", "group_by", "union", "window"])
def test_the_operator_is_found_and_named_in_a_view_read_through_views(tables, case):
    sql, operator = REFUSED[case]
    tables.sql(f"CREATE VIEW inner_v AS {sql}")
    tables.sql("CREATE VIEW middle AS SELECT * FROM inner_v WHERE k > 0")
    tables.sql("CREATE VIEW outer_v AS SELECT m.k FROM middle AS m JOIN t ON m.k = t.k")
    named = rf"{operator}.*\(in view inner_v, which it reads\)"
    with pytest.raises(UnsupportedError, match=named):
        tables.sql(f"SELECT * FROM outer_v {APPEND_ONLY}")
    with pytest.raises(UnsupportedError, match=named):
        tables.sql("CREATE STREAM s ON VIEW outer_v APPEND_ONLY = TRUE")


@pytest.mark.parametrize("case", NO_DERIVATIVE)
def test_operators_without_a_derivative_are_refused_in_every_format(tables, case):
    sql, operator = NO_DERIVATIVE[case]
    tables.sql(f"CREATE VIEW inner_v AS {sql}")
    tables.sql("CREATE VIEW v AS SELECT k FROM inner_v")
    for information in ("APPEND_ONLY", "DEFAULT"):
        with pytest.raises(UnsupportedError, match=operator):
            tables.sql(f"SELECT * FROM v CHANGES (INFORMATION => {information}) AT (OFFSET => -30)")
    for options in ("APPEND_ONLY = TRUE", ""):
        with pytest.raises(UnsupportedError, match=operator):
            tables.sql(f"CREATE STREAM s ON VIEW v {options}")


def _history(session, clock) -> None:
    """t(k, x) and u(k, y) at the start; after it, rows added to both, and an update and a
    delete, which APPEND_ONLY ignores."""
    session.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (5, 'e')")
    session.sql("INSERT INTO u VALUES (1, 'p'), (5, 'v')")
    clock.advance(seconds=60)
    session.sql("INSERT INTO u VALUES (2, 'q'), (1, 'p2')")  # 1 already had a partner
    session.sql("INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    session.sql("INSERT INTO u VALUES (3, 'r')")
    session.sql("UPDATE t SET x = 'A' WHERE k = 1")
    session.sql("DELETE FROM u WHERE k = 5")


MONOTONIC = {
    "filter_project": (
        "SELECT k, upper(x) AS ux FROM t WHERE k > 1",
        [(3, "C"), (4, "D")],
    ),
    "inner_join": (
        "SELECT t.k, x, y FROM t JOIN u ON t.k = u.k",
        [(1, "a", "p2"), (2, "b", "q"), (3, "c", "r")],
    ),
    "cross_join": (
        "SELECT t.k, u.k AS uk FROM t CROSS JOIN u WHERE t.k = 4 AND u.k = 1",
        [(4, 1), (4, 1)],
    ),
    # (1, 'a') gained a second partner: it was in the view before, so it is not added again
    "exists": (
        "SELECT k, x FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k)",
        [(2, "b"), (3, "c")],
    ),
    "in": ("SELECT k, x FROM t WHERE k IN (SELECT k FROM u)", [(2, "b"), (3, "c")]),
    "semi_join": ("SELECT k, x FROM t LEFT SEMI JOIN u ON t.k = u.k", [(2, "b"), (3, "c")]),
    "union_all": (
        "SELECT k, x FROM t UNION ALL SELECT k, y FROM u",
        [(1, "p2"), (2, "q"), (3, "c"), (3, "r"), (4, "d")],
    ),
}


@pytest.mark.parametrize("case", MONOTONIC)
def test_monotonic_views_answer_append_only_with_the_rows_added(tables, clock, case):
    sql, expected = MONOTONIC[case]
    tables.sql(f"CREATE VIEW v AS {sql}")
    _history(tables, clock)
    got = tables.sql(f"SELECT * FROM v {APPEND_ONLY}")
    assert {r["METADATA$ACTION"] for r in got.collect()} <= {"INSERT"}
    assert rows(got.drop("METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID")) == expected


def test_an_append_only_stream_on_a_view_over_monotonic_views(tables, clock):
    tables.sql(f"CREATE VIEW semi AS {MONOTONIC['exists'][0]}")
    tables.sql("CREATE VIEW both_ AS SELECT s.k, s.x, y FROM semi AS s JOIN u ON s.k = u.k")
    tables.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (5, 'e')")
    tables.sql("INSERT INTO u VALUES (1, 'p'), (5, 'v')")
    tables.sql("CREATE STREAM s ON VIEW both_ APPEND_ONLY = TRUE")
    _history_after_start(tables)
    got = tables.sql("SELECT k, x, y, METADATA$ACTION FROM s")
    assert rows(got) == [
        (1, "a", "p2", "INSERT"),  # the semi join kept (1, 'a'); the join pairs it anew
        (2, "b", "q", "INSERT"),
        (3, "c", "r", "INSERT"),
    ]


def _history_after_start(session) -> None:
    session.sql("INSERT INTO u VALUES (2, 'q'), (1, 'p2')")
    session.sql("INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    session.sql("INSERT INTO u VALUES (3, 'r')")
    session.sql("UPDATE t SET x = 'A' WHERE k = 1")


def test_redefining_the_view_with_a_refused_operator_makes_the_stream_stale_naming_it(tables):
    tables.sql("CREATE VIEW inner_v AS SELECT t.k, x, y FROM t JOIN u ON t.k = u.k")
    tables.sql("CREATE VIEW v AS SELECT k, x FROM inner_v")
    tables.sql("CREATE STREAM ao ON VIEW v APPEND_ONLY = TRUE")
    tables.sql("CREATE STREAM full_ ON VIEW v")
    tables.sql("CREATE OR REPLACE VIEW inner_v AS SELECT t.k, x, y FROM t LEFT JOIN u ON t.k = u.k")
    named = (
        r"Stream ao is stale: view v \(or a view it reads\) was redefined.* now uses LEFT OUTER"
        r" JOIN ON t.k = u.k \(in view inner_v, which it reads\), which APPEND_ONLY cannot"
        r" follow: it can remove rows .* without APPEND_ONLY: CREATE OR REPLACE STREAM ao ON"
        r" VIEW v\.$"
    )
    with pytest.raises(StaleStreamError, match=named):
        tables.sql("SELECT * FROM ao")
    with pytest.raises(StaleStreamError, match=named):
        tables.stream_has_data("ao")
    with pytest.raises(StaleStreamError, match=named):
        tables.sql("SELECT * FROM v CHANGES (INFORMATION => DEFAULT) AT (STREAM => 'ao')")
    # a stream without APPEND_ONLY is stale as after any redefinition, without that reason
    with pytest.raises(StaleStreamError, match="was redefined") as stale:
        tables.sql("SELECT * FROM full_")
    assert "APPEND_ONLY" not in str(stale.value)
    shown = {r["name"]: r["stale"] for r in tables.sql("SHOW STREAMS").collect()}
    assert shown == {"ao": True, "full_": True}
    assert tables.sql("DESCRIBE STREAM ao").first()["stale"] is True


def test_redefining_the_view_without_a_derivative_makes_its_streams_stale(tables):
    tables.sql("CREATE VIEW v AS SELECT k, x FROM t")
    tables.sql("CREATE STREAM ao ON VIEW v APPEND_ONLY = TRUE")
    tables.sql("CREATE STREAM full_ ON VIEW v")
    tables.sql("CREATE OR REPLACE VIEW v AS SELECT k, x FROM t ORDER BY k LIMIT 3")
    for stream in ("ao", "full_"):
        with pytest.raises(StaleStreamError, match=r"was redefined.*ORDER BY … LIMIT"):
            tables.sql(f"SELECT * FROM {stream}")
    shown = {r["name"]: r["stale"] for r in tables.sql("SHOW STREAMS").collect()}
    assert shown == {"ao": True, "full_": True}

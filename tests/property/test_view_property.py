"""Changes of views over random histories of three tables, against oracles computed another way.

For random intervals and a family of views (filter, project, inner, cross, left, right, full,
semi and anti joins with NULL keys and duplicates, IN / NOT IN (with its NULL rules) / NOT EXISTS
subqueries, UNION ALL of overlapping branches, UNION DISTINCT, GROUP BY with NULL keys, HAVING,
DISTINCT, a global aggregate, an aggregate over a join, window functions partitioned and not,
QUALIFY, a view over a view, a CTE):
- the defining equation: the view's rows at the end, computed by Spark from the base tables'
  time travel, equal its rows at the start minus the DELETEs plus the INSERTs (as multisets);
- minimality: no ROW_ID has a DELETE and an INSERT of identical values;
- METADATA$ISUPDATE is TRUE exactly for ROW_IDs with both a DELETE and an INSERT;
- the incremental plan and recompute-and-diff return identical rows and ROW_IDs.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from functools import reduce

import pytest
from conftest import READ_PATHS, read_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

import changelake
from changelake.clock import ManualClock
from changelake.runtime.env import VIEW_CHANGES_PLAN

# Each view as SQL over {a}, {b} and {c}: stored as a view with the tables, and run by Spark with
# time-travel reads of the tables as the oracle.
VIEWS = {
    "v_filter": "SELECT k, x * 2 AS x2 FROM {a} WHERE x > 2",
    "v_join": "SELECT a.k, x, y FROM {a} JOIN {b} ON a.k = b.k",
    "v_union": "SELECT k, x FROM {a} UNION ALL SELECT k, y FROM {b} WHERE y < 5 OR y IS NULL",
    "v_cross": "SELECT a.k AS ak, b.k AS bk FROM {a} CROSS JOIN {b} WHERE a.x = b.y",
    "v_cte": "WITH ac AS (SELECT k, x FROM {a} WHERE x IS NOT NULL)"
    " SELECT ac.k, y FROM ac JOIN {b} ON ac.k = b.k",
    "v_group": "SELECT k, count(*) AS n, sum(x) AS s, min(x) AS lo, max(x) AS hi FROM {a} GROUP BY k",
    "v_having": "SELECT k, count(*) AS n FROM {a} GROUP BY k HAVING count(*) > 1",
    "v_distinct": "SELECT DISTINCT k FROM {b}",
    "v_global": "SELECT count(*) AS n, sum(y) AS s FROM {b}",
    "v_join_group": "SELECT b.k, sum(x) + 1 AS s FROM {a} JOIN {b} ON a.k = b.k GROUP BY b.k",
    "v_left": "SELECT a.k, x, y FROM {a} LEFT JOIN {b} ON a.k = b.k",
    "v_right": "SELECT a.k AS ak, y FROM {a} RIGHT JOIN {b} ON a.k = b.k",
    "v_full": "SELECT a.k AS ak, b.k AS bk, x, y FROM {a} FULL OUTER JOIN {b} ON a.k = b.k AND x < 5",
    "v_semi": "SELECT k, x FROM {a} LEFT SEMI JOIN {b} ON a.k = b.k",
    "v_anti": "SELECT k, x FROM {a} LEFT ANTI JOIN {b} ON a.k = b.k AND b.y > 2",
    "v_in": "SELECT k, x FROM {a} WHERE x > 0 AND k IN (SELECT k FROM {b} WHERE y > 1)",
    "v_not_in": "SELECT k, x FROM {a} WHERE k NOT IN (SELECT k FROM {b} WHERE y > 2)",
    "v_exists": "SELECT k, x FROM {a} WHERE NOT EXISTS (SELECT 1 FROM {b} WHERE b.k = a.k AND y < 4)",
    "v_window": "SELECT k, x, sum(x) OVER (PARTITION BY k) AS total,"
    " rank() OVER (PARTITION BY k ORDER BY x) AS r FROM {a}",
    "v_top": "SELECT k, y FROM (SELECT k, y, dense_rank() OVER (ORDER BY y DESC) AS place"
    " FROM {b}) AS ranked WHERE place <= 2",
    "v_qualify": "SELECT k, x FROM {a} QUALIFY count(*) OVER (PARTITION BY k) > 1",
    "v_union_distinct": "SELECT k FROM {a} UNION SELECT k FROM {b}",
    "v_three": "SELECT a.k, x, y, z FROM {a} JOIN {b} ON a.k = b.k LEFT JOIN {c} ON b.k = c.k",
    "v_three_group": "SELECT c.k, count(*) AS n, sum(x) AS s FROM {c} JOIN {a} ON a.k = c.k"
    " WHERE z > 0 GROUP BY c.k",
}
PLANS = ("INCREMENTAL", "RECOMPUTE")
TAG = "_which"  # which plan or which time a row of a batched read belongs to
# A view over a view: its oracle inlines the inner view.
STACKED = ("v_stacked", "SELECT k, x + y AS s FROM {v_join} WHERE y IS NOT NULL")

keys = st.one_of(st.none(), st.integers(0, 3))
values = st.one_of(st.none(), st.integers(0, 6))
statements = st.one_of(
    st.tuples(
        st.just("insert"),
        st.sampled_from("abc"),
        st.lists(st.tuples(keys, values), min_size=1, max_size=4),
    ),
    st.tuples(st.just("update"), st.sampled_from("abc"), st.integers(0, 3), st.integers(-2, 2)),
    st.tuples(st.just("rekey"), st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.sampled_from("abc"), st.integers(0, 3)),
)


def _sql(statement) -> str:
    kind, table = statement[0], statement[1]
    col = {"a": "x", "b": "y", "c": "z"}[table]
    if kind == "insert":
        rows = ", ".join(f"({_lit(k)}, {_lit(v)})" for k, v in statement[2])
        return f"INSERT INTO {table} VALUES {rows}"
    if kind == "update":
        return f"UPDATE {table} SET {col} = {col} + {statement[3]} WHERE k = {statement[2]}"
    if kind == "rekey":
        return f"UPDATE {table} SET k = {statement[3]} WHERE {col} = {statement[2]}"
    return f"DELETE FROM {table} WHERE k = {statement[2]}"


def _lit(v) -> str:
    return "NULL" if v is None else str(v)


def _at(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ")


def _oracle(session, view: str, epochs: tuple[float, ...]) -> list[Counter]:
    """The view's rows at each of ``epochs``, computed by Spark from the tables' time travel, in
    one Spark job."""
    frames = []
    for i, epoch in enumerate(epochs):
        ts = _at(epoch)
        tables = {t: f"{t} AT (TIMESTAMP => '{ts}') AS {t}" for t in "abc"}
        if view == STACKED[0]:
            inner = VIEWS["v_join"].format(**tables)
            sql = STACKED[1].format(v_join=f"({inner}) AS v_join")
        else:
            sql = VIEWS[view].format(**tables)
        frames.append(session.sql(sql).select(F.lit(i).alias(TAG), "*"))
    out = [Counter() for _ in epochs]
    for r in reduce(DataFrame.union, frames).collect():
        out[r[0]][tuple(r)[1:]] += 1
    return out


def _changes(session, spark, view: str, start: float, end: float) -> dict[str, list]:
    """The view's CHANGES over the interval by each plan: each DataFrame is planned when it is
    built (under its VIEW_CHANGES_PLAN), and all are read in one Spark job."""
    frames = []
    for i, plan in enumerate(PLANS):
        spark.conf.set(VIEW_CHANGES_PLAN, plan)
        try:
            df = session.sql(
                f"SELECT * FROM {view} CHANGES (INFORMATION => DEFAULT)"
                f" AT (TIMESTAMP => '{_at(start)}') END (TIMESTAMP => '{_at(end)}')"
            )
        finally:
            spark.conf.unset(VIEW_CHANGES_PLAN)
        frames.append(df.select(F.lit(i).alias(TAG), "*"))
    out: dict[str, list] = {plan: [] for plan in PLANS}
    for r in reduce(DataFrame.union, frames).collect():
        out[PLANS[r[0]]].append(Row(*r.__fields__[1:])(*r[1:]))
    return out


# Each example costs about fifty Spark reads: the default run draws a few histories for each way
# of reading, the nightly run (README) many more.
@pytest.mark.parametrize(
    "examples", [2, pytest.param(12, marks=pytest.mark.nightly)], ids=["default", "nightly"]
)
@pytest.mark.parametrize("read", READ_PATHS)
def test_view_changes_equal_the_oracles(spark, tmp_path_factory, examples, read):
    checked = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(history=st.lists(statements, min_size=2, max_size=6), data=st.data())
    def run(history, data):
        clock = ManualClock()
        session = changelake.connect(str(tmp_path_factory.mktemp("wh")), spark=spark, clock=clock)
        try:
            session.sql("CREATE TABLE a (k INT, x INT)")
            session.sql("CREATE TABLE b (k INT, y INT)")
            session.sql("INSERT INTO a VALUES (0, 1), (1, 3), (1, 3), (2, NULL), (NULL, 4)")
            session.sql("INSERT INTO b VALUES (1, 3), (2, 5), (NULL, 4), (3, 1)")
            session.sql("CREATE TABLE c (k INT, z INT)")
            session.sql("INSERT INTO c VALUES (1, 1), (2, 0), (2, 3), (NULL, 2)")
            for name, sql in VIEWS.items():
                session.sql(f"CREATE VIEW {name} AS {sql.format(a='a', b='b', c='c')}")
            session.sql(f"CREATE VIEW {STACKED[0]} AS {STACKED[1].format(v_join='v_join')}")
            times = []
            for statement in history:
                clock.advance(seconds=10)
                times.append(clock.now())
                session.sql(_sql(statement))
            clock.advance(seconds=10)
            times.append(clock.now())
            i = data.draw(st.integers(0, len(times) - 2))
            j = data.draw(st.integers(i + 1, len(times) - 1))
            start, end = times[i] - 5, times[j] - 5
            for view in [*VIEWS, STACKED[0]]:
                changes = _changes(session, spark, view, start, end)
                incremental, recompute = changes["INCREMENTAL"], changes["RECOMPUTE"]
                key = lambda r: [(v is not None, str(v)) for v in r]  # noqa: E731
                assert sorted(map(tuple, incremental), key=key) == sorted(
                    map(tuple, recompute), key=key
                ), view
                _check(session, view, incremental, start, end)
                checked.append(view)
        finally:
            session.close()

    with read_path(spark, read):
        run()
    assert len(checked) >= examples * (len(VIEWS) + 1)


def _check(session, view: str, changes: list, start: float, end: float) -> None:
    width = len(changes[0]) - 3 if changes else None
    deletes, inserts = Counter(), Counter()
    by_id: dict[str, list] = {}
    for r in changes:
        values = tuple(r)[:width]
        action, update, rid = r["METADATA$ACTION"], r["METADATA$ISUPDATE"], r["METADATA$ROW_ID"]
        (inserts if action == "INSERT" else deletes)[values] += 1
        by_id.setdefault(rid, []).append((action, values, update))
    before, after = _oracle(session, view, (start, end))
    assert before - deletes + inserts == after and not (deletes - before), (view, changes)
    for rid, events in by_id.items():
        actions = sorted(a for a, _, _ in events)
        assert actions in (["DELETE"], ["INSERT"], ["DELETE", "INSERT"]), (view, rid, events)
        assert all(u == (len(events) == 2) for _, _, u in events), (view, rid, events)
        if len(events) == 2:
            assert events[0][1] != events[1][1], ("not minimal", view, rid, events)

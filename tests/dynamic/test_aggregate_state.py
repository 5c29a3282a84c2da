"""Aggregates maintained from stored state (issue 23 item 4), against their queries.

Each dynamic table exists twice, INCREMENTAL and REFRESH_MODE = FULL, beside a view of the same
query (the oracle). After every refresh of a random history (NULLs, groups that disappear and
come back, updates of the extremes) each table equals its view at its data timestamp, exactly
(DECIMAL sums and averages included), and the two flavours hold the same rows and had the same
CHANGES. DOUBLE sums are compared within a bound, after histories built to make a sum maintained
by plain addition drift.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
from collections import Counter

import pytest

from changelake.schema import HIDDEN_PREFIX

GROUPED = (
    "SELECT k, COUNT(*) AS n, COUNT(v) AS cv, SUM(v) AS sv, AVG(v) AS av, MIN(v) AS lo,"
    " MAX(s) AS hi, COUNT_IF(v > 0) AS pos, BOOL_AND(b) AS all_b, BOOL_OR(b) AS any_b,"
    " SUM(w) AS sw, AVG(w) AS aw, MAX(w) AS mw FROM t GROUP BY k"
)
QUERIES = {
    "g": GROUPED,
    "glob": "SELECT COUNT(*) AS n, SUM(v) AS s, MIN(w) AS m FROM t",
    "proj": "SELECT SUM(v) * 2 AS s2, w % 2 AS parity, MIN(s) AS first FROM t GROUP BY w % 2",
    "dist": "SELECT DISTINCT k, b FROM t",
}


def _ts(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ")


def _counter(df) -> Counter:
    return Counter(tuple(r) for r in df.collect())


def _value(rng: random.Random, choices) -> str:
    return "NULL" if rng.random() < 0.2 else str(rng.choice(choices))


def _statement(rng: random.Random) -> str:
    k = _value(rng, range(4))
    where = "k IS NULL" if k == "NULL" else f"k = {k}"
    kind = rng.choice(["insert", "insert", "update", "rekey", "delete", "to_null"])
    if kind == "insert":
        letters = ["'x'", "'y'", "'z'"]
        rows = ", ".join(
            f"({_value(rng, range(4))}, {_value(rng, ['-2.25', '0.00', '1.50', '3.10', '10.05'])},"
            f" {_value(rng, range(-3, 4))}, {_value(rng, ['TRUE', 'FALSE'])},"
            f" {_value(rng, letters)})"
            for _ in range(rng.randint(1, 3))
        )
        return f"INSERT INTO t VALUES {rows}"
    if kind == "update":
        return f"UPDATE t SET v = v + {rng.choice(['-1.00', '0.25', '7.50'])} WHERE {where}"
    if kind == "rekey":
        return f"UPDATE t SET k = {_value(rng, range(5))} WHERE w = {rng.randint(-3, 3)}"
    if kind == "delete":
        return f"DELETE FROM t WHERE {where}"
    return f"UPDATE t SET v = NULL, b = NOT b, s = 'a' WHERE {where}"


def _refresh_all(session, clock, names: list[str]) -> dict[str, int]:
    before = {n: session.catalog.table(n).current_version for n in names}
    for name in names:
        clock.advance(seconds=1)
        session.sql(f"ALTER DYNAMIC TABLE {name} REFRESH")
    return before


def _changes(session, table: str, version: int) -> Counter:
    return _counter(
        session.sql(
            f"SELECT * FROM {table} CHANGES (INFORMATION => DEFAULT) AT (VERSION => {version})"
        )
    )


def _last_refresh(session, name: str):
    info = session.catalog.table(name)
    return session.catalog.refresh_history(info.table_id, limit=1)[0].record


@pytest.mark.parametrize(
    "seed", [7, pytest.param(23, marks=pytest.mark.nightly)], ids=["default", "nightly"]
)
def test_aggregates_follow_their_queries_from_state(session, clock, seed):
    rng = random.Random(seed)
    session.sql("CREATE TABLE t (k INT, v DECIMAL(8,2), w INT, b BOOLEAN, s STRING)")
    session.sql(
        "INSERT INTO t VALUES (0, 1.50, 1, TRUE, 'x'), (1, 3.10, 2, FALSE, 'y'),"
        " (1, NULL, NULL, NULL, NULL), (NULL, 0.00, 0, TRUE, 'z')"
    )
    names = []
    for name, sql in QUERIES.items():
        clock.advance(seconds=1)
        session.sql(f"CREATE VIEW {name}_o AS {sql}")
        # every query INCREMENTAL, the richest also FULL (tests/property compares the others)
        flavours = (("i", "INCREMENTAL"), ("f", "FULL")) if name == "g" else (("i", "INCREMENTAL"),)
        for flavour, mode in flavours:
            session.sql(
                f"CREATE DYNAMIC TABLE {name}_{flavour} TARGET_LAG = '1 hour'"
                f" REFRESH_MODE = {mode} AS {sql}"
            )
            names.append(f"{name}_{flavour}")
    for round_ in range(5):
        for _ in range(rng.randint(1, 3)):
            clock.advance(seconds=1)
            session.sql(_statement(rng))
        before = _refresh_all(session, clock, names)
        for name in QUERIES:
            inc, full = f"{name}_i", f"{name}_f"
            assert _last_refresh(session, inc).action in ("INCREMENTAL", "NO_DATA")
            at = session.catalog.find_dynamic_table(inc).data_timestamp
            expected = _counter(
                session.sql(f"SELECT * FROM {name}_o AT (TIMESTAMP => '{_ts(at)}')")
            )
            context = (seed, round_, name)
            assert _counter(session.sql(f"SELECT * FROM {inc}")) == expected, context
            if full in names:
                assert _counter(session.sql(f"SELECT * FROM {full}")) == expected, context
                changes = _changes(session, inc, before[inc])
                assert changes == _changes(session, full, before[full]), context
    # the state is stored, and shown nowhere
    info = session.catalog.table("g_i")
    schema = session.catalog.schema_at(info.table_id, info.current_version)
    assert len(schema.state) > 1
    assert not any(c.startswith(HIDDEN_PREFIX) for c in session.sql("SELECT * FROM g_i").columns)
    described = [r[0] for r in session.sql("DESCRIBE TABLE g_i").collect()]
    assert not any(str(c).startswith(HIDDEN_PREFIX) for c in described)


def test_a_deleted_extreme_is_recomputed_and_explain_says_what_is_maintained(session, clock):
    session.sql("CREATE TABLE t (k INT, v INT)")
    session.sql("INSERT INTO t VALUES (1, 5), (1, 9), (1, 7), (2, 3), (2, 4)")
    clock.advance(seconds=1)
    session.sql(
        "CREATE DYNAMIC TABLE m TARGET_LAG = '1 hour' AS"
        " SELECT k, MIN(v) AS lo, MAX(v) AS hi, SUM(v) AS total FROM t GROUP BY k"
    )
    clock.advance(seconds=1)
    session.sql("DELETE FROM t WHERE v IN (9, 3)")  # both groups lose an extreme
    session.sql("INSERT INTO t VALUES (2, 1), (3, 8)")
    clock.advance(seconds=1)
    explained = "\n".join(
        r[0] for r in session.sql("EXPLAIN ALTER DYNAMIC TABLE m REFRESH").collect()
    )
    assert "maintained from stored state" in explained, explained
    assert "SUM(v): from state" in explained, explained
    assert "MIN(v): from state, combined with inserted values" in explained, explained
    assert "recomputed from its rows" in explained, explained
    session.sql("ALTER DYNAMIC TABLE m REFRESH")
    assert _last_refresh(session, "m").action == "INCREMENTAL"
    got = sorted(tuple(r) for r in session.sql("SELECT * FROM m").collect())
    assert got == [(1, 5, 7, 12), (2, 1, 4, 5), (3, 8, 8, 8)]


def test_a_recompute_is_paid_only_by_a_refresh_that_needs_one(session, clock):
    """A refresh first writes as if no group lost its extreme (no job counts them first); one
    whose delta finds such a group keeps nothing of that write and recomputes: both right."""
    session.sql("CREATE TABLE t (k INT, v INT)")
    session.sql("INSERT INTO t VALUES (1, 5), (1, 9), (2, 3), (2, 4)")
    clock.advance(seconds=1)
    query = "SELECT k, MAX(v) AS hi, COUNT(*) AS n FROM t GROUP BY k"
    session.sql(f"CREATE DYNAMIC TABLE m TARGET_LAG = '1 hour' AS {query}")
    data = session.warehouse.root.removeprefix("file:") + "/data"
    steps = [
        ("UPDATE t SET v = v + 10 WHERE k = 1", False),  # the extremes only grow
        ("INSERT INTO t VALUES (3, 1)", False),
        ("DELETE FROM t WHERE v = 19", True),  # group 1 loses its MAX
        ("UPDATE t SET v = 0 WHERE v = 4", True),  # and group 2
    ]
    for statement, recomputes in steps:
        clock.advance(seconds=1)
        session.sql(statement)
        clock.advance(seconds=1)
        session.sql("ALTER DYNAMIC TABLE m REFRESH")
        record = _last_refresh(session, "m")
        assert record.action == "INCREMENTAL"
        assert (record.spark_jobs > 2) == recomputes, (statement, record.spark_jobs)
        got = sorted(tuple(r) for r in session.sql("SELECT * FROM m").collect())
        assert got == sorted(tuple(r) for r in session.sql(query).collect()), statement
    info = session.catalog.table("m")
    live = {
        f.file.path for f in session.catalog.snapshot_files(info.table_id, info.current_version)
    }
    history = {
        t.file.path
        for t in session.catalog.files_changed_between(
            info.table_id, start_exclusive=0, end_inclusive=info.current_version
        )
    }
    on_disk = {
        f"data/{d}/{f}"
        for d in os.listdir(data)
        for f in os.listdir(f"{data}/{d}")
        if f.endswith(".parquet")
    }
    ours = {p for p in on_disk if p.split("/")[1] in {q.split("/")[1] for q in live | history}}
    assert ours <= live | history  # an optimistic write that was not kept left no file


def test_columns_named_like_the_pairing_images_are_maintained(session, clock):
    """The maintenance pairs each group's old and new row as images ``_b`` and ``_a``: a dynamic
    table whose own columns have those names refreshes as any other."""
    session.sql("CREATE TABLE t (k INT, v INT)")
    session.sql("INSERT INTO t VALUES (1, 5), (1, 9), (2, 3)")
    clock.advance(seconds=1)
    session.sql(
        "CREATE DYNAMIC TABLE m TARGET_LAG = '1 hour' AS"
        " SELECT k AS _a, SUM(v) AS _b, COUNT(*) AS n FROM t GROUP BY k"
    )
    clock.advance(seconds=1)
    session.sql("INSERT INTO t VALUES (2, 4), (3, 8)")
    session.sql("DELETE FROM t WHERE v = 9")
    clock.advance(seconds=1)
    session.sql("ALTER DYNAMIC TABLE m REFRESH")
    assert _last_refresh(session, "m").action == "INCREMENTAL"
    got = sorted(tuple(r) for r in session.sql("SELECT * FROM m").collect())
    assert got == [(1, 5, 1), (2, 7, 2), (3, 8, 1)]


def test_double_sums_do_not_drift_from_a_recompute(session, clock):
    """Values of very different magnitudes come and go: a sum maintained by plain addition
    would lose the small ones (1e17 + 1 - 1e17 is 0 in DOUBLE); the maintained sums stay within
    a few ulps of the group's magnitudes of a recompute."""
    rng = random.Random(5)
    session.sql("CREATE TABLE t (k INT, d DOUBLE, id INT)")
    session.sql("INSERT INTO t VALUES (0, 1.0, 0), (1, 0.1, 1), (1, 0.2, 2), (2, -3.5, 3)")
    sql = "SELECT k, SUM(d) AS s, AVG(d) AS a, COUNT(d) AS c FROM t GROUP BY k"
    session.sql(f"CREATE VIEW o AS {sql}")
    clock.advance(seconds=1)
    session.sql(f"CREATE DYNAMIC TABLE x TARGET_LAG = '1 hour' AS {sql}")
    next_id = 10
    for round_ in range(4):
        clock.advance(seconds=1)
        big = rng.choice([1e17, -3e16, 7e15])
        k = rng.randint(0, 2)
        session.sql(f"INSERT INTO t VALUES ({k}, {big!r}, {next_id}), ({k}, {rng.random()!r}, 0)")
        clock.advance(seconds=1)
        session.sql("ALTER DYNAMIC TABLE x REFRESH")
        clock.advance(seconds=1)
        session.sql(f"DELETE FROM t WHERE id = {next_id}")  # the big value leaves again
        session.sql(f"UPDATE t SET d = d * 1.5 WHERE k = {rng.randint(0, 2)} AND id = 0")
        clock.advance(seconds=1)
        session.sql("ALTER DYNAMIC TABLE x REFRESH")
        assert _last_refresh(session, "x").action == "INCREMENTAL"
        next_id += 1
        at = session.catalog.find_dynamic_table("x").data_timestamp
        expected = {
            r.k: r for r in session.sql(f"SELECT * FROM o AT (TIMESTAMP => '{_ts(at)}')").collect()
        }
        magnitudes = {
            r.k: r.m
            for r in session.sql(
                f"SELECT k, SUM(ABS(d)) AS m FROM t AT (TIMESTAMP => '{_ts(at)}') GROUP BY k"
            ).collect()
        }
        got = {r.k: r for r in session.sql("SELECT * FROM x").collect()}
        assert got.keys() == expected.keys(), round_
        for k, row in got.items():
            bound = 64 * 2.0**-52 * magnitudes[k]
            assert row.c == expected[k].c
            assert math.isclose(row.s, expected[k].s, rel_tol=0, abs_tol=bound), (round_, k)
            assert math.isclose(row.a, expected[k].a, rel_tol=0, abs_tol=bound), (round_, k)


def _rows(session, sql: str) -> list[tuple]:
    return sorted((tuple(r) for r in session.sql(sql).collect()), key=repr)


def test_reinitialize_rewrites_the_state_and_a_table_without_state_keeps_refreshing(
    session, clock, monkeypatch
):
    """A view replaced under the table: its REINITIALIZE writes the state of the new query,
    which the next INCREMENTAL refresh combines with. A table created before state existed
    (none stored) refreshes as it did, by regrouping."""
    session.sql("CREATE TABLE t (k INT, v INT)")
    session.sql("INSERT INTO t VALUES (1, 5), (1, -2), (2, 3), (2, 8), (3, 1)")
    session.sql("CREATE VIEW pos AS SELECT k, v FROM t WHERE v > 0")
    query = "SELECT k, SUM(v) AS s, MIN(v) AS lo, COUNT(*) AS n FROM pos GROUP BY k"
    clock.advance(seconds=1)
    session.sql(f"CREATE DYNAMIC TABLE d TARGET_LAG = '1 hour' AS {query}")
    # created as before this change: no state to maintain from
    monkeypatch.setattr("changelake.dynamic.create.maintained", lambda *args: None)
    session.sql(f"CREATE DYNAMIC TABLE old TARGET_LAG = '1 hour' AS {query}")
    monkeypatch.undo()
    clock.advance(seconds=1)
    session.sql("CREATE OR REPLACE VIEW pos AS SELECT k, v FROM t WHERE v > 2")
    session.sql("UPDATE t SET v = v + 1 WHERE k = 2")
    for name in ("d", "old"):
        clock.advance(seconds=1)
        session.sql(f"ALTER DYNAMIC TABLE {name} REFRESH")
        assert _last_refresh(session, name).action == "REINITIALIZE"
    for step in ("DELETE FROM t WHERE v = 4", "INSERT INTO t VALUES (2, 10), (3, 7)"):
        clock.advance(seconds=1)
        session.sql(step)
        for name in ("d", "old"):
            clock.advance(seconds=1)
            session.sql(f"ALTER DYNAMIC TABLE {name} REFRESH")
            assert _last_refresh(session, name).action == "INCREMENTAL"
            assert _rows(session, f"SELECT * FROM {name}") == _rows(session, query), name
    state = {
        name: session.catalog.schema_at(info.table_id, info.current_version).state
        for name in ("d", "old")
        for info in [session.catalog.table(name)]
    }
    assert state["d"] and not state["old"]

"""CHANGES on views: the paper's listing 8 row for row, both plans equal, and the refusals."""

from __future__ import annotations

import datetime as dt
import doctest

import pytest
from conftest import rows
from support.paper import LISTING_8, listing_6, listing_8_changes

import changelake.plan.delta
from changelake.errors import InvalidStatementError, UnsupportedError
from changelake.runtime.env import VIEW_CHANGES_PLAN

COLUMNS = "name, item, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID"


@pytest.fixture(params=["INCREMENTAL", "RECOMPUTE"])
def plan(spark, request):
    spark.conf.set(VIEW_CHANGES_PLAN, request.param)
    yield request.param
    spark.conf.unset(VIEW_CHANGES_PLAN)


def test_the_rules_doctests_hold():
    assert doctest.testmod(changelake.plan.delta).failed == 0


def _text(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ")


def _listing_6(session, clock) -> str:
    """Listings 6 and 7, then listing 8's statements; returns the 12:13 timestamp."""
    listing_6(session)
    clock.advance(seconds=60)
    at = _text(clock.now())
    clock.advance(seconds=60)
    listing_8_changes(session)
    return at


def test_listing_8_changes_on_an_inner_join_view(session, clock, plan):
    at = _listing_6(session, clock)
    assert rows(session.sql("SELECT * FROM owner_and_items")) == [
        ("Jeffrey", "Ford"),
        ("Maude", "Autobahn LP"),
        ("Maude", "Rug"),
    ]
    df = session.sql(
        f"SELECT {COLUMNS} FROM owner_and_items CHANGES (INFORMATION => DEFAULT) AT (TS => '{at}')"
    )
    got = df.collect()
    assert sorted(tuple(r)[:4] for r in got) == LISTING_8
    ids = {(r["name"], r["item"]): r["METADATA$ROW_ID"] for r in got}
    assert ids[("Jeffrey", "Car")] == ids[("Jeffrey", "Ford")]
    assert ids[("Jeffrey", "Rug")] != ids[("Maude", "Rug")]
    assert len(set(ids.values())) == 5


def test_both_plans_return_the_same_rows_and_ids(session, clock, spark):
    at = _listing_6(session, clock)
    query = (
        f"SELECT {COLUMNS} FROM owner_and_items CHANGES (INFORMATION => DEFAULT) AT (TS => '{at}')"
    )
    results = {}
    for forced in ("INCREMENTAL", "RECOMPUTE"):
        spark.conf.set(VIEW_CHANGES_PLAN, forced)
        try:
            results[forced] = rows(session.sql(query))
        finally:
            spark.conf.unset(VIEW_CHANGES_PLAN)
    assert results["INCREMENTAL"] == results["RECOMPUTE"]
    assert len(results["INCREMENTAL"]) == 6


def test_explain_shows_the_derivative_and_the_chosen_plan(session, clock):
    at = _listing_6(session, clock)
    lines = [
        r[0]
        for r in session.sql(
            f"EXPLAIN SELECT * FROM owner_and_items CHANGES (INFORMATION => DEFAULT)"
            f" AT (TS => '{at}')"
        ).collect()
    ]
    text = "\n".join(lines)
    assert "CHANGES on view owner_and_items" in text
    assert "derivative: π((people@start ⋈ Δitems) + (Δpeople ⋈ items@end))" in text
    # every statement rewrote the one file of its table: the change scans read it all
    assert "plan: RECOMPUTE (reads ~20 rows incrementally vs ~16 to recompute)" in lines


def test_auto_chooses_by_the_rows_each_plan_reads(session, spark):
    session.sql("CREATE TABLE big AS SELECT id AS k, id % 7 AS v FROM range(0, 2000)")
    session.sql("CREATE VIEW g AS SELECT v, count(*) AS n FROM big GROUP BY v")

    def chosen(view: str, version: int) -> str:
        lines = session.sql(
            f"EXPLAIN SELECT * FROM {view} CHANGES (INFORMATION => DEFAULT)"
            f" AT (VERSION => {version})"
        ).collect()
        return next(r[0] for r in lines if r[0].startswith("plan: ")).split()[1]

    before = session.catalog.table("big").current_version
    session.sql("INSERT INTO big VALUES (3, 3)")  # a new small file: cheap to read
    assert chosen("g", before) == "INCREMENTAL"
    session.sql("UPDATE big SET v = v + 1")  # every file rewritten: the changes read them all
    assert chosen("g", before + 1) == "RECOMPUTE"


def test_append_only_on_a_join_view_and_the_python_api(session, clock):
    session.sql("CREATE TABLE a (k INT, x STRING)")
    session.sql("CREATE TABLE b (k INT, y STRING)")
    session.sql("INSERT INTO a VALUES (1, 'a1'), (2, 'a2')")
    session.sql("INSERT INTO b VALUES (1, 'b1')")
    session.sql("CREATE VIEW ab AS SELECT a.k, x, y FROM a JOIN b ON a.k = b.k WHERE x <> 'zz'")
    clock.advance(seconds=60)
    start = clock.now()
    clock.advance(seconds=60)
    session.sql("INSERT INTO b VALUES (2, 'b2'), (3, 'b3')")
    session.sql("INSERT INTO a VALUES (3, 'a3')")
    session.sql("UPDATE a SET x = 'A1' WHERE k = 1")
    session.sql("DELETE FROM a WHERE k = 2")
    when = dt.datetime.fromtimestamp(start)
    appended = session.changes("ab", start=when, information="append_only")
    assert rows(appended.select("k", "x", "y", "METADATA$ACTION")) == [
        (2, "a2", "b2", "INSERT"),
        (3, "a3", "b3", "INSERT"),
    ]
    default = session.changes("ab", start=when)
    assert rows(default.select("k", "x", "y", "METADATA$ACTION", "METADATA$ISUPDATE")) == [
        (1, "A1", "b1", "INSERT", True),
        (1, "a1", "b1", "DELETE", True),
        (3, "a3", "b3", "INSERT", False),
    ]


def test_union_all_branches_reading_the_same_row_keep_two_ids(session, clock):
    session.sql("CREATE TABLE t (k INT)")
    session.sql("CREATE VIEW twice AS SELECT k FROM t UNION ALL SELECT k FROM t WHERE k > 0")
    clock.advance(seconds=60)
    session.sql("INSERT INTO t VALUES (1), (-1)")
    got = session.sql(
        "SELECT k, METADATA$ROW_ID AS id FROM twice CHANGES (INFORMATION => DEFAULT)"
        " AT (OFFSET => -30)"
    ).collect()
    assert sorted(r["k"] for r in got) == [-1, 1, 1]
    assert len({r["id"] for r in got}) == 3


def test_group_by_view_changes_pair_by_group_keys(session, clock, plan):
    session.sql("CREATE TABLE sales (region STRING, amount INT)")
    session.sql("INSERT INTO sales VALUES ('n', 1), ('n', 2), ('s', 5), (NULL, 7), ('e', 1)")
    session.sql(
        "CREATE VIEW totals AS SELECT region, sum(amount) AS total, count(*) AS n FROM sales"
        " GROUP BY region"
    )
    clock.advance(seconds=60)
    session.sql("UPDATE sales SET amount = 10 WHERE region = 'n' AND amount = 2")
    session.sql("INSERT INTO sales VALUES ('w', 3), (NULL, 1)")
    session.sql("DELETE FROM sales WHERE region = 'e'")
    session.sql("UPDATE sales SET amount = amount WHERE region = 's'")  # changes no total
    got = session.sql(
        "SELECT region, total, n, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID"
        " FROM totals CHANGES (INFORMATION => DEFAULT) AT (OFFSET => -30)"
    ).collect()
    assert rows_of(got) == [
        (None, 7, 1, "DELETE", True),
        (None, 8, 2, "INSERT", True),
        ("e", 1, 1, "DELETE", False),
        ("n", 3, 2, "DELETE", True),
        ("n", 11, 2, "INSERT", True),
        ("w", 3, 1, "INSERT", False),
    ]
    ids = {}
    for r in got:
        ids.setdefault(r["region"], set()).add(r["METADATA$ROW_ID"])
    assert all(len(v) == 1 for v in ids.values()), ids
    assert len({next(iter(v)) for v in ids.values()}) == 4
    with pytest.raises(UnsupportedError, match="GROUP BY can remove rows"):
        session.sql("SELECT * FROM totals CHANGES (INFORMATION => APPEND_ONLY) AT (OFFSET => -30)")


def rows_of(got) -> list[tuple]:
    """The rows without their last column (METADATA$ROW_ID), sorted."""
    return sorted((tuple(r)[:-1] for r in got), key=lambda r: [(v is not None, v) for v in r])


@pytest.mark.parametrize(
    ("view", "error", "names"),
    [
        (
            "SELECT k, rank() OVER (ORDER BY count(*)) AS r FROM t GROUP BY k",
            UnsupportedError,
            "window function or QUALIFY over GROUP BY",
        ),
        ("SELECT k FROM t EXCEPT SELECT k FROM u", UnsupportedError, "EXCEPT"),
        ("SELECT k, (SELECT max(k) FROM u) AS m FROM t", UnsupportedError, "subquery"),
        ("SELECT k FROM t ORDER BY k LIMIT 3", UnsupportedError, "LIMIT"),
        ("SELECT k, rand() AS r FROM t", InvalidStatementError, "RAND"),
    ],
)
def test_views_without_a_derivative_are_refused_naming_why(session, view, error, names):
    session.sql("CREATE TABLE t (k INT)")
    session.sql("CREATE TABLE u (k INT)")
    session.sql(f"CREATE VIEW v AS {view}")
    with pytest.raises(error, match=names):
        session.sql("SELECT * FROM v CHANGES (INFORMATION => DEFAULT) AT (OFFSET => -60)")


def test_the_rfc_leaderboard_top_two_by_window_function(session, plan):
    """ODF RFC's example: a view ranking the top two players; a new second place retracts the
    old one. With QUALIFY or a subquery, both plans."""
    session.sql("CREATE TABLE match_scores (match_id INT, player STRING, score INT)")
    session.sql("INSERT INTO match_scores VALUES (1, 'Alice', 100), (1, 'Bob', 80)")
    session.sql(
        "CREATE VIEW leaderboard AS SELECT * FROM (SELECT player, score,"
        " ROW_NUMBER() OVER (ORDER BY score DESC) AS place FROM match_scores) WHERE place <= 2"
    )
    session.sql(
        "CREATE VIEW leaders AS SELECT player, score, ROW_NUMBER() OVER (ORDER BY score DESC)"
        " AS place FROM match_scores QUALIFY place <= 2"
    )
    session.sql("INSERT INTO match_scores VALUES (2, 'Alice', 70), (2, 'Charlie', 90)")
    for view in ("leaderboard", "leaders"):
        got = session.sql(
            f"SELECT * FROM {view} CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"
        ).collect()
        assert rows_of(got) == [
            ("Bob", 80, 2, "DELETE", False),
            ("Charlie", 90, 2, "INSERT", False),
        ]
        with pytest.raises(UnsupportedError, match="window function can remove rows"):
            session.sql(
                f"SELECT * FROM {view} CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => 1)"
            )
    session.sql("UPDATE match_scores SET score = 95 WHERE player = 'Bob'")  # Bob back in 2nd
    got = session.sql(
        "SELECT * FROM leaders CHANGES (INFORMATION => DEFAULT) AT (VERSION => 2)"
    ).collect()
    assert rows_of(got) == [("Bob", 95, 2, "INSERT", False), ("Charlie", 90, 2, "DELETE", False)]


def test_partitioned_windows_recompute_only_touched_partitions(session, plan, spark):
    session.sql("CREATE TABLE t (g INT, v INT)")
    session.sql("INSERT INTO t VALUES (1, 10), (1, 20), (2, 5), (2, 7), (3, 1)")
    session.sql(
        "CREATE VIEW w AS SELECT g, v, SUM(v) OVER (PARTITION BY g) AS total,"
        " RANK() OVER (PARTITION BY g ORDER BY v DESC) AS r FROM t"
    )
    session.sql("UPDATE t SET v = 30 WHERE g = 1 AND v = 10")
    session.sql("INSERT INTO t VALUES (2, 6)")
    got = session.sql(
        "SELECT * FROM w CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"
    ).collect()
    assert rows_of(got) == [
        (1, 10, 30, 2, "DELETE", True),
        (1, 20, 30, 1, "DELETE", True),
        (1, 20, 50, 2, "INSERT", True),
        (1, 30, 50, 1, "INSERT", True),
        (2, 5, 12, 2, "DELETE", True),
        (2, 5, 18, 3, "INSERT", True),
        (2, 6, 18, 2, "INSERT", False),
        (2, 7, 12, 1, "DELETE", True),
        (2, 7, 18, 1, "INSERT", True),
    ]
    explained = [
        r[0]
        for r in session.sql(
            "EXPLAIN SELECT * FROM w CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"
        ).collect()
    ]
    assert any("Regroup by `_v" in line and "partitions touched" in line for line in explained)


def test_union_distinct_views(session, clock, plan):
    session.sql("CREATE TABLE t (k INT)")
    session.sql("CREATE TABLE u (k INT)")
    session.sql("INSERT INTO t VALUES (1), (2), (2)")
    session.sql("INSERT INTO u VALUES (2), (3)")
    session.sql("CREATE VIEW ks AS SELECT k FROM t UNION SELECT k FROM u")
    clock.advance(seconds=60)
    session.sql("DELETE FROM t WHERE k = 2")  # 2 stays: u has it
    session.sql("DELETE FROM u WHERE k = 3")
    session.sql("INSERT INTO u VALUES (4), (4)")
    got = session.sql(
        "SELECT * FROM ks CHANGES (INFORMATION => DEFAULT) AT (OFFSET => -30)"
    ).collect()
    assert rows_of(got) == [(3, "DELETE", False), (4, "INSERT", False)]


def test_version_points_on_a_view_of_two_tables_are_refused(session):
    session.sql("CREATE TABLE t (k INT)")
    session.sql("CREATE TABLE u (k INT)")
    session.sql("CREATE VIEW v AS SELECT t.k FROM t JOIN u ON t.k = u.k")
    with pytest.raises(InvalidStatementError, match="TIMESTAMP, OFFSET or STATEMENT"):
        session.sql("SELECT * FROM v CHANGES (INFORMATION => DEFAULT) AT (VERSION => 0)")


def test_time_travel_on_a_view(session, clock):
    session.sql("CREATE TABLE t (k INT)")
    session.sql("CREATE VIEW v AS SELECT k * 10 AS k10 FROM t")
    session.sql("INSERT INTO t VALUES (1)")
    clock.advance(seconds=60)
    at = clock.now()
    clock.advance(seconds=60)
    session.sql("INSERT INTO t VALUES (2)")
    assert rows(session.sql(f"SELECT * FROM v AT (TIMESTAMP => '{_text(at)}')")) == [(10,)]
    assert rows(session.sql("SELECT * FROM v")) == [(10,), (20,)]


def test_left_join_view_deleting_a_dimension_row_pads_its_partners(session, clock, plan):
    session.sql("CREATE TABLE people (id INT, name STRING)")
    session.sql("INSERT INTO people VALUES (1, 'Jeffrey'), (2, 'Donny')")
    session.sql("CREATE TABLE items (id INT, oid INT, item STRING)")
    session.sql("INSERT INTO items VALUES (11, 2, 'Ball'), (13, 1, 'Car'), (16, 9, 'Kite')")
    session.sql(
        "CREATE VIEW owned AS SELECT item, name FROM items LEFT JOIN people ON oid = people.id"
    )
    clock.advance(seconds=60)
    session.sql("DELETE FROM people WHERE id = 2")
    session.sql("INSERT INTO people VALUES (9, 'Walter')")
    got = session.sql(
        "SELECT item, name, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID"
        " FROM owned CHANGES (INFORMATION => DEFAULT) AT (OFFSET => -30)"
    ).collect()
    assert rows_of(got) == [
        ("Ball", None, "INSERT", False),
        ("Ball", "Donny", "DELETE", False),
        ("Kite", None, "DELETE", False),
        ("Kite", "Walter", "INSERT", False),
    ]
    # a padded row is a different row of the view than the joined one: its own ROW_ID
    assert len({r["METADATA$ROW_ID"] for r in got}) == 4


def test_redo_on_a_view_is_each_commits_own_delta_in_commit_order(session, clock, plan):
    listing_6(session)
    times = []
    for commit in (
        ["UPDATE items SET item = 'Ford' WHERE id = 13"],
        ["DELETE FROM people WHERE id = 2"],
        ["UPDATE items SET item = 'Car' WHERE id = 13"],  # undone: REDO keeps both steps
        [
            "BEGIN",
            "INSERT INTO people VALUES (5, 'Bunny')",
            "INSERT INTO items VALUES (16, 5, 'Toe', NULL)",
            "COMMIT",
        ],
    ):
        clock.advance(seconds=10)
        times.append(_text(clock.now() - 5))
        for statement in commit:
            session.sql(statement)
    clock.advance(seconds=10)
    times.append(_text(clock.now() - 5))
    redo = session.sql(
        "SELECT * FROM owner_and_items CHANGES (INFORMATION => REDO)"
        f" AT (TIMESTAMP => '{times[0]}')"
    ).collect()
    steps = sorted({r["METADATA$COMMIT_TIMESTAMP"] for r in redo})
    assert len(steps) == 4, "the transaction writing both tables is one commit"
    assert [r["METADATA$COMMIT_TIMESTAMP"] for r in redo] == sorted(
        r["METADATA$COMMIT_TIMESTAMP"] for r in redo
    )
    for step, (start, end) in zip(steps, zip(times, times[1:], strict=False), strict=True):
        default = session.sql(
            "SELECT * FROM owner_and_items CHANGES (INFORMATION => DEFAULT)"
            f" AT (TIMESTAMP => '{start}') END (TIMESTAMP => '{end}')"
        ).collect()
        assert sorted(tuple(r)[:5] for r in redo if r["METADATA$COMMIT_TIMESTAMP"] == step) == (
            sorted(tuple(r) for r in default)
        )
    assert [tuple(r)[:4] for r in redo if r["item"] in ("Car", "Ford")] == [
        ("Jeffrey", "Car", "DELETE", True),
        ("Jeffrey", "Ford", "INSERT", True),
        ("Jeffrey", "Ford", "DELETE", True),
        ("Jeffrey", "Car", "INSERT", True),
    ]
    assert ("Bunny", "Toe", "INSERT", False) in [tuple(r)[:4] for r in redo]


def test_a_regroup_reads_only_files_that_may_hold_touched_keys(session, plan):
    """Ten inserts with disjoint key ranges; an update in one range reads that insert's files
    and the UPDATE's new ones, not the other nine inserts', and the changes still equal
    recompute-and-diff's."""

    def files() -> set[str]:
        table_id = session.catalog.table("f").table_id
        return {path.rsplit("/", 1)[-1] for path, _, _ in session.catalog.all_file_paths(table_id)}

    session.sql("CREATE TABLE f (k INT, v INT)")
    written = []
    for part in range(10):
        known = files()
        session.sql(f"INSERT INTO f SELECT {part} * 100 + id % 10, id FROM range(0, 50)")
        written.append(files() - known)
    session.sql("CREATE VIEW totals AS SELECT k, count(*) AS n, sum(v) AS s FROM f GROUP BY k")
    version = session.catalog.table("f").current_version
    known = files()
    session.sql("UPDATE f SET v = v + 1000 WHERE k = 305")
    updated = files() - known
    df = session.sql(
        f"SELECT * FROM totals CHANGES (INFORMATION => DEFAULT) AT (VERSION => {version})"
    )
    assert rows_of(df.collect()) == [
        (305, 5, 125, "DELETE", True),
        (305, 5, 5125, "INSERT", True),
    ]
    read = {p.rsplit("/", 1)[-1] for p in df.inputFiles() if "/dv/" not in p}  # data files
    if plan == "INCREMENTAL":
        assert read == written[3] | updated
    else:
        assert read == files()

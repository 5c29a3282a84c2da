"""What a statement costs before and around its data, counted (not timed): py4j round trips,
Spark jobs and catalog queries per statement, for a fixed set of statements on small tables.
A statement compiles to one plan that the JVM analyses once (docs/DESIGN.md, "A statement is one
plan"); these ceilings fail when a change makes a statement pay its fixed cost step by step again.

The statements run on warm tables: after a first round (which loads classes, parses types and
fills caches that any later statement finds filled), the least of two more rounds is counted.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable

import psycopg
import pytest
import sqlalchemy as sa
from support.costs import Costs, cost_of, least
from support.postgres import create_database

import changelake

# statement -> (py4j calls, Spark jobs, catalog queries) at most: what they cost now. The py4j
# calls include the action's own (collect). Small inputs run without adaptive execution and
# broadcasts (spark/relation.py, SMALL_INPUT): a plan is one job.
CEILINGS: dict[str, tuple[int, int, int]] = {
    "select": (10, 1, 4),
    "changes of a table": (12, 1, 5),
    "changes of a 3-table view": (23, 1, 6),
    "update": (23, 2, 14),
    "delete": (12, 1, 13),
    # a small delta is applied in one pass (dml/keyed.py, OnePass): one job writes its new
    # rows and its DV and counts its events
    "dt refresh": (24, 1, 23),
    # MIN: no group needs a recompute, so none is counted first (refresh._written)
    "dt refresh of a group by": (17, 1, 25),
    "merge": (45, 2, 16),
    "follow step": (27, 1, 18),
}


def _setup(s: changelake.Session, source: str) -> None:
    for name, extra in (("a", "x INT"), ("b", "y INT"), ("c", "z INT")):
        s.sql(f"CREATE TABLE c_{name} (k INT, {extra})")
        s.sql(f"INSERT INTO c_{name} SELECT CAST(id AS INT), CAST(id % 7 AS INT) FROM range(100)")
    s.sql(
        "CREATE VIEW c_v AS SELECT a.k, x, y, z FROM c_a a"
        " JOIN c_b b ON a.k = b.k JOIN c_c c ON b.k = c.k"
    )
    s.sql(
        "CREATE DYNAMIC TABLE c_dt TARGET_LAG = '1 day' AS SELECT a.k, x, y FROM c_a a"
        " JOIN c_b b ON a.k = b.k WHERE x > 2"
    )
    s.sql(
        "CREATE DYNAMIC TABLE c_agg TARGET_LAG = '1 day' AS SELECT x, count(*) AS n, sum(k) AS s,"
        " min(k) AS lo FROM c_a GROUP BY x"
    )
    s.sql("CREATE TABLE c_s (k INT, z INT)")
    url = sa.make_url(source)
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, amount int)")
        conn.execute("INSERT INTO orders SELECT g, g FROM generate_series(1, 100) g")
    s.sql(
        f"CREATE CONNECTION src TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {url.port},"
        f" database => '{url.database}', user => '{url.username}')"
    )
    s.sql("CREATE EXTERNAL TABLE c_o FROM CONNECTION src TABLE 'public.orders'")


def _dsn(url: sa.URL) -> str:
    return f"host={url.host} port={url.port} dbname={url.database} user={url.username}"


def _round(s: changelake.Session, clock, i: int, source: str) -> dict[str, Callable[[], object]]:
    """One round's statements, after the changes they read."""
    clock.advance(seconds=1.0)
    start = dt.datetime.fromtimestamp(clock.now()).isoformat(sep=" ")
    clock.advance(seconds=1.0)
    s.sql(f"UPDATE c_a SET x = x + 1 WHERE k = {i}")
    s.sql(f"INSERT INTO c_b VALUES ({200 + i}, 1)")
    s.sql(f"INSERT INTO c_a VALUES ({200 + i}, 5)")
    s.sql(f"INSERT INTO c_s VALUES ({i}, {i}), ({300 + i}, 1)")
    with psycopg.connect(_dsn(sa.make_url(source)), options="-c synchronous_commit=on") as conn:
        conn.execute(f"UPDATE orders SET amount = amount + 1 WHERE id = {i}")
        conn.execute(f"INSERT INTO orders VALUES ({300 + i}, 1)")
    version = s.catalog.table("c_a").current_version - 3
    return {
        "select": lambda: s.sql("SELECT * FROM c_a WHERE k = 3").collect(),
        "changes of a table": lambda: s.sql(
            f"SELECT * FROM c_a CHANGES (INFORMATION => DEFAULT) AT (VERSION => {version})"
        ).collect(),
        "changes of a 3-table view": lambda: s.sql(
            f"SELECT * FROM c_v CHANGES (INFORMATION => DEFAULT) AT (TIMESTAMP => '{start}')"
        ).collect(),
        "update": lambda: s.sql(f"UPDATE c_c SET z = z + 1 WHERE k = {i}"),
        "delete": lambda: s.sql(f"DELETE FROM c_c WHERE k = {50 + i}"),
        "dt refresh": lambda: s.sql("ALTER DYNAMIC TABLE c_dt REFRESH"),
        "dt refresh of a group by": lambda: s.sql("ALTER DYNAMIC TABLE c_agg REFRESH"),
        "merge": lambda: s.sql(
            f"MERGE INTO c_c USING (SELECT * FROM c_s WHERE k IN ({i}, {300 + i})) s"
            " ON c_c.k = s.k WHEN MATCHED THEN UPDATE SET z = s.z"
            " WHEN NOT MATCHED THEN INSERT (k, z) VALUES (s.k, s.z)"
        ),
        "follow step": lambda: s.sql("ALTER EXTERNAL TABLE c_o REFRESH"),
    }


@pytest.fixture(scope="module")
def costs(spark, pg_server, tmp_path_factory) -> dict[str, Costs]:
    from changelake.clock import ManualClock

    source = create_database(pg_server, "costs_" + uuid.uuid4().hex[:10])
    clock = ManualClock()
    s = changelake.connect(str(tmp_path_factory.mktemp("costs") / "wh"), spark=spark, clock=clock)
    try:
        _setup(s, source)
        for action in _round(s, clock, 1, source).values():
            action()
        # the least of two rounds: a cost paid once by whichever statement comes first (a pool
        # connection opened, a class loaded) is not a statement's own
        rounds = [
            {name: cost_of(s, action) for name, action in _round(s, clock, i, source).items()}
            for i in (2, 3)
        ]
        return {name: least(rounds[0][name], rounds[1][name]) for name in rounds[0]}
    finally:
        s.close()
        with psycopg.connect(_dsn(sa.make_url(source)), autocommit=True) as conn:
            conn.execute(  # a replication slot holds the whole server's WAL
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = current_database()"
            )


@pytest.mark.parametrize("statement", list(CEILINGS))
def test_a_statement_pays_its_fixed_cost_once(costs: dict[str, Costs], statement: str) -> None:
    got = costs[statement]
    py4j, jobs, catalog = CEILINGS[statement]
    print(f"{statement}: {got}")
    assert got.py4j <= py4j, f"{statement}: {got} (at most {py4j} py4j calls)"
    assert got.jobs <= jobs, f"{statement}: {got} (at most {jobs} Spark jobs)"
    assert got.catalog <= catalog, f"{statement}: {got} (at most {catalog} catalog queries)"

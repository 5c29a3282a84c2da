"""SCOPE = DEPENDENTS: an external table holds exactly the source's rows under the OR of its
dependents' filters (oracle: the source queried with that predicate), widens by bootstrapping
while the source takes writes, narrows when a dependent goes, and refuses reads outside it."""

from __future__ import annotations

import threading

import psycopg
import pytest
from tests.conftest import rows, spark_jobs
from tests.external.conftest import COLUMNS, write

from changelake.errors import ExternalTableError

EU = "region = 'EU'"
BIG = "amount > 200"


def source_under(dsn: str, predicate: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(f"SELECT {COLUMNS} FROM orders WHERE {predicate}").fetchall()
    return sorted(found, key=lambda r: r[0])


def held(session) -> list[tuple]:
    """Every row the table holds, read around the scope check (as a dependent's plan would)."""
    info = session.catalog.table("orders")
    from tests.conftest import state_of

    from changelake.storage.snapshot import state_relation

    df = state_relation(session.spark, session.warehouse, state_of(session, info)).frame(
        session.spark
    )
    return rows(df.select(*[c.strip() for c in COLUMNS.split(",")]))


@pytest.fixture
def scoped(session, source):
    dsn, port, name = source
    session.sql(
        f"CREATE CONNECTION shop TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
        f" database => '{name}', user => 'postgres')"
    )
    session.sql(
        "CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders' SCOPE = DEPENDENTS"
    )
    return session


def test_the_scope_is_the_or_of_the_dependents_filters(scoped, source, clock):
    dsn = source[0]
    assert held(scoped) == []  # no dependent yet: no row
    scoped.sql(
        "CREATE DYNAMIC TABLE eu_totals TARGET_LAG = '1 minute'"
        f" AS SELECT region, SUM(amount) AS total FROM orders WHERE {EU} GROUP BY region"
    )
    assert held(scoped) == source_under(dsn, EU)
    ext = scoped.catalog.find_external_table("orders")
    assert ext.scope == f"(({EU}))"
    total = rows(scoped.sql("SELECT total FROM eu_totals"))
    with psycopg.connect(dsn) as conn:
        assert total == [conn.execute(f"SELECT sum(amount) FROM orders WHERE {EU}").fetchone()]

    # the follow applies the scope: rows entering it are inserts, rows leaving it deletes
    write(dsn, "UPDATE orders SET region = 'EU' WHERE id = 1")  # enters
    write(dsn, "UPDATE orders SET region = 'US' WHERE id = 3")  # leaves
    write(dsn, "INSERT INTO orders VALUES (900, 'US', 5, 'out'), (901, 'EU', 6, 'in')")
    scoped.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(scoped) == source_under(dsn, EU)

    # reads must stay within the scope
    with pytest.raises(ExternalTableError, match="SCOPE = DEPENDENTS"):
        scoped.sql("SELECT * FROM orders").collect()
    with pytest.raises(ExternalTableError, match="region = 'EU'"):
        scoped.sql("SELECT count(*) FROM orders WHERE amount > 1").collect()
    inside = rows(scoped.sql(f"SELECT id FROM orders WHERE {EU} AND id < 10"))
    assert inside == [(r[0],) for r in source_under(dsn, f"{EU} AND id < 10")]

    # a new dependent widens the scope while the source takes writes: bootstrapping
    stop, written = threading.Event(), []

    def writer() -> None:
        n = 2000
        while not stop.is_set():
            region = "EU" if n % 2 else "US"
            write(
                dsn,
                f"INSERT INTO orders VALUES ({n}, '{region}', {n % 400}, 'w')",
                f"UPDATE orders SET amount = amount + 150 WHERE id = {n % 200 + 1}",
                f"UPDATE orders SET region = '{region}' WHERE id = {(n * 7) % 200 + 1}",
            )
            written.append(n)
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        clock.advance(seconds=1)
        scoped.sql(f"CREATE VIEW big AS SELECT id, amount FROM orders WHERE {BIG}")
    finally:
        stop.set()
        thread.join()
    assert written
    scoped.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(scoped) == source_under(dsn, f"({EU}) OR ({BIG})")
    assert rows(scoped.sql("SELECT id FROM big")) == [(r[0],) for r in source_under(dsn, BIG)]

    # a dependent that goes narrows it: the rows no dependent reads leave as deletes
    scoped.sql("DROP VIEW big")
    assert scoped.catalog.find_external_table("orders").scope == f"(({EU}))"
    assert held(scoped) == source_under(dsn, EU)


def test_a_filter_that_implies_the_scope_is_read_and_time_travel_checks_the_scope_then(
    scoped, source
):
    """Issue 37 item 2: the scope written as an OR (in either order) was refused."""
    dsn = source[0]
    scoped.sql(f"CREATE VIEW eu AS SELECT id FROM orders WHERE {EU}")
    before = scoped.catalog.table("orders").current_version
    scoped.sql(f"CREATE VIEW big AS SELECT id, amount FROM orders WHERE {BIG}")
    assert scoped.catalog.find_external_table("orders").scope == f"(({BIG})) OR (({EU}))"
    for where in (
        f"{EU} OR {BIG}",
        f"{BIG} OR {EU}",
        "amount >= 240.5",
        f"({EU} OR amount BETWEEN 201 AND 230) AND id < 190",
        "id IN (3, 170, 171)",  # no: id is not in the scope
    ):
        query = f"SELECT id FROM orders WHERE {where}"
        if where.startswith("id IN"):
            with pytest.raises(ExternalTableError, match="do not keep it within that scope"):
                scoped.sql(query).collect()
            continue
        assert rows(scoped.sql(query)) == [(r[0],) for r in source_under(dsn, where)]

    # the version before the widening held the region = 'EU' rows only
    with pytest.raises(ExternalTableError, match=f"at version {before} .*{EU}"):
        scoped.sql(f"SELECT id FROM orders AT (VERSION => {before}) WHERE {BIG}").collect()
    then = rows(scoped.sql(f"SELECT id FROM orders AT (VERSION => {before}) WHERE {EU}"))
    assert then == [(r[0],) for r in source_under(dsn, EU)]


def test_a_stream_on_the_table_or_an_outer_join_needs_every_row(scoped, source):
    dsn = source[0]
    scoped.sql("CREATE TABLE regions (name STRING)")
    scoped.sql(
        "CREATE VIEW joined AS SELECT r.name, o.id FROM regions r LEFT JOIN orders o"
        f" ON o.region = r.name WHERE o.{BIG}"
    )
    assert scoped.catalog.find_external_table("orders").scope is None  # nothing pushable
    assert held(scoped) == source_under(dsn, "TRUE")
    scoped.sql("DROP VIEW joined")  # the last dependent: the rows are kept for the next one
    assert scoped.catalog.find_external_table("orders").scope is None
    assert held(scoped) == source_under(dsn, "TRUE")
    scoped.sql("CREATE STREAM s ON EXTERNAL TABLE orders")
    assert held(scoped) == source_under(dsn, "TRUE")


def test_the_snapshot_query_carries_the_scope(session, source):
    from changelake.external.postgresql import pgtable, postgres, replication
    from changelake.external.rows import table_schema

    dsn, port, name = source
    session.sql(
        f"CREATE CONNECTION shop TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
        f" database => '{name}', user => 'postgres')"
    )
    info = session.catalog.find_connection("shop")
    schema = table_schema([("id", "int"), ("region", "string"), ("amount", "decimal(10,2)")])
    with postgres.connect(info) as conn:
        table = postgres.describe(info, conn, "orders")
    with replication.exported_slot(info, "t_scope_slot") as exported:
        df = pgtable.snapshot(
            session.spark, info, table, exported, schema, postgres.to_postgres(EU)
        )
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "region = 'EU'" in plan  # the filter runs on the source
        assert df.count() == len(source_under(dsn, EU))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('t_scope_slot')")


def test_a_scope_on_the_replica_identity_is_a_publication_row_filter(scoped, source):
    dsn = source[0]
    scoped.sql("CREATE VIEW low AS SELECT id, note FROM orders WHERE id < 50")
    ext = scoped.catalog.find_external_table("orders")
    with psycopg.connect(dsn) as conn:
        (found,) = conn.execute(
            "SELECT rowfilter FROM pg_publication_tables WHERE pubname = %s",
            (ext.definition.publication,),
        ).fetchone()
    assert found is not None and "50" in found  # only the scope's changes leave the source
    # the source's own writers are never refused for it; rows cross the filter both ways
    write(dsn, "UPDATE orders SET note = 'x' WHERE id < 60")
    write(dsn, "DELETE FROM orders WHERE id = 45", "UPDATE orders SET id = 45 WHERE id = 150")
    write(dsn, "UPDATE orders SET id = 1160 WHERE id = 40")  # leaves
    write(dsn, "DELETE FROM orders WHERE id = 10")
    scoped.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(scoped) == source_under(dsn, "id < 50")
    scoped.sql("CREATE VIEW eu AS SELECT * FROM orders WHERE region = 'EU'")  # not in the key
    with psycopg.connect(dsn) as conn:
        (found,) = conn.execute(
            "SELECT rowfilter FROM pg_publication_tables WHERE pubname = %s",
            (ext.definition.publication,),
        ).fetchone()
    assert found is None  # filtered on arrival instead
    write(dsn, "UPDATE orders SET region = 'EU' WHERE id = 151")
    scoped.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(scoped) == source_under(dsn, "id < 50 OR region = 'EU'")


def test_describe_shows_a_bootstrap_under_way_and_a_failed_one_leaves_no_trace(
    scoped, source, monkeypatch
):
    from changelake.external.postgresql import scope

    seen = []
    real = scope.snapshot

    def watched(*args, **kwargs):  # the snapshot is read while the bootstrap is under way
        seen.append(dict(scoped.sql("DESCRIBE EXTERNAL TABLE orders").collect())["bootstrap"])
        return real(*args, **kwargs)

    monkeypatch.setattr(scope, "snapshot", watched)
    scoped.sql(f"CREATE VIEW eu AS SELECT * FROM orders WHERE {EU}")
    assert len(seen) == 1 and "loading the rows of" in seen[0] and EU in seen[0]
    described = dict(scoped.sql("DESCRIBE EXTERNAL TABLE orders").collect())
    assert described["bootstrap"] == "none" and described["state"] == "ACTIVE"

    def broken(*args, **kwargs):
        raise RuntimeError("the source went away")

    monkeypatch.setattr(scope, "snapshot", broken)
    with pytest.raises(RuntimeError, match="went away"):
        scoped.sql(f"CREATE VIEW big AS SELECT * FROM orders WHERE {BIG}")
    described = dict(scoped.sql("DESCRIBE EXTERNAL TABLE orders").collect())
    assert described["bootstrap"] == "none" and described["state"] == "ACTIVE"
    assert held(scoped) == source_under(source[0], EU)  # the scope did not change


def test_creating_it_reads_nothing_and_it_follows_once_a_dependent_comes(session, source):
    dsn, port, name = source
    session.sql(
        f"CREATE CONNECTION shop TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
        f" database => '{name}', user => 'postgres')"
    )
    with spark_jobs(session.spark) as jobs:
        session.sql(
            "CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'"
            " SCOPE = DEPENDENTS"
        )
        assert jobs() == 0  # an empty scope needs no read of the source
    assert held(session) == []
    write(dsn, "UPDATE orders SET region = 'EU' WHERE id = 1", "DELETE FROM orders WHERE id = 3")
    session.sql(f"CREATE VIEW eu AS SELECT id, amount FROM orders WHERE {EU}")
    assert held(session) == source_under(dsn, EU)
    write(dsn, "INSERT INTO orders VALUES (901, 'EU', 6, 'in')", "DELETE FROM orders WHERE id = 6")
    session.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(session) == source_under(dsn, EU)
    assert rows(session.sql("SELECT id FROM eu")) == [(r[0],) for r in source_under(dsn, EU)]


def test_the_last_dependent_going_keeps_the_rows_and_dropping_the_table_reads_none(scoped, source):
    dsn = source[0]
    scoped.sql(f"CREATE VIEW eu AS SELECT id, amount FROM orders WHERE {EU}")
    with spark_jobs(scoped.spark) as jobs:
        scoped.sql("DROP VIEW eu")
        assert jobs() == 0
    # kept: the scope and its rows, still followed, still checked on read
    assert scoped.catalog.find_external_table("orders").scope == f"(({EU}))"
    write(dsn, "UPDATE orders SET region = 'EU' WHERE id = 1", "DELETE FROM orders WHERE id = 3")
    scoped.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert held(scoped) == source_under(dsn, EU)
    assert rows(scoped.sql(f"SELECT id FROM orders WHERE {EU}")) == [
        (r[0],) for r in source_under(dsn, EU)
    ]
    with pytest.raises(ExternalTableError, match="SCOPE = DEPENDENTS"):
        scoped.sql(f"SELECT id FROM orders WHERE {BIG}").collect()
    # a dependent that reads what is kept loads nothing again (one that reads less or more
    # rescopes from the kept scope: only the difference is deleted or loaded)
    with spark_jobs(scoped.spark) as jobs:
        scoped.sql(f"CREATE VIEW eu_again AS SELECT id, note FROM orders WHERE {EU}")
        scoped.sql("DROP VIEW eu_again")
        assert jobs() == 0
    with spark_jobs(scoped.spark) as jobs:
        scoped.sql("DROP EXTERNAL TABLE orders")
        assert jobs() == 0
    assert scoped.catalog.find_table("orders") is None
    with psycopg.connect(dsn) as conn:  # its slot and publication went with it
        slots = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        ).fetchone()
        assert slots == (0,)  # the server's other databases may hold slots of other tests

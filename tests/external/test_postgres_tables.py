"""External tables from a real PostgreSQL server (wal_level = logical): the snapshot equals the
source at the slot's point while writers run, the follow applies inserts, updates (key changes
too), deletes, multi-row transactions and TRUNCATE exactly once, a source UPDATE is an update pair
in CHANGES, and the source objects go with the table."""

from __future__ import annotations

import threading
from decimal import Decimal

import psycopg
import pytest
from tests.conftest import conflict_of_a_key_not_held, rows
from tests.dynamic.test_scheduler import _scheduler
from tests.external.conftest import local_rows, source_rows, write

from changelake.errors import (
    ConfigurationError,
    DependencyError,
    ExternalTableError,
    InvalidStatementError,
    SourceError,
)
from changelake.external.postgresql import replication


@pytest.fixture
def shop(session, source):
    dsn, port, name = source
    session.sql(
        f"CREATE CONNECTION shop TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
        f" database => '{name}', user => 'postgres')"
    )
    return session


def slots(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        query = "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
        return [r[0] for r in conn.execute(query)]


def test_snapshot_then_follow_equals_the_source(shop, source):
    dsn = source[0]
    stop = threading.Event()
    written = []

    def writer() -> None:  # the source keeps changing while the snapshot is read
        n = 1000
        while not stop.is_set():
            write(
                dsn,
                f"INSERT INTO orders VALUES ({n}, 'EU', 1.5, 'w')",
                f"UPDATE orders SET amount = amount + 1 WHERE id = {n % 200 + 1}",
            )
            written.append(n)
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    finally:
        stop.set()
        thread.join()
    assert written, "the writer ran during the snapshot"
    shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert local_rows(shop) == source_rows(dsn)

    write(dsn, "INSERT INTO orders VALUES (5000, 'EU', 9.99, 'new')")
    write(dsn, "UPDATE orders SET note = 'changed' WHERE id = 3")
    write(dsn, "UPDATE orders SET id = 6000 WHERE id = 4")  # the key itself changes
    write(dsn, "DELETE FROM orders WHERE id = 5")
    write(  # one transaction: its changes land in one commit or not at all
        dsn,
        "INSERT INTO orders VALUES (7000, 'US', 1, 'a')",
        "UPDATE orders SET amount = 2 WHERE id = 7000",
        "DELETE FROM orders WHERE id = 6",
        "INSERT INTO orders VALUES (6, 'US', 3, 'back')",
    )
    before = shop.catalog.table("orders").current_version
    shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert local_rows(shop) == source_rows(dsn)
    assert shop.catalog.table("orders").current_version == before + 1  # one commit

    changes = shop.sql(
        f"SELECT id, note, METADATA$ACTION, METADATA$ISUPDATE FROM orders"
        f" CHANGES(INFORMATION => DEFAULT) AT(VERSION => {before})"
    )
    by_id = {(r[0], r[2]): r[3] for r in changes.collect()}
    assert by_id[(3, "INSERT")] is True and by_id[(3, "DELETE")] is True  # an update pair
    assert by_id[(5, "DELETE")] is False
    assert (4, "DELETE") in by_id and (6000, "INSERT") in by_id

    write(dsn, "TRUNCATE orders", "INSERT INTO orders VALUES (1, 'EU', 1, 'after')")
    shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert local_rows(shop) == source_rows(dsn) == [(1, "EU", Decimal("1.00"), "after")]


def test_a_crash_between_commit_and_slot_advance_applies_nothing_twice(shop, source, monkeypatch):
    dsn = source[0]
    shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    write(dsn, "UPDATE orders SET amount = amount * 2 WHERE id <= 10")
    write(dsn, "DELETE FROM orders WHERE id BETWEEN 11 AND 20")

    def crash(*_args, **_kwargs):
        raise KeyboardInterrupt("killed after the commit")

    monkeypatch.setattr(replication, "advance", crash)
    with pytest.raises(KeyboardInterrupt):
        shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    monkeypatch.undo()
    after_crash = shop.catalog.table("orders").current_version
    assert local_rows(shop) == source_rows(dsn)
    write(dsn, "INSERT INTO orders VALUES (900, 'EU', 1, 'x')")
    shop.sql("ALTER EXTERNAL TABLE orders REFRESH")  # re-reads the applied changes, skips them
    assert local_rows(shop) == source_rows(dsn)
    history = rows(shop.sql("DESCRIBE HISTORY orders").select("version", "rows_deleted"))
    assert sum(d for v, d in history if v > after_crash) == 0


def test_the_table_refuses_writes_and_drop_removes_the_source_objects(shop, source):
    dsn = source[0]
    shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    ext = shop.catalog.find_external_table("orders")
    assert ext is not None and ext.definition.slot in slots(dsn)
    for statement in (
        "INSERT INTO orders VALUES (1, 'x', 1, 'y')",
        "DELETE FROM orders WHERE id = 1",
        "DROP TABLE orders",
    ):
        with pytest.raises(ExternalTableError, match="external table"):
            shop.sql(statement)
    with pytest.raises(DependencyError, match="orders"):
        shop.sql("DROP CONNECTION shop")
    described = dict(shop.sql("DESCRIBE EXTERNAL TABLE orders").collect())
    assert described["source_position"] == ext.position
    assert described["keys"] == "id"
    assert described["rows"] == "200"
    assert described["follow_lag_seconds"] == "0.0"  # nothing pending
    assert int(described["slot_retained_bytes"]) >= 0
    shop.sql("DROP EXTERNAL TABLE orders")
    assert ext.definition.slot not in slots(dsn)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0
    shop.sql("DROP CONNECTION shop")
    assert shop.sql("SHOW CONNECTIONS").count() == 0


def test_bad_sources_are_refused_with_how_to_fix(shop, source, monkeypatch):
    dsn, port, name = source
    write(dsn, "CREATE TABLE nokey (a int, b text)")
    with pytest.raises(SourceError, match="no primary key"):
        shop.sql("CREATE EXTERNAL TABLE t FROM CONNECTION shop TABLE 'public.nokey'")
    with pytest.raises(SourceError, match="no table public.missing"):
        shop.sql("CREATE EXTERNAL TABLE t FROM CONNECTION shop TABLE 'missing'")
    assert shop.catalog.find_table("t") is None and slots(dsn) == []
    monkeypatch.delenv("SHOP_PW", raising=False)
    with pytest.raises(ConfigurationError, match="SHOP_PW"):
        shop.sql(
            f"CREATE CONNECTION secret TYPE = POSTGRES OPTIONS (host => '127.0.0.1',"
            f" port => {port}, database => '{name}', user => 'postgres',"
            " password_env => 'SHOP_PW')"
        )
    with pytest.raises(ConfigurationError, match="unknown option"):
        shop.sql(
            "CREATE CONNECTION c2 TYPE = POSTGRES OPTIONS (host => 'h', database => 'd',"
            " user => 'u', pasword => 'x')"
        )
    write(dsn, "DROP ROLE IF EXISTS plain_reader", "CREATE ROLE plain_reader LOGIN")
    with pytest.raises(SourceError, match="ALTER ROLE plain_reader WITH REPLICATION"):
        shop.sql(
            f"CREATE CONNECTION c3 TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
            f" database => '{name}', user => 'plain_reader')"
        )
    with pytest.raises(SourceError, match="cannot connect to database nowhere"):
        shop.sql(
            f"CREATE CONNECTION c4 TYPE = POSTGRES OPTIONS (host => '127.0.0.1', port => {port},"
            " database => 'nowhere', user => 'postgres')"
        )
    shown = shop.sql("SHOW CONNECTIONS").collect()
    assert [r["name"] for r in shown] == ["shop"]


def test_the_scheduler_follows_and_dynamic_tables_and_streams_see_the_changes(shop, source, clock):
    dsn = source[0]
    shop.sql(
        "CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'"
        " FOLLOW_LAG = '1 second'"
    )
    shop.sql("CREATE STREAM new_orders ON EXTERNAL TABLE orders INSERT_ONLY = TRUE")
    shop.sql(
        "CREATE DYNAMIC TABLE eu TARGET_LAG = '2 seconds'"
        " AS SELECT region, SUM(amount) AS total FROM orders GROUP BY region"
    )
    write(dsn, "INSERT INTO orders VALUES (500, 'EU', 100, 'big')")
    write(dsn, "UPDATE orders SET amount = 0 WHERE id = 3")
    clock.advance(seconds=2)
    scheduler = _scheduler(shop)
    assert scheduler.step() is not None  # followed orders, then refreshed eu
    expected = rows(shop.sql("SELECT region, SUM(amount) FROM orders GROUP BY region"))
    assert rows(shop.sql("SELECT region, total FROM eu")) == expected
    with psycopg.connect(dsn) as conn:
        total = conn.execute("SELECT sum(amount) FROM orders WHERE region = 'EU'").fetchone()[0]
    assert dict(expected)["EU"] == total
    assert rows(shop.sql("SELECT id, note FROM new_orders")) == [(500, "big")]

    with psycopg.connect(dsn, autocommit=True) as conn:  # the slot vanishes on the source
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE database = current_database()"
        )
    clock.advance(seconds=2)
    scheduler.step()
    shown = shop.sql("SHOW EXTERNAL TABLES").collect()[0]
    assert shown["state"] == "FAILED" and "slot" in shown["error"]
    with pytest.raises(SourceError, match="CREATE OR REPLACE EXTERNAL TABLE orders"):
        shop.sql("ALTER EXTERNAL TABLE orders REFRESH")


def test_a_stream_on_external_table_needs_one(shop):
    shop.sql("CREATE TABLE plain (a INT)")
    with pytest.raises(InvalidStatementError, match="not an external table"):
        shop.sql("CREATE STREAM s ON EXTERNAL TABLE plain INSERT_ONLY = TRUE")


def test_source_ddl_fails_the_table_with_a_clear_error_not_a_crash_loop(shop, source, clock):
    dsn = source[0]
    shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    shop.sql(
        "CREATE EXTERNAL TABLE some (id INT, note STRING) FROM CONNECTION shop"
        " TABLE 'public.orders'"
    )
    write(
        dsn, "ALTER TABLE orders ADD COLUMN extra int", "UPDATE orders SET extra = 1 WHERE id = 1"
    )
    with pytest.raises(SourceError, match="gained column.*extra"):
        shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    shop.sql("ALTER EXTERNAL TABLE some REFRESH")  # keeps the columns it names
    assert rows(shop.sql("SELECT id, note FROM some WHERE id = 1")) == [(1, "n1")]

    write(dsn, "DROP TABLE orders")
    clock.advance(seconds=2)
    scheduler = _scheduler(shop)
    scheduler.step()
    scheduler.step()  # a failed table is not retried until RESUME
    shown = {r["name"]: r for r in shop.sql("SHOW EXTERNAL TABLES").collect()}
    assert shown["orders"]["state"] == "FAILED" and "extra" in shown["orders"]["error"]
    assert shown["some"]["state"] == "FAILED" and "dropped" in shown["some"]["error"]
    described = dict(shop.sql("DESCRIBE EXTERNAL TABLE some").collect())
    assert "dropped" in described["error"]
    assert rows(shop.sql("SELECT count(*) FROM some")) == [(200,)]  # still readable


def test_a_toasted_value_a_change_does_not_repeat_is_kept(shop, source):
    dsn = source[0]
    big = "x" * 9000  # stored out of line: an UPDATE that leaves it does not resend it
    write(dsn, f"UPDATE orders SET note = '{big}' WHERE id IN (1, 2, 3)")
    shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    write(dsn, "UPDATE orders SET amount = 7 WHERE id = 1")
    write(dsn, "UPDATE orders SET id = 1002 WHERE id = 2")  # a new key, the value unrepeated
    write(
        dsn,
        "UPDATE orders SET id = 1003 WHERE id = 3",
        "UPDATE orders SET amount = 8 WHERE id = 1003",
    )
    shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    assert local_rows(shop) == source_rows(dsn)
    notes = dict(rows(shop.sql("SELECT id, length(note) FROM orders WHERE id IN (1, 1002, 1003)")))
    assert notes == {1: 9000, 1002: 9000, 1003: 9000}


def test_a_delta_the_stored_rows_do_not_match_names_the_external_table(shop):
    shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    assert conflict_of_a_key_not_held(shop, "orders") == (
        "External table orders does not hold the rows its last follow left (1 to delete, 0"
        " found); nothing was written. CREATE OR REPLACE EXTERNAL TABLE orders … loads it again."
    )

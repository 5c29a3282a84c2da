"""A follow step's lookup of the stored rows of its keys: only the files whose key statistics
leave room for a changed key are read, and on a table too large for one task the rows of those
keys are found by one parallel job and staged, so the rest of the step is a small plan (three
Spark jobs in all). The follow's own tests run again here with that lookup forced, against the
same oracles (the source's rows, CHANGES, the property test's random histories)."""

from __future__ import annotations

import pytest
from tests.external import test_external_property as property_tests
from tests.external import test_postgres_tables as table_tests
from tests.external.conftest import local_rows, source_rows, write

from changelake.external.postgresql import applied
from changelake.spark.jobs import counted_jobs

shop = table_tests.shop


@pytest.fixture
def looked_up(monkeypatch):
    """Every follow step takes the large table's lookup, whatever the table's size."""
    monkeypatch.setattr(applied, "_planned_small", lambda spark, state: False)


@pytest.fixture
def files_read(monkeypatch) -> list[int]:
    """How many files each lookup of a follow step kept (after pruning by statistics)."""
    kept: list[int] = []
    holding = applied._holding

    def counted(state, keys, values):
        found = holding(state, keys, values)
        kept.append(len(found.files))
        return found

    monkeypatch.setattr(applied, "_holding", counted)
    return kept


def test_snapshot_then_follow_equals_the_source(looked_up, shop, source):
    table_tests.test_snapshot_then_follow_equals_the_source(shop, source)


def test_a_toasted_value_a_change_does_not_repeat_is_kept(looked_up, shop, source):
    table_tests.test_a_toasted_value_a_change_does_not_repeat_is_kept(shop, source)


def test_a_delta_the_stored_rows_do_not_match_names_the_external_table(looked_up, shop):
    table_tests.test_a_delta_the_stored_rows_do_not_match_names_the_external_table(shop)


def test_random_source_histories(looked_up, session, source):
    property_tests.test_an_external_table_follows_random_source_histories(session, source, 2)


def _step_jobs(session) -> int:
    with counted_jobs(session.spark, "follow step") as count:
        session.sql("ALTER EXTERNAL TABLE orders REFRESH")
        return count()


@pytest.mark.parametrize("lookup", [False, True], ids=["one plan", "lookup"])
def test_a_step_reads_only_the_files_that_may_hold_its_keys(
    shop, source, files_read, monkeypatch, lookup
):
    if lookup:
        monkeypatch.setattr(applied, "_planned_small", lambda spark, state: False)
    dsn = source[0]
    shop.sql("CREATE EXTERNAL TABLE orders FROM CONNECTION shop TABLE 'public.orders'")
    for low in (1000, 2000, 3000):  # a file per step, keys low..low+9 (the snapshot: 1..200)
        write(
            dsn,
            f"INSERT INTO orders SELECT g, 'EU', g, 'n' FROM generate_series({low}, {low + 9}) g",
        )
        shop.sql("ALTER EXTERNAL TABLE orders REFRESH")
    files_read.clear()
    write(dsn, "UPDATE orders SET amount = amount + 1 WHERE id IN (2003, 2007)")
    jobs = _step_jobs(shop)
    assert files_read == [1]  # the file of keys 2000..2009 only
    assert local_rows(shop) == source_rows(dsn)
    assert jobs <= (3 if lookup else 2)  # the lookup, the new rows, the deletion vectors

    files_read.clear()
    write(  # keys in the snapshot's file and one no file can hold
        dsn,
        "UPDATE orders SET note = 'both' WHERE id IN (5, 3005)",
        "INSERT INTO orders VALUES (9000, 'US', 1, 'new')",
    )
    _step_jobs(shop)
    assert files_read == [2]
    assert local_rows(shop) == source_rows(dsn)
    changes = shop.sql(
        "SELECT id, METADATA$ACTION, METADATA$ISUPDATE FROM orders"
        " CHANGES(INFORMATION => DEFAULT) AT(VERSION => "
        f"{shop.catalog.table('orders').current_version - 1})"
    )
    assert sorted(tuple(r) for r in changes.collect()) == [
        (5, "DELETE", True),
        (5, "INSERT", True),
        (3005, "DELETE", True),
        (3005, "INSERT", True),
        (9000, "INSERT", False),
    ]

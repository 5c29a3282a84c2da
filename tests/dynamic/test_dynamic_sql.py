"""Dynamic tables through SQL: contents equal the query at the data timestamp (with the query's
ROW_IDs), INCREMENTAL and FULL agree, refresh kinds, DAGs, history and refusals."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from functools import reduce

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from tests.conftest import conflict_of_a_key_not_held, rows

from changelake.errors import (
    ChangelakeError,
    DependencyError,
    DynamicTableError,
    InvalidStatementError,
    TableNotFoundError,
)

QUERY = (
    "SELECT c.region, o.day, SUM(o.amount) AS total, COUNT(*) AS n, MAX(o.amount) AS biggest,"
    " AVG(o.qty) AS avg_qty FROM orders o JOIN customers c ON o.cid = c.id"
    " GROUP BY c.region, o.day"
)


def _ts(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ")


@pytest.fixture
def shop(session, clock):
    session.sql("CREATE TABLE orders (id INT, cid INT, day STRING, amount DECIMAL(10,2), qty INT)")
    session.sql("CREATE TABLE customers (id INT, region STRING)")
    clock.advance(seconds=1)
    session.sql(f"CREATE VIEW v AS {QUERY}")
    return session


def _step(session, clock, statement: str) -> None:
    clock.advance(seconds=1)
    session.sql(statement)


def _refresh(session, clock, name: str) -> float:
    clock.advance(seconds=1)
    session.sql(f"ALTER DYNAMIC TABLE {name} REFRESH")
    return session.catalog.find_dynamic_table(name).data_timestamp


def _read_together(frames: dict[str, DataFrame]) -> dict[str, Counter]:
    """Each frame's rows as a multiset, all read in one Spark job (the frames have the same
    columns)."""
    tagged = [df.select(F.lit(name).alias("_frame"), "*") for name, df in frames.items()]
    out: dict[str, Counter] = {name: Counter() for name in frames}
    for r in reduce(DataFrame.unionByName, tagged).collect():
        out[r[0]][tuple(r)[1:]] += 1
    return out


def _with_ids(changes: Counter, columns: list[str]) -> Counter:
    """CHANGES rows without METADATA$ACTION and METADATA$ISUPDATE: values and ROW_IDs."""
    keep = [i for i, c in enumerate(columns) if c not in ("METADATA$ACTION", "METADATA$ISUPDATE")]
    return Counter({tuple(r[i] for i in keep): n for r, n in changes.items()})


def _check_equals_query(session, names: list[str], since: float, changes: dict) -> dict:
    """Each dynamic table of ``names`` equals the view at its data timestamp, as a multiset, and
    its rows carry the view's ROW_IDs (both read as every row's INSERT since an empty start).
    ``changes`` (name: a DataFrame with the columns of a CHANGES read) are read in the same
    Spark job; returns their rows."""
    frames, plain = dict(changes), {}
    for name in names:
        at = _ts(session.catalog.find_dynamic_table(name).data_timestamp)
        frames[f"{name} table"] = session.sql(
            f"SELECT * FROM {name} CHANGES (INFORMATION => DEFAULT) AT (VERSION => 0)"
        )
        frames[f"{name} view"] = session.sql(
            f"SELECT * FROM v CHANGES (INFORMATION => DEFAULT) AT (TIMESTAMP => '{_ts(since)}')"
            f" END (TIMESTAMP => '{at}')"
        )
        plain[f"{name} table"] = session.sql(f"SELECT * FROM {name}")
        plain[f"{name} view"] = session.sql(f"SELECT * FROM v AT (TIMESTAMP => '{at}')")
    columns = frames[f"{names[0]} table"].columns
    read, plain_read = _read_together(frames), _read_together(plain)
    for name in names:
        table, view = (_with_ids(read[f"{name} {k}"], columns) for k in ("table", "view"))
        assert table == view, name
        assert plain_read[f"{name} table"] == plain_read[f"{name} view"], name
    return {name: read[name] for name in changes}


HISTORY = [
    "INSERT INTO customers VALUES (1, 'eu'), (2, 'us'), (3, NULL)",
    "INSERT INTO orders VALUES (1, 1, 'mon', 10.00, 1), (2, 2, 'mon', 20.00, 2),"
    " (3, 1, 'tue', 5.50, NULL), (4, 3, 'mon', 7.25, 4)",
    "UPDATE orders SET amount = 12.00 WHERE id = 1",
    "DELETE FROM orders WHERE id = 2",
    "UPDATE customers SET region = 'us' WHERE id = 1",
    "INSERT INTO orders VALUES (5, 2, 'wed', 99.99, 3), (6, 9, 'wed', 1.00, 1)",
    "MERGE INTO orders t USING (SELECT 3 AS id, 1.25 AS amount UNION ALL SELECT 7, 3.00) s"
    " ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = s.amount"
    " WHEN NOT MATCHED THEN INSERT (id, cid, day, amount, qty) VALUES (s.id, 2, 'tue', s.amount, 2)",
    "DELETE FROM customers WHERE id = 3",
]


def test_incremental_and_full_follow_the_query_with_its_row_ids(shop, clock):
    session = shop
    start = session.catalog.snapshot().committed_at
    clock.advance(seconds=1)
    session.sql(f"CREATE DYNAMIC TABLE inc TARGET_LAG = '1 minute' AS {QUERY}")
    session.sql(
        f"CREATE DYNAMIC TABLE full_ TARGET_LAG = '1 minute' REFRESH_MODE = FULL AS {QUERY}"
    )
    session.sql("CREATE STREAM s ON DYNAMIC TABLE inc")
    assert session.catalog.find_dynamic_table("inc").definition.effective_mode == "INCREMENTAL"
    assert session.catalog.find_dynamic_table("full_").definition.effective_mode == "FULL"
    for statement in HISTORY:
        _step(session, clock, statement)
        before = {n: session.catalog.table(n).current_version for n in ("inc", "full_")}
        _refresh(session, clock, "inc")
        _refresh(session, clock, "full_")
        # the same changes between the two refreshes, ROW_IDs and update pairs included; a
        # stream on the dynamic table sees each refresh's delta, once
        since = {
            n: session.sql(
                f"SELECT * FROM {n} CHANGES (INFORMATION => DEFAULT) AT (VERSION => {v})"
            )
            for n, v in before.items()
        }
        changes = _check_equals_query(
            session, ["inc", "full_"], start, {**since, "s": session.sql("SELECT * FROM s")}
        )
        assert changes["inc"] == changes["full_"]
        assert changes["s"] == changes["inc"]
        session.sql("CREATE OR REPLACE TABLE drained AS SELECT region FROM s")
        assert rows(session.sql("SELECT COUNT(*) FROM s")) == [(0,)]
    history = rows(
        session.sql(
            "SELECT refresh_action, COUNT(*) FROM TABLE(DYNAMIC_TABLE_REFRESH_HISTORY("
            "NAME => 'inc')) GROUP BY refresh_action"
        )
    )
    assert dict(history)["INCREMENTAL"] == len(HISTORY)


def test_no_data_refresh_runs_no_spark_job_and_moves_the_data_timestamp(shop, clock):
    session = shop
    _step(session, clock, "INSERT INTO customers VALUES (1, 'eu')")
    _step(session, clock, f"CREATE DYNAMIC TABLE d TARGET_LAG = '1 minute' AS {QUERY}")
    first = session.catalog.find_dynamic_table("d").data_timestamp
    version = session.catalog.table("d").current_version
    second = _refresh(session, clock, "d")
    assert second > first
    last = session.catalog.refresh_history(session.catalog.table("d").table_id, limit=1)[0]
    assert (last.record.action, last.record.state, last.record.spark_jobs) == (
        "NO_DATA",
        "SUCCEEDED",
        0,
    )
    assert session.catalog.table("d").current_version == version


def test_a_dag_refreshes_upstreams_first_at_one_data_timestamp(shop, clock):
    session = shop
    _step(session, clock, HISTORY[0])
    _step(session, clock, HISTORY[1])
    _step(session, clock, f"CREATE DYNAMIC TABLE totals TARGET_LAG = DOWNSTREAM AS {QUERY}")
    session.sql(
        "CREATE DYNAMIC TABLE big (region, day, total) TARGET_LAG = '1 minute' AS"
        " SELECT region, day, total FROM totals WHERE total > 10"
    )
    assert Counter(rows(session.sql("SELECT * FROM big"))) == Counter(
        rows(session.sql("SELECT region, day, total FROM totals WHERE total > 10"))
    )
    _step(session, clock, "UPDATE orders SET amount = amount + 5")
    at = _refresh(session, clock, "big")
    assert session.catalog.find_dynamic_table("totals").data_timestamp == at
    big = Counter(rows(session.sql("SELECT * FROM big")))
    assert big == Counter(
        rows(
            session.sql(
                f"SELECT region, day, total FROM v AT (TIMESTAMP => '{_ts(at)}') WHERE total > 10"
            )
        )
    )
    triggers = {
        (r.table_id, r.record.trigger, r.record.data_timestamp)
        for r in session.catalog.refresh_history(limit=2)
    }
    assert {t for _, t, _ in triggers} == {"MANUAL", "DOWNSTREAM"}
    assert {d for _, _, d in triggers} == {at}


def test_a_query_without_differentiation_is_refreshed_full_and_says_why(shop, clock):
    session = shop
    _step(session, clock, HISTORY[0])
    _step(session, clock, HISTORY[1])
    top = "SELECT id, amount FROM orders ORDER BY amount DESC LIMIT 2"
    with pytest.raises(InvalidStatementError, match="LIMIT"):
        session.sql(
            f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 minute' REFRESH_MODE = INCREMENTAL AS {top}"
        )
    session.sql(f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 minute' AS {top}")
    dyn = session.catalog.find_dynamic_table("t")
    assert dyn.definition.effective_mode == "FULL"
    assert "LIMIT" in dyn.definition.mode_reason
    assert sorted(rows(session.sql("SELECT * FROM t"))) == sorted(rows(session.sql(top)))
    _step(session, clock, "UPDATE orders SET amount = 100 WHERE id = 3")
    _refresh(session, clock, "t")
    assert sorted(rows(session.sql("SELECT * FROM t"))) == sorted(rows(session.sql(top)))
    # rows that stayed keep their identity: the change is one delete and one insert
    changes = rows(
        session.sql(
            "SELECT id, METADATA$ACTION FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 0)"
        )
    )
    assert sorted(changes) == [(1, "DELETE"), (3, "INSERT")]


def test_replacing_a_view_it_reads_reinitializes(shop, clock):
    session = shop
    _step(session, clock, HISTORY[0])
    _step(session, clock, HISTORY[1])
    _step(session, clock, "CREATE VIEW eu AS SELECT * FROM customers WHERE region = 'eu'")
    session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '1 minute' AS SELECT id FROM eu")
    _step(
        session, clock, "CREATE OR REPLACE VIEW eu AS SELECT * FROM customers WHERE region = 'us'"
    )
    _refresh(session, clock, "d")
    assert rows(session.sql("SELECT * FROM d")) == [(2,)]
    last = session.catalog.refresh_history(limit=1)[0].record
    assert last.action == "REINITIALIZE"
    _refresh(session, clock, "d")
    assert session.catalog.refresh_history(limit=1)[0].record.action == "NO_DATA"


def test_a_failed_refresh_is_in_the_history_and_changes_nothing(shop, clock):
    session = shop
    _step(session, clock, "INSERT INTO orders VALUES (1, 1, 'mon', 10.00, 1)")
    session.sql(
        "CREATE DYNAMIC TABLE r TARGET_LAG = '1 minute' AS SELECT id, 100 DIV qty AS per FROM orders"
    )
    version = session.catalog.table("r").current_version
    _step(session, clock, "INSERT INTO orders VALUES (2, 1, 'mon', 10.00, 0)")
    clock.advance(seconds=1)
    with pytest.raises(ChangelakeError, match="(?i)divi"):
        session.sql("ALTER DYNAMIC TABLE r REFRESH")
    assert session.catalog.table("r").current_version == version
    last = session.catalog.refresh_history(limit=1)[0]
    assert last.record.state == "FAILED" and "divi" in last.record.error.lower()
    assert session.catalog.find_dynamic_table("r").failures == 1


def test_user_statements_cannot_change_a_dynamic_table_or_break_what_it_reads(shop, clock):
    session = shop
    _step(session, clock, "CREATE TABLE people (id INT, region STRING)")
    _step(session, clock, "INSERT INTO people VALUES (1, 'eu')")
    session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '1 minute' AS SELECT id, region FROM people")
    for statement in (
        "INSERT INTO d VALUES (9, 'x')",
        "UPDATE d SET region = 'x'",
        "DELETE FROM d",
        "TRUNCATE TABLE d",
        "MERGE INTO d USING people c ON d.id = c.id WHEN MATCHED THEN DELETE",
        "ALTER TABLE d ADD COLUMN z INT",
        "DROP TABLE d",
    ):
        with pytest.raises(DynamicTableError, match="dynamic table"):
            session.sql(statement)
    for statement in (
        "DROP TABLE people",
        "ALTER TABLE people RENAME TO p2",
        "ALTER TABLE people DROP COLUMN region",
        "ALTER TABLE people RENAME COLUMN region TO area",
    ):
        with pytest.raises(DependencyError, match="dynamic table.*d"):
            session.sql(statement)
    with pytest.raises(TableNotFoundError, match="not a dynamic table"):
        session.sql("DROP DYNAMIC TABLE people")
    session.sql("ALTER TABLE people ADD COLUMN age INT")  # compatible: the query still runs
    session.sql("CREATE VIEW over_d AS SELECT * FROM d")  # reading it is fine
    session.sql("DROP VIEW over_d")
    session.sql("DROP DYNAMIC TABLE d")
    session.sql("DROP TABLE people")
    assert session.catalog.find_table("d") is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("", "TARGET_LAG is required"),
        ("TARGET_LAG = 'soon'", "is not a lag"),
        ("TARGET_LAG = '1 minute' REFRESH_MODE = SOMETIMES", "REFRESH_MODE"),
        ("TARGET_LAG = '1 minute' TARGET_LAG = '2 minutes'", "given twice"),
    ],
)
def test_bad_options_are_refused(shop, options, message):
    with pytest.raises(InvalidStatementError, match=message):
        shop.sql(f"CREATE DYNAMIC TABLE d {options} AS SELECT * FROM customers")
    assert shop.catalog.find_table("d") is None


def test_show_and_describe(shop, clock):
    session = shop
    _step(session, clock, HISTORY[0])
    session.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '2 hours' AS SELECT id FROM customers")
    shown = session.sql("SHOW DYNAMIC TABLES").collect()
    assert [(r.name, r.target_lag, r.effective_mode, r.scheduling_state) for r in shown] == [
        ("d", "2 hours", "INCREMENTAL", "ACTIVE")
    ]
    session.sql("ALTER DYNAMIC TABLE d SUSPEND")
    session.sql("ALTER DYNAMIC TABLE d SET TARGET_LAG = DOWNSTREAM")
    r = session.sql("SHOW DYNAMIC TABLES").collect()[0]
    assert (r.scheduling_state, r.target_lag) == ("SUSPENDED", "DOWNSTREAM")
    described = dict(rows(session.sql("DESCRIBE DYNAMIC TABLE d")))
    assert described["column id"] == "INT"
    assert "_cl_row_key" not in " ".join(described)
    assert [c for c in session.sql("SELECT * FROM d").columns] == ["id"]


def test_explain_and_the_python_api(shop, clock):
    session = shop
    _step(session, clock, HISTORY[0])
    _step(session, clock, HISTORY[1])
    session.sql(f"CREATE DYNAMIC TABLE totals TARGET_LAG = DOWNSTREAM AS {QUERY}")
    session.sql("CREATE DYNAMIC TABLE big TARGET_LAG = '1 minute' AS SELECT * FROM totals")
    _step(session, clock, "UPDATE orders SET amount = 1 WHERE id = 1")
    clock.advance(seconds=1)
    plan = [r.plan for r in session.sql("EXPLAIN ALTER DYNAMIC TABLE big REFRESH").collect()]
    text = "\n".join(plan)
    assert "REFRESH dynamic table totals: INCREMENTAL" in text
    assert "REFRESH dynamic table big: NO_DATA" in text  # totals has not moved yet
    assert "derivative:" in text
    versions = session.catalog.table("totals").current_version
    assert session.catalog.table("totals").current_version == versions  # EXPLAIN ran nothing
    done = session.refresh("big").collect()[0]
    assert done.operation == "REFRESH" and done.object == "big"
    shown = session.dynamic_tables().collect()
    assert sorted(r.name for r in shown) == ["big", "totals"]
    history = session.dynamic_tables("totals", history=True).collect()
    # created; refreshed at big's creation (nothing changed), then for big's refresh
    assert [r.refresh_action for r in history] == ["INCREMENTAL", "NO_DATA", "FULL"]
    assert [r.refresh_trigger for r in history] == ["DOWNSTREAM", "DOWNSTREAM", "CREATION"]


def test_a_refresh_belongs_to_the_statement_that_ran_it_upstreams_included(shop, clock):
    session = shop
    _step(session, clock, HISTORY[0])
    _step(session, clock, HISTORY[1])
    session.sql(f"CREATE DYNAMIC TABLE totals TARGET_LAG = DOWNSTREAM AS {QUERY}")
    session.sql(
        "CREATE DYNAMIC TABLE big (region, day, total) TARGET_LAG = '1 minute' AS"
        " SELECT region, day, total FROM totals WHERE total > 10"
    )
    old = {n: rows(session.sql(f"SELECT * FROM {n}")) for n in ("totals", "big")}
    _step(session, clock, "UPDATE orders SET amount = amount + 100 WHERE id = 4")
    clock.advance(seconds=1)
    sid = session.sql("ALTER DYNAMIC TABLE big REFRESH").first().statement_id
    new = {n: rows(session.sql(f"SELECT * FROM {n}")) for n in ("totals", "big")}
    assert new["big"] != old["big"] and new["totals"] != old["totals"]
    for name in ("totals", "big"):  # big's refresh, and totals' cascaded by it
        assert rows(session.sql(f"SELECT * FROM {name} AT (STATEMENT => '{sid}')")) == new[name]
        before = session.sql(f"SELECT * FROM {name} BEFORE (STATEMENT => '{sid}')")
        assert rows(before) == old[name]
    # a table the statement did not write: as it was when the statement ended
    customers = rows(session.sql("SELECT * FROM customers"))
    assert rows(session.sql(f"SELECT * FROM customers AT (STATEMENT => '{sid}')")) == customers


def test_a_delta_the_stored_rows_do_not_match_names_the_dynamic_table(shop, clock):
    _step(shop, clock, HISTORY[0])
    shop.sql("CREATE DYNAMIC TABLE d TARGET_LAG = '1 minute' AS SELECT id, region FROM customers")
    assert conflict_of_a_key_not_held(shop, "d") == (
        "Dynamic table d does not hold the rows its last refresh left (1 to delete, 0 found);"
        " nothing was written. ALTER DYNAMIC TABLE d REFRESH again reinitializes it."
    )

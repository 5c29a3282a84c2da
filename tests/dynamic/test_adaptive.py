"""Adaptive refreshes: an AUTO dynamic table's refresh applies its query's changes, or recomputes
(FULL) when the tables it reads changed by more than ``ADAPTIVE_SHARE`` of their rows (and by at
least ``ADAPTIVE_LEAST_ROWS``), or, keeping a MIN or MAX, when a change past that floor deleted
rows; the measure is the refresh history's reason. Either way the table equals its query and its
own changes are the minimum delta, updates keeping their rows' identity; REFRESH_MODE =
INCREMENTAL keeps applying the changes."""

from __future__ import annotations

from collections import Counter

import pytest
import sqlalchemy as sa
from conftest import older_catalog

from changelake.catalog.tables import SCHEMA_VERSION
from changelake.dynamic.adaptive import ADAPTIVE_LEAST_ROWS, ADAPTIVE_SHARE

ROWS = 250_000
GROUPED = "SELECT g, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi FROM big GROUP BY g"
SUMMED = "SELECT g, COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a FROM big GROUP BY g"
JOINED = "SELECT b.k, b.v, d.name FROM big b JOIN dim d ON b.g = d.g WHERE b.k % 5 <> 1"


@pytest.fixture
def tables(session):
    session.sql("CREATE TABLE big (k BIGINT, g INT, v BIGINT)")
    session.sql(f"INSERT INTO big SELECT id, CAST(id % 97 AS INT), id FROM range({ROWS})")
    session.sql("CREATE TABLE dim (g INT, name STRING)")
    session.sql("INSERT INTO dim SELECT CAST(id AS INT), CONCAT('g', id) FROM range(97)")
    return session


def _rows(session, sql: str) -> Counter:
    return Counter(tuple(r) for r in session.sql(sql).collect())


def _last(session, name: str):
    (row,) = session.sql(
        "SELECT refresh_action, refresh_action_reason FROM TABLE(DYNAMIC_TABLE_REFRESH_HISTORY("
        f"NAME => '{name}')) ORDER BY refresh_id DESC LIMIT 1"
    ).collect()
    return row.refresh_action, row.refresh_action_reason


def _refreshed_as_query(session, name: str, query: str):
    """Refresh ``name``: it equals its query, and its changes over the refresh are the minimum
    delta from its rows before to its rows after, an update pair per changed key."""
    before = _rows(session, f"SELECT * FROM {name}")
    version = session.catalog.table(name).current_version
    session.sql(f"ALTER DYNAMIC TABLE {name} REFRESH")
    after = _rows(session, f"SELECT * FROM {name}")
    assert after == _rows(session, query)
    changes = session.sql(
        f"SELECT * FROM {name} CHANGES (INFORMATION => DEFAULT) AT (VERSION => {version})"
    ).collect()
    shown = [c for c in session.table(name).columns]
    deleted = Counter(
        tuple(r[c] for c in shown) for r in changes if r["METADATA$ACTION"] == "DELETE"
    )
    inserted = Counter(
        tuple(r[c] for c in shown) for r in changes if r["METADATA$ACTION"] == "INSERT"
    )
    assert deleted == before - after and inserted == after - before
    by_id = Counter(r["METADATA$ROW_ID"] for r in changes)
    updates = [r for r in changes if r["METADATA$ISUPDATE"]]
    assert all(by_id[r["METADATA$ROW_ID"]] == 2 for r in updates)
    return _last(session, name), changes


@pytest.mark.parametrize(
    "query, dim_rows", [(SUMMED, 0), (JOINED, 97)], ids=["group_by_sum", "join"]
)
def test_a_mass_update_recomputes_and_a_small_one_applies_the_changes(tables, query, dim_rows):
    s = tables
    s.sql(f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 hour' AS {query}")

    s.sql("UPDATE big SET v = v + 1 WHERE k % 100 = 7")  # 2,500 rows: incremental
    (action, reason), _ = _refreshed_as_query(s, "t", query)
    assert action == "INCREMENTAL" and "5,000 rows" in reason

    s.sql("UPDATE big SET v = v + 3 WHERE k % 4 <> 0")  # 187,500 rows: 375,000 changed
    (action, reason), changes = _refreshed_as_query(s, "t", query)
    assert action == "FULL", reason
    assert f"375,000 rows changed of the {ROWS + dim_rows:,} its query reads" in reason
    assert f"over {ADAPTIVE_SHARE:.0%}: recomputing" in reason
    assert any(r["METADATA$ISUPDATE"] for r in changes)  # groups and rows kept their identity

    s.sql("DELETE FROM big WHERE k < 120000")  # most of what the query reads now
    (action, reason), _ = _refreshed_as_query(s, "t", query)
    assert action == "FULL" and f"120,000 rows changed of the {130_000 + dim_rows:,}" in reason


def test_the_share_of_the_rows_decides_over_several_versions(tables):
    s = tables
    s.sql(f"INSERT INTO big SELECT id, CAST(id % 97 AS INT), id FROM range({ROWS}, 1200000)")
    s.sql(f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 hour' AS {SUMMED}")
    # three versions: 200,000 + 100,000 + 20 changed rows of 1,100,000 (27%)
    s.sql("UPDATE big SET v = v + 1 WHERE k < 100000")
    s.sql("DELETE FROM big WHERE k >= 1100000")
    s.sql("UPDATE big SET v = v - 1 WHERE k < 10")
    (action, reason), _ = _refreshed_as_query(s, "t", SUMMED)
    assert action == "FULL" and "300,020 rows changed of the 1,100,000" in reason
    s.sql("UPDATE big SET v = v + 1 WHERE k < 50000")  # 100,000 of 1,100,000: 9%
    (action, reason), _ = _refreshed_as_query(s, "t", SUMMED)
    assert action == "INCREMENTAL" and "100,000 rows changed of the 1,100,000" in reason
    assert f"under {ADAPTIVE_SHARE:.0%}: the changes cost less" in reason
    assert 100_000 >= ADAPTIVE_LEAST_ROWS and 100_000 < ADAPTIVE_SHARE * 1_100_000


def test_a_min_or_max_recomputes_past_the_floor_when_rows_were_deleted(tables):
    s = tables
    s.sql(f"INSERT INTO big SELECT id, CAST(id % 97 AS INT), id FROM range({ROWS}, 1200000)")
    s.sql(f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 hour' AS {GROUPED}")
    s.sql(f"CREATE DYNAMIC TABLE u TARGET_LAG = '1 hour' AS {SUMMED}")
    s.sql("UPDATE big SET v = v + 1 WHERE k < 60000")  # 120,000 changed of 1,200,000: 10%
    (action, reason), _ = _refreshed_as_query(s, "t", GROUPED)
    assert action == "FULL", reason
    assert "120,000 rows changed, 60,000 of them deleted or updated" in reason
    assert "keeps a MIN or MAX" in reason
    (action, reason), _ = _refreshed_as_query(s, "u", SUMMED)  # the share alone: not over it
    assert action == "INCREMENTAL" and "120,000 rows changed of the 1,200,000" in reason
    # inserts only: no group loses its extreme, the share decides (120,000 of 1,320,000)
    s.sql("INSERT INTO big SELECT id, CAST(id % 97 AS INT), id FROM range(1200000, 1320000)")
    (action, reason), _ = _refreshed_as_query(s, "t", GROUPED)
    assert action == "INCREMENTAL" and "120,000 rows changed of the 1,320,000" in reason


def test_refresh_mode_incremental_keeps_applying_the_changes(tables):
    s = tables
    s.sql(f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 hour' REFRESH_MODE = INCREMENTAL AS {GROUPED}")
    s.sql("UPDATE big SET v = v + 3 WHERE k % 4 <> 0")
    (action, reason), _ = _refreshed_as_query(s, "t", GROUPED)
    assert action == "INCREMENTAL" and "rows changed" not in reason


def test_an_older_catalog_gains_the_reason_of_its_refreshes(tables, clock):
    s = tables
    s.sql(f"CREATE DYNAMIC TABLE t TARGET_LAG = '1 hour' AS {GROUPED}")
    drop = "ALTER TABLE cl_dt_refreshes DROP COLUMN reason"  # version 10 had no reason column
    with older_catalog(s, clock, 10, drop) as again:
        assert _last(again, "t") == ("FULL", None)  # recorded before: no reason known
        with again.catalog.engine.connect() as conn:
            version = conn.execute(
                sa.text("SELECT value FROM cl_meta WHERE key = 'schema_version'")
            ).scalar()
        assert version == str(SCHEMA_VERSION)
        again.sql("UPDATE big SET v = v + 1 WHERE k = 3")
        again.sql("ALTER DYNAMIC TABLE t REFRESH")
        assert _last(again, "t") == (
            "INCREMENTAL",
            "2 rows changed since the last refresh",
        )

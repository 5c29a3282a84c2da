"""A refresh whose delta is known to insert only (``plan.views.inserts_only``): a view that only
gains rows, over versions that only added rows, is refreshed by its APPEND_ONLY changes and
reads none of its stored rows; any other refresh pairs its events with the stored rows."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import state_of

from changelake.dml import keyed
from changelake.schema import ROW_KEY
from changelake.storage.snapshot import state_relation

MONOTONE = (
    "SELECT f.id, f.v, d.name FROM fact f JOIN dim d ON f.d = d.d WHERE f.v >= 0"
    " UNION ALL SELECT id, v, 'big' FROM fact WHERE v > 5"
)
OUTER = "SELECT f.id, f.v, d.name FROM fact f LEFT JOIN dim d ON f.d = d.d"


@pytest.fixture
def stored_reads(monkeypatch) -> list[str]:
    """The tables whose stored rows a refresh's delta was paired with, in order."""
    reads: list[str] = []
    addressed = keyed._addressed

    def recorded(spark, warehouse, target, delta, **kwargs):
        reads.append(target.info.name)
        return addressed(spark, warehouse, target, delta, **kwargs)

    monkeypatch.setattr(keyed, "_addressed", recorded)
    return reads


def _rows(session, sql: str) -> Counter:
    return Counter(tuple(r) for r in session.sql(sql).collect())


def _refreshed(session, reads: list[str]) -> set[str]:
    """Refresh both tables; each must equal its query. The tables whose stored rows were read."""
    reads.clear()
    for name, query in (("m", MONOTONE), ("o", OUTER)):
        session.sql(f"ALTER DYNAMIC TABLE {name} REFRESH")
        assert _rows(session, f"SELECT * FROM {name}") == _rows(session, query), name
    return set(reads)


def test_a_monotone_view_over_inserts_reads_no_stored_row(session, stored_reads):
    session.sql("CREATE TABLE fact (id BIGINT, d INT, v INT)")
    session.sql("CREATE TABLE dim (d INT, name STRING)")
    session.sql("INSERT INTO dim VALUES (1, 'one'), (2, 'two')")
    session.sql("INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), id % 9 FROM range(0, 60)")
    session.sql(f"CREATE DYNAMIC TABLE m TARGET_LAG = '1 hour' AS {MONOTONE}")
    session.sql(f"CREATE DYNAMIC TABLE o TARGET_LAG = '1 hour' AS {OUTER}")

    had = _rows(session, "SELECT * FROM m").total()
    # inserts on both sides of the join, over two commits: nothing of m is read
    session.sql("INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), id % 9 FROM range(60, 90)")
    session.sql("INSERT INTO dim VALUES (3, 'three')")
    assert _refreshed(session, stored_reads) == {"o"}
    m = session.catalog.table("m").table_id
    last = session.catalog.refresh_history(m, limit=1)[0].record
    assert (last.rows_inserted, last.rows_updated, last.rows_deleted) == (
        _rows(session, MONOTONE).total() - had,
        0,
        0,
    )
    assert last.spark_jobs == 1  # the write of the new rows: no DV, nothing stored read

    # an update, a delete, a row inserted then deleted, a row inserted then updated, each in
    # an interval of its own: their deltas are paired with the stored rows
    for changes in (
        ["UPDATE fact SET v = v + 1 WHERE id % 7 = 0"],
        ["DELETE FROM fact WHERE id % 11 = 0"],
        ["INSERT INTO fact VALUES (500, 1, 8)", "DELETE FROM fact WHERE id = 500"],
        ["INSERT INTO fact VALUES (501, 2, 8)", "UPDATE fact SET v = 1 WHERE id = 501"],
        ["UPDATE dim SET name = 'TWO' WHERE d = 2"],
    ):
        for statement in changes:
            session.sql(statement)
        assert _refreshed(session, stored_reads) == {"m", "o"}, changes

    # inserts again: m reads nothing of its own; its changes are the new rows' INSERTs (the
    # rows it had keep their identities), each under a key of its own
    version = session.catalog.table("m").current_version
    session.sql("INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), 7 FROM range(600, 620)")
    assert _refreshed(session, stored_reads) == {"o"}
    changes = session.sql(
        f"SELECT id, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID FROM m"
        f" CHANGES (INFORMATION => DEFAULT) AT (VERSION => {version})"
    ).collect()
    expected = _rows(session, f"SELECT id FROM ({MONOTONE}) WHERE id >= 600")
    assert Counter((r[0],) for r in changes) == expected and expected.total() == 40
    assert {(r[1], r[2]) for r in changes} == {("INSERT", False)}
    state = state_of(session, session.catalog.table("m"))
    stored = state_relation(session.spark, session.warehouse, state, identity=True)
    keys = [r[0] for r in stored.frame(session.spark).select(ROW_KEY).collect()]
    assert len(keys) == len(set(keys)) == _rows(session, MONOTONE).total()

"""The lookup of a large dynamic table's stored rows (``dml.keyed``): a delta's keys are matched
to the stored rows by the keys' hashes, written beside the row key in every data file
(``schema.KEY_HASHES``), or by the key strings where some file was written without them."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from conftest import spark_settings, state_of

from changelake.dml import keyed
from changelake.schema import KEY_HASHES, ROW_KEY
from changelake.storage import snapshot, writer

QUERY = "SELECT f.id, f.v, d.name FROM fact f JOIN dim d ON f.d = d.d"
HASHES = [name for name, _, _ in KEY_HASHES]


@pytest.fixture
def forced(monkeypatch):
    """Every table taken for one too large for one task; the lookups' reads recorded (whether
    they read the key hashes)."""
    reads: list[bool] = []
    relation = snapshot.state_relation

    def recorded(*args, **kwargs):
        if kwargs.get("identity"):
            reads.append(kwargs.get("key_hashes", False))
        return relation(*args, **kwargs)

    monkeypatch.setattr(keyed, "small_input", lambda target: False)
    monkeypatch.setattr(keyed, "state_relation", recorded)
    return reads


def _setup(session) -> None:
    session.sql("CREATE TABLE fact (id BIGINT, d INT, v INT)")
    session.sql("CREATE TABLE dim (d INT, name STRING)")
    session.sql("INSERT INTO dim VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    session.sql("INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), 0 FROM range(0, 300)")
    session.sql(f"CREATE DYNAMIC TABLE j TARGET_LAG = '1 hour' AS {QUERY}")


def _changed(session) -> None:
    """Updates, deletes and inserts on both sides of the join, refreshed after each."""
    for statement in (
        "UPDATE fact SET v = v + 1 WHERE id % 7 = 0",
        "DELETE FROM fact WHERE id % 11 = 0",
        "INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), 5 FROM range(300, 320)",
        "UPDATE dim SET name = 'TWO' WHERE d = 2",
        "UPDATE fact SET d = 3 WHERE id % 13 = 1",
    ):
        session.sql(statement)
        session.sql("ALTER DYNAMIC TABLE j REFRESH")
        assert _rows(session, "SELECT id, v, name FROM j") == _rows(session, QUERY)


def _rows(session, sql: str) -> Counter:
    return Counter(tuple(r) for r in session.sql(sql).collect())


def _stored_hashes(session, warehouse) -> list[tuple]:
    """(row key, its hashes as written) of every stored row of ``j``, read with PyArrow."""
    state = state_of(session, session.catalog.table("j"))
    key = state.schema.row_key.physical
    found = []
    for live in state.files:
        table = pq.read_table(str(warehouse / live.file.path))
        if not set(HASHES) <= set(table.column_names):
            return []
        found += zip(*(table.column(c).to_pylist() for c in [key, *HASHES]), strict=True)
    return found


def test_a_lookup_matches_stored_rows_by_the_hashes_written_beside_their_keys(
    session, tmp_path, forced
):
    _setup(session)
    _changed(session)
    assert forced and all(forced)  # every refresh's lookup read the hashes, not the key strings
    stored = _stored_hashes(session, tmp_path / "wh")
    assert len(stored) > 300
    # the hashes are Spark's of the key: the writer's and the lookup's expressions agree
    keys = session.spark.createDataFrame([(k,) for k, _, _ in stored], [ROW_KEY])
    expected = {
        tuple(r)
        for r in keys.selectExpr(ROW_KEY, *[f"{f}({ROW_KEY})" for _, _, f in KEY_HASHES]).collect()
    }
    assert set(stored) == expected


def test_files_written_without_key_hashes_are_looked_up_by_their_key_strings(
    session, tmp_path, forced, monkeypatch
):
    """A table whose files were written before key hashes were (simulated by a writer without
    them) is looked up by its key strings as long as any such file is live, and stays right."""
    with monkeypatch.context() as old_writer:
        old_writer.setattr(writer, "KEY_HASHES", ())
        old_writer.setattr(writer, "key_hashes", lambda key: [])
        _setup(session)
    assert _stored_hashes(session, tmp_path / "wh") == []
    _changed(session)
    assert forced and not any(forced)
    # compaction rewrites every (small) file, with the hashes: lookups use them again
    session.sql("OPTIMIZE j")
    assert _stored_hashes(session, tmp_path / "wh")
    forced.clear()
    session.sql("UPDATE fact SET v = v + 10 WHERE id % 5 = 0")
    session.sql("ALTER DYNAMIC TABLE j REFRESH")
    assert forced == [True]
    assert _rows(session, "SELECT id, v, name FROM j") == _rows(session, QUERY)


def _bytes(session, name: str) -> int:
    return sum(f.file.size_bytes for f in state_of(session, session.catalog.table(name)).files)


def test_a_refresh_that_looks_up_a_large_tables_rows_runs_four_jobs(session, forced):
    """The delta (a small plan) and its keys, the stored rows found, the write of the new rows,
    the DV: the lookup's plan is large, and adaptive execution would add a job per broadcast
    and per stage."""
    session.sql("CREATE TABLE fact (id BIGINT, d INT, v INT)")
    session.sql("CREATE TABLE dim (d INT, name STRING)")
    session.sql("INSERT INTO dim VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    session.sql("INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), 0 FROM range(0, 20000)")
    session.sql(f"CREATE DYNAMIC TABLE j TARGET_LAG = '1 hour' AS {QUERY}")
    # the stored rows (their keys) are over the small-plan size, the delta's inputs under it
    small = _bytes(session, "j") - 1
    assert _bytes(session, "fact") + _bytes(session, "dim") < small
    with spark_settings(session.spark, {"spark.changelake.smallInputBytes": str(small)}):
        session.sql("UPDATE fact SET v = v + 1 WHERE id % 7 = 0")
        session.sql("ALTER DYNAMIC TABLE j REFRESH")
    table_id = session.catalog.table("j").table_id
    assert session.catalog.refresh_history(table_id, limit=1)[0].record.spark_jobs <= 4
    assert forced == [True]
    assert _rows(session, "SELECT id, v, name FROM j") == _rows(session, QUERY)

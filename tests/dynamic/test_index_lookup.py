"""Lookups by the key → address index (``storage.index``): a write large enough indexes its
files, a refresh finds the stored rows of its keys by reading the index pages that may hold
them and decodes only those rows, and stays right as the index ages (rows deleted and updated
since, files compacted away, files written without an index, too many keys for it)."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from conftest import older_catalog, rows_read, state_of

from changelake.schema import KEY_HASHES
from changelake.storage import index

QUERY = "SELECT f.id, f.v, d.name FROM fact f JOIN dim d ON f.d = d.d"
ROWS = 6000


@pytest.fixture
def indexing(monkeypatch):
    """Writes of 1,000 rows or more are indexed, and looked up by index whatever the keys (the
    tests' tables are small)."""
    monkeypatch.setattr(index, "INDEX_MIN_ROWS", 1000)
    monkeypatch.setattr(index, "ROWS_PER_PAGE_READ", 0)


def _setup(session) -> None:
    session.sql("CREATE TABLE fact (id BIGINT, d INT, v INT)")
    session.sql("CREATE TABLE dim (d INT, name STRING)")
    session.sql("INSERT INTO dim VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    session.sql(f"INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), 0 FROM range(0, {ROWS})")
    session.sql(f"CREATE DYNAMIC TABLE j TARGET_LAG = '1 hour' AS {QUERY}")


def _rows(session, sql: str) -> Counter:
    return Counter(tuple(r) for r in session.sql(sql).collect())


def _right(session) -> bool:
    return _rows(session, "SELECT id, v, name FROM j") == _rows(session, QUERY)


def _files(session, name: str = "j"):
    return state_of(session, session.catalog.table(name)).files


def test_a_large_write_indexes_its_files_sorted_by_key_hash_in_small_pages(
    session, tmp_path, indexing
):
    _setup(session)
    (live,) = _files(session)
    assert live.file.index is not None and live.file.index.startswith("index/")
    table = pq.read_table(str(tmp_path / "wh" / live.file.index))
    assert table.num_rows == ROWS
    hashes = table.column(KEY_HASHES[0][0]).to_pylist()
    assert hashes == sorted(hashes)
    assert set(table.column(index.DATA).to_pylist()) == {live.file.path.rsplit("/", 1)[1]}
    assert sorted(table.column(index.AT).to_pylist()) == list(range(ROWS))
    meta = pq.ParquetFile(str(tmp_path / "wh" / live.file.index)).metadata.row_group(0)
    assert meta.column(0).has_column_index and meta.column(0).has_offset_index
    # a small write leaves its files without one
    session.sql("UPDATE fact SET v = 1 WHERE id = 5")
    session.sql("ALTER DYNAMIC TABLE j REFRESH")
    assert [f.file.index is None for f in _files(session)] == [False, True]


def test_a_refresh_reads_the_index_pages_of_its_keys_not_the_tables_keys(session, indexing):
    _setup(session)
    session.sql("UPDATE fact SET v = v + 1 WHERE id % 500 = 0")  # 12 rows at spread keys

    read = rows_read(session.spark, lambda: session.sql("ALTER DYNAMIC TABLE j REFRESH"))
    assert _right(session)
    # the fact's 12 changed rows (and their before-images), the dimension, and the index
    # pages of 12 keys: nothing near the table's 6,000 key hashes
    assert read <= 12 * 4 + 3 + 12 * index.PAGE_ROWS * 2, read
    without = rows_read(session.spark, lambda: None)
    assert without == 0


def test_explain_says_how_a_refresh_finds_its_stored_rows(session, indexing):
    _setup(session)
    session.sql("UPDATE fact SET v = v + 1 WHERE id = 3")

    def explained() -> str:
        return "\n".join(
            r.plan for r in session.sql("EXPLAIN ALTER DYNAMIC TABLE j REFRESH").collect()
        )

    assert f"key index (1 index file(s) over {ROWS:,} of {ROWS:,} rows" in explained()
    session.sql("ALTER DYNAMIC TABLE j REFRESH")  # a small write: a file without an index
    session.sql("UPDATE fact SET v = v + 1 WHERE id = 4")
    assert f"over {ROWS - 1:,} of {ROWS:,} rows" in explained()


def test_lookups_by_index_stay_right_through_deletes_updates_and_small_writes(session, indexing):
    _setup(session)
    for statement in (
        "UPDATE fact SET v = v + 1 WHERE id % 7 = 0",
        "DELETE FROM fact WHERE id % 11 = 0",
        "INSERT INTO fact SELECT id, CAST(id % 3 + 1 AS INT), 5 FROM range(6000, 6020)",
        "UPDATE fact SET v = v + 1 WHERE id % 7 = 0",  # rows updated twice: the index's old ones
        "UPDATE dim SET name = 'TWO' WHERE d = 2",
        "UPDATE fact SET d = 3 WHERE id % 13 = 1",
        "DELETE FROM fact WHERE id >= 6000",  # rows of a file without an index
    ):
        session.sql(statement)
        session.sql("ALTER DYNAMIC TABLE j REFRESH")
        assert _right(session), statement
    assert any(f.file.index for f in _files(session))


def test_a_compaction_indexes_what_it_writes_and_the_old_index_is_not_read_for_removed_files(
    session, indexing
):
    _setup(session)
    session.sql("UPDATE fact SET v = v + 1 WHERE id % 5 = 0")  # 1,200 rows: an indexed write
    session.sql("ALTER DYNAMIC TABLE j REFRESH")
    assert sum(f.file.index is not None for f in _files(session)) == 2
    session.sql("OPTIMIZE j")
    (compacted,) = _files(session)
    assert compacted.file.index is not None and compacted.file.moved
    session.sql("UPDATE fact SET v = v + 1 WHERE id % 5 = 0")
    session.sql("ALTER DYNAMIC TABLE j REFRESH")
    assert _right(session)


@pytest.mark.parametrize("limit", ["LOOKUP_KEYS", "ROWS_PER_PAGE_READ"])
def test_too_many_keys_for_the_index_read_the_stored_hashes_and_stay_right(
    session, indexing, monkeypatch, limit
):
    _setup(session)
    # 60 keys: past 10 keys, or past a key per 200 stored rows (60 pages cost 12,000 rows)
    monkeypatch.setattr(index, limit, 10 if limit == "LOOKUP_KEYS" else 200)
    session.sql("UPDATE fact SET v = v + 1 WHERE id % 100 = 0")
    read = rows_read(session.spark, lambda: session.sql("ALTER DYNAMIC TABLE j REFRESH"))
    assert _right(session)
    assert read >= ROWS  # every stored key hash


def test_vacuum_keeps_an_index_while_a_live_file_uses_it_and_removes_it_after(
    session, tmp_path, clock, indexing
):
    _setup(session)
    (first,) = _files(session)
    old = tmp_path / "wh" / first.file.index
    session.sql("UPDATE fact SET v = 3 WHERE id = 1")
    session.sql("ALTER DYNAMIC TABLE j REFRESH")  # a small file: j's first file stays live
    clock.advance(days=10)
    session.sql("VACUUM j")
    assert old.exists()
    session.sql("OPTIMIZE j")  # both files into one, with an index of its own
    (compacted,) = _files(session)
    assert compacted.file.index != first.file.index
    clock.advance(days=10)  # past the retention
    session.sql("VACUUM j")
    assert not old.exists() and (tmp_path / "wh" / compacted.file.index).exists()
    session.sql("UPDATE fact SET v = 4 WHERE id % 3 = 1")
    session.sql("ALTER DYNAMIC TABLE j REFRESH")
    assert _right(session)


def test_an_older_catalog_opens_with_its_files_unindexed(session, clock, indexing):
    _setup(session)
    drop = "ALTER TABLE cl_files DROP COLUMN index_path"  # version 11 had no such column
    with older_catalog(session, clock, 11, drop) as again:
        assert [f.file.index for f in _files(again)] == [None]
        again.sql("UPDATE fact SET v = v + 1 WHERE id % 7 = 0")
        again.sql("ALTER DYNAMIC TABLE j REFRESH")
        assert _right(again)


def test_a_refresh_looking_up_by_index_runs_a_bounded_number_of_jobs(session, indexing):
    """Six, whatever the keys and files: the delta and its keys, the keys' broadcast and the
    index's pages, the rows found with the write of the new rows (and its broadcast), the DV."""
    _setup(session)
    session.sql("UPDATE fact SET v = v + 1 WHERE id % 500 = 0")
    session.sql("ALTER DYNAMIC TABLE j REFRESH")
    table_id = session.catalog.table("j").table_id
    jobs = session.catalog.refresh_history(table_id, limit=1)[0].record.spark_jobs
    assert jobs <= 6, jobs
    assert _right(session)

"""Change scans see through compaction: a COMPACT version (OPTIMIZE, an ingest client's
compaction) has no changes in any format, reads no file when the rows it moved are all older
than the interval, does not make an interval "not inserts-only", and pairs no moved row; the
changes of an interval around it equal the snapshot diff (the oracle), moved rows updated and
deleted later included."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import older_catalog

from changelake.changes.plan import Shape
from changelake.changes.query import only_inserted_between

INFORMATION = ("DEFAULT", "APPEND_ONLY", "REDO")


def _version(s, name: str = "t") -> int:
    return s.catalog.table(name).current_version


def _changes(s, start: int, end: int, information: str = "DEFAULT") -> list:
    return s.sql(
        f"SELECT * FROM t CHANGES (INFORMATION => {information})"
        f" AT (VERSION => {start}) END (VERSION => {end})"
    ).collect()


def _rows(s, version: int) -> Counter:
    return Counter(tuple(r) for r in s.sql(f"SELECT * FROM t AT (VERSION => {version})").collect())


def _assert_minimum_delta(s, start: int, end: int) -> list:
    """DEFAULT over (start, end] is the diff of the two snapshots, an update pair per key whose
    values changed (k is the key)."""
    changes = _changes(s, start, end)
    deleted = Counter((r.k, r.v) for r in changes if r["METADATA$ACTION"] == "DELETE")
    inserted = Counter((r.k, r.v) for r in changes if r["METADATA$ACTION"] == "INSERT")
    before, after = _rows(s, start), _rows(s, end)
    assert deleted == before - after and inserted == after - before
    both = {r.k for r in changes if r["METADATA$ACTION"] == "DELETE"} & {
        r.k for r in changes if r["METADATA$ACTION"] == "INSERT"
    }
    assert {r.k for r in changes if r["METADATA$ISUPDATE"]} == both
    return changes


@pytest.fixture
def compacted(session):
    s = session
    s.sql("CREATE TABLE t (k INT, v INT)")
    for i in range(4):
        s.sql(f"INSERT INTO t VALUES ({i}, {i}), ({i + 100}, {i})")  # a small file each
    s.sql("UPDATE t SET v = 10 WHERE k = 1")  # a deletion vector too
    return s


def test_a_compaction_has_no_changes_and_reads_nothing(compacted):
    s = compacted
    before = _version(s)
    s.sql("OPTIMIZE t")
    after = _version(s)
    assert after == before + 1
    assert len(s.catalog.snapshot_files(s.catalog.table("t").table_id, after)) == 1
    for information in INFORMATION:
        assert _changes(s, before, after, information) == []
        plan = s.change_plan("t", start=before, end=after, information=information.lower())
        assert plan.shape is Shape.EMPTY, plan.describe()
    assert only_inserted_between(s.catalog, s.catalog.table("t").table_id, start=before, end=after)


def test_changes_around_a_compaction_equal_the_snapshot_diff(compacted):
    s = compacted
    start = _version(s)
    s.sql("UPDATE t SET v = v + 1 WHERE k = 0")  # before the compaction
    s.sql("INSERT INTO t VALUES (10, 10), (12, 12)")
    s.sql("OPTIMIZE t")  # moves old rows and the interval's
    compaction = _version(s)
    s.sql("UPDATE t SET v = 99 WHERE k = 2")  # a moved row of the start, updated
    s.sql("DELETE FROM t WHERE k = 3")  # a moved row of the start, deleted
    s.sql("DELETE FROM t WHERE k = 10")  # inserted in the interval, moved, deleted: nothing
    s.sql("UPDATE t SET v = 13 WHERE k = 12")  # inserted in the interval, moved, updated
    s.sql("INSERT INTO t VALUES (11, 11)")
    end = _version(s)
    changes = _assert_minimum_delta(s, start, end)
    assert {r.k for r in changes} == {0, 2, 3, 11, 12}
    # every subinterval, the compaction at either end or inside
    for a in range(start, end):
        for b in range(a + 1, end + 1):
            _assert_minimum_delta(s, a, b)
    redo = _changes(s, start, end, "REDO")
    assert compaction not in {r["METADATA$COMMIT_VERSION"] for r in redo}
    replayed = _rows(s, start)
    for version in range(start + 1, end + 1):
        for r in (r for r in redo if r["METADATA$COMMIT_VERSION"] == version):
            row = (r.k, r.v)
            replayed += Counter([row]) if r["METADATA$ACTION"] == "INSERT" else Counter()
            replayed -= Counter([row]) if r["METADATA$ACTION"] == "DELETE" else Counter()
        assert replayed == _rows(s, version), version
    appended = _changes(s, start, end, "APPEND_ONLY")
    assert Counter((r.k, r.v) for r in appended) == Counter([(10, 10), (12, 12), (11, 11)])


def test_an_interval_of_inserts_and_compactions_is_inserts_only(compacted):
    s = compacted
    table_id = s.catalog.table("t").table_id
    start = _version(s)
    s.sql("INSERT INTO t VALUES (20, 20)")
    s.sql("OPTIMIZE t")
    s.sql("INSERT INTO t VALUES (21, 21)")
    end = _version(s)
    assert only_inserted_between(s.catalog, table_id, start=start, end=end)
    default = _assert_minimum_delta(s, start, end)
    assert sorted((r.k, r.v) for r in default) == [(20, 20), (21, 21)]
    s.sql("DELETE FROM t WHERE k = 2")
    assert not only_inserted_between(s.catalog, table_id, start=start, end=_version(s))


def test_a_stream_across_a_compaction_reads_the_minimum_delta(compacted):
    s = compacted
    s.sql("CREATE STREAM st ON TABLE t")
    s.sql("OPTIMIZE t")  # a compaction alone: no data
    assert s.sql("SELECT SYSTEM$STREAM_HAS_DATA('st')").collect()[0][0] is False
    s.sql("UPDATE t SET v = -1 WHERE k = 100")
    s.sql("OPTIMIZE t")
    s.sql("DELETE FROM t WHERE k = 101")
    assert s.sql("SELECT SYSTEM$STREAM_HAS_DATA('st')").collect()[0][0] is True
    rows = s.sql("SELECT k, v, METADATA$ACTION AS a, METADATA$ISUPDATE AS u FROM st").collect()
    assert sorted(tuple(r) for r in rows) == [
        (100, -1, "INSERT", True),
        (100, 0, "DELETE", True),
        (101, 1, "DELETE", False),
    ]


def test_an_older_catalog_learns_which_files_compactions_moved(compacted, clock):
    s = compacted
    before = _version(s)
    s.sql("OPTIMIZE t")
    after = _version(s)
    drop = [f"ALTER TABLE cl_files DROP COLUMN {c}" for c in ("moved_in", "moved_out")]
    with older_catalog(s, clock, 10, *drop) as again:  # version 10 had no such columns
        assert _changes(again, before, after) == []
        plan = again.change_plan("t", start=before, end=after)
        assert plan.shape is Shape.EMPTY, plan.describe()


def test_a_dynamic_table_over_a_table_only_compacted_refreshes_as_no_data(compacted):
    s = compacted
    query = "SELECT k, v FROM t WHERE v > 0"
    s.sql(f"CREATE DYNAMIC TABLE f TARGET_LAG = '1 hour' AS {query}")
    s.sql("OPTIMIZE t")
    s.sql("ALTER DYNAMIC TABLE f REFRESH")
    (last,) = s.sql(
        "SELECT refresh_action, refresh_action_reason, spark_jobs FROM"
        " TABLE(DYNAMIC_TABLE_REFRESH_HISTORY(NAME => 'f')) ORDER BY refresh_id DESC LIMIT 1"
    ).collect()
    assert tuple(last) == (
        "NO_DATA",
        "the tables it reads were only compacted since its last refresh",
        0,
    )
    s.sql("DELETE FROM t WHERE k = 2")  # a change after the compaction is applied as usual
    s.sql("ALTER DYNAMIC TABLE f REFRESH")
    assert Counter(tuple(r) for r in s.sql("SELECT * FROM f").collect()) == Counter(
        tuple(r) for r in s.sql(query).collect()
    )

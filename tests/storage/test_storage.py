"""Storage (issue 2 item 4): statistics and pruning, deletion vectors, row identity, OPTIMIZE,
VACUUM and retention."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import rows, state_of
from hypothesis import given
from hypothesis import strategies as st

from changelake.catalog.model import DataFile, LiveFile
from changelake.errors import TimeTravelError
from changelake.schema import ROW_VERSION, STORED_ROW_ID, Column, TableSchema
from changelake.storage.pruning import Comparison, holding, prune
from changelake.storage.snapshot import POS, RID, VER, state_relation

# -- prune() ----------------------------------------------------------------------------------

SCHEMA = TableSchema(
    (
        Column(1, "id", "int", True),
        Column(2, "amount", "decimal(10,2)", True),
        Column(3, "day", "date", True),
        Column(4, "name", "string", True),
        Column(5, "empty", "int", True),
        Column(6, "x", "double", True),
        Column(7, "at", "timestamp", True),
    )
)


def _file(path: str, rows_: int = 10, **stats: dict) -> LiveFile:
    physical = {SCHEMA.find(k).physical: v for k, v in stats.items()}
    return LiveFile(DataFile(path, rows_, 100, 0, 1, physical))


def _bounded(lo, hi, nulls: int = 0) -> dict:
    return {"min": lo, "max": hi, "nulls": nulls, "bounded": True}


def _kept(files: list[LiveFile], *conjuncts: Comparison) -> list[str]:
    return [f.file.path for f in prune(files, SCHEMA, conjuncts)]


INTS = [
    _file("a", id=_bounded(1, 10)),
    _file("b", id=_bounded(11, 20)),
    _file("c", id=_bounded(21, 30, nulls=3)),
]


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("=", 15, ["b"]),
        ("=", 10, ["a"]),
        ("=", 31, []),
        ("<", 11, ["a"]),
        ("<=", 11, ["a", "b"]),
        (">", 20, ["c"]),
        (">=", 20, ["b", "c"]),
        ("in", (5, 25), ["a", "c"]),
        ("in", (0, 99), []),
        ("=", 15.5, ["b"]),
        ("=", "15", ["a", "b", "c"]),  # Spark casts strings: no pruning on a guess
        ("is_null", None, ["c"]),
        ("is_not_null", None, ["a", "b", "c"]),
    ],
)
def test_prune_integers(op, value, expected):
    assert _kept(INTS, Comparison("id", op, value)) == expected


def test_prune_conjuncts_all_apply_and_unknown_columns_are_ignored():
    between = (Comparison("id", ">=", 12), Comparison("id", "<=", 22))
    assert _kept(INTS, *between) == ["b", "c"]
    assert _kept(INTS, Comparison("id", ">", 5), Comparison("id", "<", 11)) == ["a"]
    assert _kept(INTS, Comparison("nope", "=", 1)) == ["a", "b", "c"]
    assert _kept(INTS, Comparison("ID", "=", 25)) == ["c"]


def test_prune_decimals_compare_as_numbers_not_text():
    files = [
        _file("small", amount=_bounded("9.50", "9.99")),
        _file("large", amount=_bounded("10.25", "100.00")),
        _file("negative", amount=_bounded("-20.00", "-0.01")),
    ]
    assert _kept(files, Comparison("amount", "=", decimal.Decimal("9.75"))) == ["small"]
    assert _kept(files, Comparison("amount", ">", 10)) == ["large"]
    assert _kept(files, Comparison("amount", "<", 0)) == ["negative"]
    assert _kept(files, Comparison("amount", "=", 10.3)) == ["large"]
    assert _kept(files, Comparison("amount", "<=", -20)) == ["negative"]
    assert _kept(files, Comparison("amount", "in", (9.99, 100))) == ["small", "large"]


def test_prune_dates():
    files = [
        _file("jan", day=_bounded("2024-01-01", "2024-01-31")),
        _file("feb", day=_bounded("2024-02-01", "2024-02-29")),
        _file("y1999", day=_bounded("1999-12-31", "1999-12-31")),
    ]
    assert _kept(files, Comparison("day", "=", "2024-01-15")) == ["jan"]
    assert _kept(files, Comparison("day", ">=", "2024-02-29")) == ["feb"]
    assert _kept(files, Comparison("day", "<", "2000-01-01")) == ["y1999"]
    # Spark reads '2024-1-5' as 2024-01-05: a literal not in canonical form must not prune by
    # text order (where '2024-1-5' > '2024-01-31').
    assert "jan" in _kept(files, Comparison("day", "=", "2024-1-5"))
    assert "jan" in _kept(files, Comparison("day", "<=", "2024-1-31"))


def test_prune_strings():
    files = [
        _file("ab", name=_bounded("apple", "banana")),
        _file("xz", name=_bounded("x-ray", "zulu")),
        _file("long", name={"min": None, "max": None, "nulls": 0, "bounded": False}),
    ]
    assert _kept(files, Comparison("name", "=", "avocado")) == ["ab", "long"]
    assert _kept(files, Comparison("name", ">", "banana")) == ["xz", "long"]
    assert _kept(files, Comparison("name", "<", "apple")) == ["long"]
    assert _kept(files, Comparison("name", "in", ("zulu", "aardvark"))) == ["xz", "long"]
    assert _kept(files, Comparison("name", "=", "Émile")) == ["long"]  # after 'z' in UTF-8


def test_prune_null_only_columns():
    files = [
        _file("nulls", rows_=4, empty={"min": None, "max": None, "nulls": 4, "bounded": False}),
        _file("some", rows_=4, empty=_bounded(1, 1, nulls=3)),
        _file("none", rows_=4, empty=_bounded(5, 7)),
    ]
    assert _kept(files, Comparison("empty", "=", 1)) == ["some"]
    assert _kept(files, Comparison("empty", ">", 0)) == ["some", "none"]
    assert _kept(files, Comparison("empty", "is_null")) == ["nulls", "some"]
    assert _kept(files, Comparison("empty", "is_not_null")) == ["some", "none"]


def test_prune_keeps_files_it_cannot_judge():
    files = [
        _file("no-stats"),
        _file("ts", at=_bounded("2024-01-01 00:00:00", "2024-01-02 00:00:00")),
    ]
    assert _kept(files, Comparison("id", "=", 1)) == ["no-stats", "ts"]
    assert _kept(files, Comparison("at", "=", "1990-01-01 00:00:00")) == ["no-stats", "ts"]


def test_prune_nan_bounds_prove_nothing():
    # Spark orders NaN above every number (NaN > 5 is true, NaN = NaN is true); Parquet writers
    # record NaN as a bound: such bounds cannot exclude anything.
    files = [
        _file("nan-max", x=_bounded(-3.0, float("nan"))),
        _file("all-nan", x=_bounded(float("nan"), float("nan"))),
        _file("plain", x=_bounded(0.0, 1.0)),
    ]
    assert _kept(files, Comparison("x", ">", 5)) == ["nan-max", "all-nan"]
    assert _kept(files, Comparison("x", "=", 1)) == ["nan-max", "all-nan", "plain"]
    assert _kept(files, Comparison("x", "<", -10)) == ["nan-max", "all-nan"]


# -- holding(): the files that may hold given keys ----------------------------------------------


def _holding(files: list[LiveFile], keys: list[str], values: list[tuple]) -> list[str]:
    return [f.file.path for f in holding(files, SCHEMA, keys, values)]


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20), st.booleans()), max_size=8),
    st.lists(
        st.tuples(st.integers(-5, 90), st.sampled_from(["apple", "kiwi", "zulu"])), max_size=12
    ),
)
def test_holding_keeps_exactly_the_files_whose_ranges_admit_a_key_column_value(ranges, keys):
    files = [
        _file(
            f"f{i}",
            id=_bounded(lo, lo + width, nulls=10 if all_null else 0),
            name=_bounded("banana", "lemon"),
        )
        for i, (lo, width, all_null) in enumerate(ranges)
    ]
    # the oracle: every key column has a value within the file's bounds (compound keys are
    # judged per column), and a column holding only NULLs holds no key
    expected = [
        f"f{i}"
        for i, (lo, width, all_null) in enumerate(ranges)
        if not all_null
        and any(lo <= k <= lo + width for k, _ in keys)
        and any("banana" <= n <= "lemon" for _, n in keys)
    ]
    assert _holding(files, ["id", "name"], keys) == expected
    assert _holding(files, ["id"], [(k,) for k, _ in keys]) == [
        f"f{i}"
        for i, (lo, width, all_null) in enumerate(ranges)
        if not all_null and any(lo <= k <= lo + width for k, _ in keys)
    ]


def test_holding_prunes_nothing_by_a_column_it_cannot_order():
    files = [
        _file("a", id=_bounded(1, 10), at=_bounded("2024-01-01 00:00:00", "2024-01-02 00:00:00")),
        _file(
            "b", id=_bounded(11, 20), name={"min": None, "max": None, "nulls": 0, "bounded": False}
        ),
        _file("c"),  # no statistics
    ]
    stamp = dt.datetime(2030, 1, 1)
    assert _holding(files, ["at"], [(stamp,)]) == ["a", "b", "c"]  # timestamps are not judged
    assert _holding(files, ["id", "at"], [(15, stamp)]) == ["b", "c"]
    assert _holding(files, ["name"], [("x",)]) == ["a", "b", "c"]  # no bounds on a or b
    assert _holding(files, ["nope"], [(1,)]) == ["a", "b", "c"]
    assert _holding(files, ["id"], []) == ["c"]  # no key: only a file it cannot judge
    days = [_file("jan", day=_bounded("2024-01-01", "2024-01-31"))]
    assert _holding(days, ["day"], [(dt.date(2024, 1, 5),)]) == ["jan"]
    assert _holding(days, ["day"], [(dt.date(2024, 2, 5),)]) == []


# -- statistics recorded and used ---------------------------------------------------------------


def _files(session, table: str, version: int | None = None) -> list[LiveFile]:
    info = session.catalog.table(table)
    return list(state_of(session, info, version).files)


def _stats(session, table: str, column: str) -> list[dict]:
    info = session.catalog.table(table)
    physical = state_of(session, info).schema.find(column).physical
    return [f.file.stats.get(physical) for f in _files(session, table)]


@pytest.mark.parametrize("how", ["values", "select"])
def test_statistics_recorded_per_file(session, how):
    session.sql(
        "CREATE TABLE s (id INT, amount DECIMAL(10,2), day DATE, name STRING, empty INT, x DOUBLE)"
    )
    values = (
        "(3, 10.50, '2024-03-01', 'mango', NULL, 1.5),"
        " (1, -2.25, '2023-12-31', 'apple', NULL, -0.5),"
        " (2, NULL, NULL, NULL, NULL, NULL)"
    )
    if how == "values":
        session.sql(f"INSERT INTO s VALUES {values}")
    else:
        session.sql(
            "INSERT INTO s SELECT id, CAST(amount AS DECIMAL(10,2)), CAST(day AS DATE), name,"
            f" CAST(empty AS INT), CAST(x AS DOUBLE) FROM VALUES {values}"
            " AS v(id, amount, day, name, empty, x)"
        )
    merged = {
        column: _merge(_stats(session, "s", column))
        for column in ("id", "day", "name", "empty", "x")
    }
    merged["amount"] = _merge(_stats(session, "s", "amount"), decimal.Decimal)
    assert merged["id"] == (1, 3, 0)
    assert merged["amount"] == (decimal.Decimal("-2.25"), decimal.Decimal("10.50"), 1)
    assert merged["day"] == ("2023-12-31", "2024-03-01", 1)
    assert merged["name"] == ("apple", "mango", 1)
    assert merged["empty"] == (None, None, 3)
    assert merged["x"] == (-0.5, 1.5, 1)


def _merge(stats: list[dict], convert=lambda v: v) -> tuple:
    """(min, max, nulls) over the files' stats of one column (Spark may write several files)."""
    assert all(s is not None for s in stats)
    bounded = [s for s in stats if s["bounded"]]
    lo = min((convert(s["min"]) for s in bounded), default=None)
    hi = max((convert(s["max"]) for s in bounded), default=None)
    return lo, hi, sum(s["nulls"] for s in stats)


def test_filters_prune_files_by_statistics(session):
    session.sql("CREATE TABLE p (id INT, day DATE, name STRING)")
    for batch in range(3):
        values = ", ".join(
            f"({batch * 10 + i}, '2024-0{batch + 1}-0{i + 1}', 'n{batch}')" for i in range(5)
        )
        session.sql(f"INSERT INTO p VALUES {values}")
    assert len(_files(session, "p")) == 3

    def scanned(where: str) -> tuple[int, list[tuple]]:
        df = session.sql(f"SELECT id FROM p WHERE {where}")
        return len(df.inputFiles()), rows(df)

    assert scanned("id = 12") == (1, [(12,)])
    assert scanned("id >= 20") == (1, [(20,), (21,), (22,), (23,), (24,)])
    assert scanned("id IN (1, 21)") == (2, [(1,), (21,)])
    assert scanned("id BETWEEN 5 AND 10") == (1, [(10,)])
    assert scanned("id BETWEEN 3 AND 10") == (2, [(3,), (4,), (10,)])
    assert scanned("name = 'n1' AND id < 100") == (1, [(10,), (11,), (12,), (13,), (14,)])
    assert scanned("day = '2024-02-03'") == (1, [(12,)])
    assert scanned("day = '2024-2-3'") == (3, [(12,)])  # not canonical: not pruned, still right
    assert scanned("id = 99") == (0, [])
    assert scanned("id = 12 OR id = 22") == (3, [(12,), (22,)])  # OR is not pushed


@pytest.mark.parametrize("how", ["values", "select"])
def test_nan_rows_are_found_by_filters(session, how):
    session.sql("CREATE TABLE f (id INT, x DOUBLE)")
    if how == "values":
        session.sql("INSERT INTO f VALUES (1, 1.0), (2, 'NaN'), (3, -3.0)")
    else:
        session.sql(
            "INSERT INTO f SELECT id, CAST(x AS DOUBLE) FROM VALUES (1, '1.0'), (2, 'NaN'),"
            " (3, '-3.0') AS v(id, x)"
        )
    assert rows(session.sql("SELECT id FROM f WHERE x > 5")) == [(2,)]
    assert rows(session.sql("SELECT id FROM f WHERE x = 'NaN'")) == [(2,)]
    assert rows(session.sql("SELECT id FROM f WHERE x = 1")) == [(1,)]
    session.sql("UPDATE f SET x = 0 WHERE x > 5")
    assert rows(session.sql("SELECT * FROM f")) == [(1, 1.0), (2, 0.0), (3, -3.0)]


# -- deletion vectors -----------------------------------------------------------------------------


def _big_table(session, name: str = "big", count: int = 2000) -> None:
    session.sql(f"CREATE TABLE {name} (id INT, name STRING, n INT)")
    session.sql(
        f"INSERT INTO {name} SELECT CAST(id AS INT), CONCAT('r', id), CAST(id % 7 AS INT)"
        f" FROM range(0, {count}, 1, 1)"
    )


def _history(session, table: str):
    info = session.catalog.table(table)
    return session.catalog.versions(info.table_id)


def test_delete_of_one_row_adds_a_deletion_vector_instead_of_rewriting(session):
    _big_table(session)
    (before,) = _files(session, "big")
    path = Path(session.warehouse.root) / before.file.path
    stat = path.stat()

    session.sql("DELETE FROM big WHERE id = 7")
    (after,) = _files(session, "big")
    assert after.file.path == before.file.path
    assert len(after.dv_paths) == 1 and after.deleted_rows == 1
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size
    last = _history(session, "big")[-1]
    assert (last.operation, last.files_added, last.files_removed, last.rows_deleted) == (
        "DELETE",
        0,
        0,
        1,
    )
    dv = pq.read_table(Path(session.warehouse.root) / after.dv_paths[0]).to_pylist()
    # the position, beside the row it deleted (its before-image: values, identity, version)
    assert dv == [
        {
            "file_name": os.path.basename(before.file.path),
            "pos": 7,
            "c1": 7,
            "c2": "r7",
            "c3": 0,
            "_cl_row_id": 7,
            "_cl_row_version": 1,
        }
    ]

    session.sql("DELETE FROM big WHERE id IN (8, 1999)")  # new DV = old DV + new positions
    (again,) = _files(session, "big")
    assert again.file.path == before.file.path
    assert len(again.dv_paths) == 2 and again.deleted_rows == 3
    assert session.sql("SELECT count(*) FROM big").first()[0] == 1997
    assert rows(session.sql("SELECT id FROM big WHERE id BETWEEN 6 AND 9")) == [(6,), (9,)]
    # Earlier versions still see the deleted rows.
    assert session.sql("SELECT count(*) FROM big AT (VERSION => 2)").first()[0] == 1999
    assert session.sql("SELECT count(*) FROM big AT (VERSION => 1)").first()[0] == 2000


def test_update_marks_old_row_deleted_and_writes_only_the_new_row(session):
    _big_table(session)
    (before,) = _files(session, "big")
    session.sql("UPDATE big SET name = 'changed' WHERE id = 42")
    files = _files(session, "big")
    assert len(files) == 2
    old = next(f for f in files if f.file.path == before.file.path)
    new = next(f for f in files if f.file.path != before.file.path)
    assert old.deleted_rows == 1 and new.file.row_count == 1 and not new.dv_paths
    last = _history(session, "big")[-1]
    assert (last.files_added, last.files_removed, last.rows_updated) == (1, 0, 1)
    assert rows(session.sql("SELECT * FROM big WHERE id = 42")) == [(42, "changed", 0)]
    assert session.sql("SELECT count(*) FROM big").first()[0] == 2000


def test_deleting_every_row_of_a_file_removes_the_file(session):
    session.sql("CREATE TABLE two (id INT, name STRING, n INT)")
    session.sql("INSERT INTO two VALUES (1, 'a', 0), (2, 'b', 0)")
    session.sql("INSERT INTO two VALUES (10, 'c', 0), (11, 'd', 0)")
    first, second = _files(session, "two")
    session.sql("DELETE FROM two WHERE id < 5")
    (left,) = _files(session, "two")
    assert left.file.path == second.file.path and not left.dv_paths
    last = _history(session, "two")[-1]
    assert (last.files_removed, last.rows_deleted) == (1, 2)
    assert rows(session.sql("SELECT id FROM two")) == [(10,), (11,)]
    # A file whose rows go in two steps: DV first, then removed when its last row goes.
    session.sql("DELETE FROM two WHERE id = 10")
    session.sql("DELETE FROM two WHERE id = 11")
    assert _files(session, "two") == []
    assert _history(session, "two")[-1].files_removed == 1
    assert rows(session.sql("SELECT id FROM two AT (VERSION => 2)")) == [(1,), (2,), (10,), (11,)]
    del first


# -- row identity -------------------------------------------------------------------------------


def _identity(session, table: str, version: int | None = None) -> dict[int, tuple[int, int]]:
    """id -> (row identity, last-changed version) at ``version``."""
    info = session.catalog.table(table)
    df = state_relation(
        session.spark, session.warehouse, state_of(session, info, version), identity=True
    ).frame(session.spark)
    found = {r["id"]: (r[RID], r[VER]) for r in df.collect()}
    assert len({rid for rid, _ in found.values()}) == len(found), "row identities not unique"
    return found


def test_fresh_rows_have_identity_base_row_id_plus_position(session):
    session.sql("CREATE TABLE r (id INT, name STRING, n INT)")
    session.sql("INSERT INTO r VALUES (0, 'a', 0), (1, 'b', 0), (2, 'c', 0)")
    session.sql("INSERT INTO r SELECT CAST(id AS INT), 'x', 0 FROM range(10, 14, 1, 1)")
    files = _files(session, "r")
    assert [f.file.base_row_id for f in files] == [0, 3]
    info = session.catalog.table("r")
    df = state_relation(
        session.spark, session.warehouse, state_of(session, info), identity=True
    ).frame(session.spark)
    got = {r["id"]: (r[RID], r[POS], r[VER]) for r in df.collect()}
    assert got == {
        0: (0, 0, 1),
        1: (1, 1, 1),
        2: (2, 2, 1),
        10: (3, 0, 2),
        11: (4, 1, 2),
        12: (5, 2, 2),
        13: (6, 3, 2),
    }
    # Inserted rows cost no storage: the identity columns in their files are all NULL.
    for f in files:
        data = pq.read_table(Path(session.warehouse.root) / f.file.path)
        assert data.column(STORED_ROW_ID).null_count == len(data)
        assert data.column(ROW_VERSION).null_count == len(data)
    assert session.sql("SELECT * FROM r").columns == ["id", "name", "n"]


def test_update_materializes_identity_and_last_changed_version(session):
    session.sql("CREATE TABLE r (id INT, name STRING, n INT)")
    session.sql("INSERT INTO r VALUES (0, 'a', 0), (1, 'b', 0), (2, 'c', 0)")
    before = _identity(session, "r")
    session.sql("UPDATE r SET n = n + 1 WHERE id = 1")
    after = _identity(session, "r")
    assert after[0] == before[0] and after[2] == before[2]
    assert after[1] == (before[1][0], 2)
    (new,) = [f for f in _files(session, "r") if f.file.begin_version == 2]
    data = pq.read_table(Path(session.warehouse.root) / new.file.path).to_pylist()
    assert [(d[STORED_ROW_ID], d[ROW_VERSION]) for d in data] == [(before[1][0], None)]
    # Updating it again (to the same value) keeps the identity again.
    session.sql("UPDATE r SET n = n WHERE id = 1")
    assert _identity(session, "r")[1] == (before[1][0], 3)
    session.sql(
        "MERGE INTO r USING (SELECT 2 AS id) s ON r.id = s.id WHEN MATCHED THEN UPDATE SET name = 'm'"
    )
    assert _identity(session, "r")[2] == (before[2][0], 4)
    assert _identity(session, "r", 1) == before


def test_optimize_keeps_identity_and_last_changed_version(session):
    session.sql("CREATE TABLE o (id INT, name STRING, n INT)")
    session.sql("INSERT INTO o VALUES (0, 'a', 0), (1, 'b', 0), (2, 'c', 0)")
    session.sql("INSERT INTO o VALUES (3, 'd', 0), (4, 'e', 0)")
    session.sql("UPDATE o SET name = 'B' WHERE id = 1")
    session.sql("DELETE FROM o WHERE id = 3")
    before = _identity(session, "o")
    content = rows(session.sql("SELECT * FROM o"))
    assert len(_files(session, "o")) == 3

    result = session.sql("OPTIMIZE o").first()
    (compacted,) = _files(session, "o")
    assert not compacted.dv_paths and compacted.file.row_count == 4
    assert result["version"] == 5 and _history(session, "o")[-1].operation == "OPTIMIZE"
    assert _identity(session, "o") == before
    assert rows(session.sql("SELECT * FROM o")) == content
    assert session.sql("OPTIMIZE o").first()["version"] is None  # nothing left to compact
    # New rows after compaction get fresh identities, never reused ones.
    session.sql("INSERT INTO o VALUES (9, 'z', 0)")
    after = _identity(session, "o")
    assert after[9][0] not in {rid for rid, _ in before.values()}
    session.sql("UPDATE o SET n = 5 WHERE id = 4")
    assert _identity(session, "o")[4] == (before[4][0], 7)


# -- VACUUM and retention -----------------------------------------------------------------------


def _on_disk(session) -> set[str]:
    root = Path(session.warehouse.root)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


def test_vacuum_removes_only_files_older_than_retention(session, clock):
    session.sql("CREATE TABLE v (id INT, name STRING, n INT)")
    session.sql("INSERT INTO v VALUES (1, 'a', 0), (2, 'b', 0)")  # version 1
    session.sql("DELETE FROM v WHERE id = 1")  # version 2: DV
    first = {f.file.path for f in _files(session, "v")} | {
        p for f in _files(session, "v") for p in f.dv_paths
    }
    clock.advance(seconds=60)
    session.sql("TRUNCATE TABLE v")  # version 3 removes the file

    session.sql("VACUUM v")  # within retention (1 day by default): nothing goes
    assert first <= _on_disk(session)
    assert rows(session.sql("SELECT id FROM v AT (VERSION => 2)")) == [(2,)]

    clock.advance(days=1.5)
    session.sql("INSERT INTO v VALUES (3, 'c', 0)")  # version 4: version 3 was current till now
    live = {f.file.path for f in _files(session, "v")}
    session.sql("VACUUM v")
    assert not first & _on_disk(session)
    assert live <= _on_disk(session)
    assert rows(session.sql("SELECT * FROM v")) == [(3, "c", 0)]
    for version in (1, 2):
        with pytest.raises(TimeTravelError, match="retention"):
            session.sql(f"SELECT * FROM v AT (VERSION => {version})").collect()
    assert rows(session.sql("SELECT * FROM v AT (VERSION => 3)")) == []


def test_retention_property_is_respected(session, clock):
    session.sql("CREATE TABLE k (id INT, name STRING, n INT) DATA_RETENTION_TIME_IN_DAYS = 5")
    session.sql("INSERT INTO k VALUES (1, 'a', 0)")
    (old,) = _files(session, "k")
    session.sql("UPDATE k SET n = 1")
    session.sql("OPTIMIZE k")  # removes the original file and the update's file
    assert old.file.path not in {f.file.path for f in _files(session, "k")}

    clock.advance(days=3)
    session.sql("VACUUM k")
    assert old.file.path in _on_disk(session)
    assert rows(session.sql("SELECT * FROM k AT (VERSION => 1)")) == [(1, "a", 0)]

    clock.advance(days=3)
    session.sql("VACUUM k")
    assert old.file.path not in _on_disk(session)
    with pytest.raises(TimeTravelError, match="DATA_RETENTION_TIME_IN_DAYS = 5"):
        session.sql("SELECT * FROM k AT (VERSION => 1)").collect()
    assert rows(session.sql("SELECT * FROM k")) == [(1, "a", 1)]


def test_retention_zero_after_alter_lets_vacuum_remove_at_once(session, clock):
    session.sql("CREATE TABLE z (id INT, name STRING, n INT)")
    session.sql("INSERT INTO z VALUES (1, 'a', 0)")
    (old,) = _files(session, "z")
    session.sql("ALTER TABLE z SET DATA_RETENTION_TIME_IN_DAYS = 0")
    session.sql("TRUNCATE TABLE z")
    clock.advance(seconds=1)
    session.sql("VACUUM z")
    assert old.file.path not in _on_disk(session)
    with pytest.raises(TimeTravelError):
        session.sql("SELECT * FROM z AT (VERSION => 1)").collect()
    assert rows(session.sql("SELECT * FROM z")) == []


def test_vacuum_keeps_files_of_other_tables_and_recent_orphans(session, clock):
    session.sql("CREATE TABLE a (id INT, name STRING, n INT)")
    session.sql("CREATE TABLE b (id INT, name STRING, n INT)")
    session.sql("INSERT INTO a VALUES (1, 'a', 0)")
    session.sql("INSERT INTO b VALUES (2, 'b', 0)")
    root = Path(session.warehouse.root)
    stray = root / "data" / "crashed" / "part-0.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"PAR1")
    clock.advance(days=10)
    session.sql("VACUUM a")
    assert rows(session.sql("SELECT id FROM b")) == [(2,)]
    assert not stray.exists()  # old enough by the session clock
    fresh = root / "data" / "crashing" / "part-0.parquet"
    fresh.parent.mkdir(parents=True)
    fresh.write_bytes(b"PAR1")
    os.utime(fresh, (clock.now(), clock.now()))
    session.sql("VACUUM a")
    assert fresh.exists()  # a writer may still commit it


def test_time_travel_by_timestamp_uses_the_session_clock(session, clock):
    session.sql("CREATE TABLE c (id INT, name STRING, n INT)")
    # Two commits at one clock reading are stamped a microsecond apart (the commit order is
    # strict), the second after the reading: a real clock has moved on between two statements.
    clock.advance(seconds=1)
    session.sql("INSERT INTO c VALUES (1, 'a', 0)")
    mark = dt.datetime.fromtimestamp(clock.now()).isoformat(sep=" ")
    clock.advance(seconds=10)
    session.sql("INSERT INTO c VALUES (2, 'b', 0)")
    assert rows(session.sql(f"SELECT id FROM c AT (TIMESTAMP => '{mark}')")) == [(1,)]

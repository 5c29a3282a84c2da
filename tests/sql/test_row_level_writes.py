"""Row-level writes in two phases: matched positions first, full rows only of files with a match;
a Spark job count that does not grow with the number of files."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from conftest import rows, state_of
from pyspark.sql import functions as F

from changelake.dml.common import Target
from changelake.dml.matches import Matches, full_rows
from changelake.storage import native
from changelake.storage.deletion import KEY, address_key
from changelake.storage.local import INLINE_ROWS
from changelake.storage.snapshot import FILE, POS


def _jobs(spark, action) -> int:
    """Spark jobs submitted by ``action`` (the test session runs no other jobs meanwhile)."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    action()
    return len(set(tracker.getJobIdsForGroup(None)) - before)


def _table_of_files(session, name: str, files: int, per_file: int = 50) -> None:
    session.sql(f"CREATE TABLE {name} (id INT, v INT, s STRING)")
    for f in range(files):
        session.sql(
            f"INSERT INTO {name} SELECT CAST(id AS INT), CAST(id % 10 AS INT), CONCAT('s', id)"
            f" FROM range({f * per_file}, {(f + 1) * per_file}, 1, 1)"
        )


def test_phase_two_reads_only_the_files_that_have_a_match(session):
    _table_of_files(session, "t", 4)
    info = session.catalog.table("t")
    state = state_of(session, info)
    chosen = state.files[2].file.path
    name = os.path.basename(chosen)
    found = session.spark.createDataFrame([(name, 3), (name, 7)], f"{FILE} string, {POS} bigint")
    size = state.files[2].file.size_bytes
    found = found.withColumn(KEY, F.expr(address_key(str(size), POS)))
    matches = Matches(rows=found, per_file={name: 2}, per_kind={})

    df = full_rows(session.spark, session.warehouse, Target(info, state), matches)

    assert [os.path.basename(p) for p in df.inputFiles()] == [name]
    # rows 3 and 7 of the third file, i.e. ids 103 and 107, with their identity
    assert rows(df.select("id", "v", "s", "_cl_rid")) == [
        (103, 3, "s103", 103),
        (107, 7, "s107", 107),
    ]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {t} SET v = v + 100 WHERE id % 50 = 7",
        "DELETE FROM {t} WHERE id % 50 = 7",
        "MERGE INTO {t} USING (SELECT id, 1 AS n FROM range(0, 5000, 50)) s ON {t}.id = s.id + 7"
        " WHEN MATCHED AND {t}.v = 7 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.n"
        " WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id + 7, 0)",
    ],
    ids=["update", "delete", "merge"],
)
@pytest.mark.parametrize(
    ("few_files", "many_files", "expressions"),
    [(2, 2 * INLINE_ROWS + 4, True), (2, INLINE_ROWS, False), (INLINE_ROWS + 1, 20, False)],
    ids=["jvm-expressions", "joins-per-file-lookups-inlined", "joins-per-file-lookups-joined"],
)
def test_spark_jobs_of_a_row_level_write_do_not_grow_with_files(
    session, statement, few_files, many_files, expressions
):
    _table_of_files(session, "few", few_files)
    _table_of_files(session, "many", many_files)
    session.spark.conf.set(native.ENABLED, str(expressions).lower())
    try:
        few = _jobs(session.spark, lambda: session.sql(statement.format(t="few")))
        many = _jobs(session.spark, lambda: session.sql(statement.format(t="many")))
    finally:
        session.spark.conf.unset(native.ENABLED)
    assert few == many
    assert many <= 16  # phase 1 (persist, count), phase 2 (broadcasts), DV and data writes


def test_update_keeps_unassigned_columns_and_images_from_phase_two(session):
    _table_of_files(session, "t", 3)
    session.sql("UPDATE t SET v = -v WHERE id IN (5, 60, 149)")
    assert rows(session.sql("SELECT * FROM t WHERE id IN (5, 60, 149)")) == [
        (5, -5, "s5"),
        (60, 0, "s60"),
        (149, -9, "s149"),
    ]
    info = session.catalog.table("t")
    # one DV file for the statement, holding the positions of all three data files
    (dv,) = {dv for f in state_of(session, info).files for dv in f.dv_paths}
    images = pq.read_table(os.path.join(session.warehouse.root, dv)).to_pylist()
    assert sorted((r["c1"], r["c2"], r["c3"], r["_cl_row_id"]) for r in images) == [
        (5, 5, "s5", 5),
        (60, 0, "s60", 60),
        (149, 9, "s149", 149),
    ]


def test_merge_clauses_keep_what_they_do_not_assign(session):
    _table_of_files(session, "t", 2)
    session.sql(
        "MERGE INTO t USING (SELECT * FROM VALUES (1, 'x'), (2, 'y'), (500, 'z') AS x(k, w)) src"
        " ON t.id = src.k"
        " WHEN MATCHED AND src.k = 1 THEN UPDATE SET s = src.w"
        " WHEN MATCHED THEN UPDATE SET v = 42"
        " WHEN NOT MATCHED THEN INSERT (id, s) VALUES (src.k, src.w)"
    )
    assert rows(session.sql("SELECT * FROM t WHERE id IN (1, 2, 500)")) == [
        (1, 1, "x"),
        (2, 42, "s2"),
        (500, None, "z"),
    ]
    assert session.sql("SELECT count(*) FROM t").first()[0] == 101

"""Late materialization (storage/jvm/Late.java): a read of a table's files that keeps only given
positions returns exactly the rows at them, as a whole read does, whether Spark's vectorized
reader decodes only those rows (files with a page index) or the file is read whole (Spark's row
reader) and the positions are kept by changelake's selection."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from conftest import spark_settings, state_of

from changelake.spark.private import jvm_class
from changelake.storage.read_path import Scan
from changelake.storage.snapshot import file_name, physical_schema, scan_files

LATE = "io.changelake.spark.Late"
VECTORIZED = "spark.sql.parquet.enableVectorizedReader"
COLUMN_INDEX = "parquet.filter.columnindex.enabled"


def _restricted(spark) -> int:
    return jvm_class(spark, LATE).restrictedFiles()


def _reads(session, name: str, picked: dict[str, list[int]]):
    info = session.catalog.table(name)
    state = state_of(session, info)
    files = [f.file for f in state.files]
    physical = physical_schema(state.schema)
    only = {k: pa.array(v, pa.int64()) for k, v in picked.items()}
    chosen = [f for f in files if file_name(f.path) in only]

    def read(only):
        scan = Scan(tuple(chosen), physical, positions=True, identity=True, only=only)
        rel = scan_files(session.spark, session.warehouse, scan)
        return {(r["_cl_file"], r["_cl_pos"]): tuple(r) for r in rel.frame(session.spark).collect()}

    return files, read(only), read(None)


def _pick(files, rng: random.Random, share: float) -> dict[str, list[int]]:
    picked = {}
    for f in files:
        n = max(1, int(f.row_count * share))
        picked[file_name(f.path)] = rng.sample(range(f.row_count), n)  # unsorted on purpose
    return picked


def test_only_the_rows_at_the_positions_are_read_and_they_are_the_whole_reads_rows(session):
    s = session
    s.sql(
        "CREATE TABLE t AS SELECT id, CAST(id % 97 AS INT) AS a, concat('r', CAST(id AS STRING))"
        " AS b, CAST(id AS DOUBLE) / 7 AS c, CAST(id AS DECIMAL(20, 3)) AS d,"
        " IF(id % 11 = 0, NULL, id) AS n FROM range(0, 120000, 1, 3)"
    )
    s.sql("UPDATE t SET a = -1 WHERE id % 1000 = 5")  # files with stored identities too
    files = [f.file for f in state_of(s, s.catalog.table("t")).files]
    rng = random.Random(7)
    picked = _pick(files, rng, 0.002)
    first = next(iter(picked))
    picked[first] += [0, files[0].row_count - 1] if files[0].row_count > 1 else []
    picked[first] = sorted(set(picked[first]))
    before = _restricted(s.spark)
    _, late, whole = _reads(s, "t", picked)
    wanted = {(name, p) for name, ps in picked.items() for p in ps}
    assert set(late) == wanted
    assert late == {k: whole[k] for k in wanted}
    assert _restricted(s.spark) - before == len(picked), "every file read late"


@pytest.mark.parametrize(
    ("setting", "rows", "seed", "share"),
    [(VECTORIZED, 5000, 3, 0.01), (COLUMN_INDEX, 50000, 5, 0.001)],
    ids=["spark's row reader", "no column-index filtering"],
)
def test_where_rows_cannot_be_skipped_the_file_is_read_whole_and_kept_by_position(
    session, setting, rows, seed, share
):
    s = session
    s.sql(f"CREATE TABLE t AS SELECT id, CAST(id AS STRING) AS b FROM range(0, {rows}, 1, 2)")
    files = [f.file for f in state_of(s, s.catalog.table("t")).files]
    picked = _pick(files, random.Random(seed), share)
    before = _restricted(s.spark)
    with spark_settings(s.spark, {setting: "false"}):
        _, late, whole = _reads(s, "t", picked)
    wanted = {(name, p) for name, ps in picked.items() for p in ps}
    assert set(late) == wanted
    assert late == {k: whole[k] for k in wanted}
    assert _restricted(s.spark) == before, "read whole"

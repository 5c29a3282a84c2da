"""METADATA$ROW_ID as the reader's vector (``ROW_HEX``) against its SQL form and a Python model,
on every read path, for fresh rows, rows whose identity is stored, rows behind deletion vectors
and before-images."""

from __future__ import annotations

import pytest
from conftest import spark_settings, state_of

from changelake.schema import STORED_ROW_ID
from changelake.spark import native
from changelake.spark.native import ROW_HEX
from changelake.spark.private import physical_plan_lines
from changelake.storage.deletion import image_schema, read_registered
from changelake.storage.row_ids import mask, row_id_sql
from changelake.storage.snapshot import RID, physical_schema, state_relation

# Batches (whole-stage code generation) and rows (without it) of changelake's reader, rows of
# parquet-mr under it, and Spark's own reader with changelake's expressions or joins.
READS = {
    "reader, batches": {
        "spark.sql.codegen.wholeStage": "true",
        "spark.sql.codegen.factoryMode": "FALLBACK",
        "spark.changelake.smallInputBytes": "0",
    },
    "reader, rows": {},
    "reader, parquet-mr": {"spark.sql.parquet.enableVectorizedReader": "false"},
    "expressions": {native.READER: "false"},
    "joins": {native.READER: "false", native.ENABLED: "false"},
}


@pytest.fixture(params=sorted(READS))
def read(spark, request):
    with spark_settings(spark, READS[request.param]):
        yield request.param


def _model(table_id: int, rid: int) -> str:
    """What Spark's ``hex`` prints for the scrambled long (two's complement, upper case)."""
    return format((rid ^ mask(table_id)) & 0xFFFF_FFFF_FFFF_FFFF, "X")


def _history(session) -> None:
    session.sql("CREATE TABLE t AS SELECT id, CAST(id % 7 AS INT) AS v FROM range(0, 400, 1, 4)")
    session.sql("DELETE FROM t WHERE id % 9 = 2")
    session.sql("UPDATE t SET v = v + 100 WHERE id % 5 = 1")
    session.sql("INSERT INTO t SELECT id, 1 FROM range(400, 450, 1, 2)")
    session.sql("UPDATE t SET v = v + 1 WHERE id % 10 = 1 OR id = 420")
    session.sql("DELETE FROM t WHERE id % 11 = 0")


def test_the_reader_fills_row_ids_as_sql_computes_them(spark, session, read):
    _history(session)
    info = session.catalog.table("t")
    state = state_of(session, info)
    rel = state_relation(spark, session.warehouse, state, identity=True, row_ids=True)
    df = rel.select("id", RID, ROW_HEX, f"{row_id_sql(info.table_id, RID)} AS _sql")
    df = df.frame(spark)
    plan = "\n".join(physical_plan_lines(df))
    assert ("FileScan changelake" in plan) == read.startswith("reader")
    # the reader's column is read, not computed by an expression
    assert (f"AS {ROW_HEX}#" in plan) == (not read.startswith("reader"))
    assert ("Batched: true" in plan) == (read == "reader, batches")
    rows = df.collect()
    assert len(rows) == sum(1 for i in range(450) if i % 11 and (i >= 400 or i % 9 != 2))
    assert any(r.id % 5 == 1 for r in rows)  # rows written again carry their identity
    for r in rows:
        assert r[ROW_HEX] == r["_sql"] == _model(info.table_id, r[RID]), r
    assert len({r[ROW_HEX] for r in rows}) == len(rows)


def test_before_images_get_the_row_ids_of_their_rows(spark, session, read):
    _history(session)
    info = session.catalog.table("t")
    touched = session.catalog.files_changed_between(
        info.table_id, start_exclusive=-1, end_inclusive=info.current_version
    )
    parts = [(dv, f.file, version) for f in touched for version, dv, _ in f.dvs]
    assert parts
    state = state_of(session, info)
    schema = image_schema(physical_schema(state.schema))
    images = read_registered(spark, session.warehouse, schema, parts, row_ids_of=info.table_id)
    sql = row_id_sql(info.table_id, STORED_ROW_ID)
    rows = images.select(STORED_ROW_ID, ROW_HEX, f"{sql} AS _sql").frame(spark).collect()
    assert len(rows) > 100
    for r in rows:
        assert r[ROW_HEX] == r["_sql"] == _model(info.table_id, r[STORED_ROW_ID]), r

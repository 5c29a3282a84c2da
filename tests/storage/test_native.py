"""changelake's own Spark expressions (storage/native.py) against Python models, compiled and
interpreted, and the reads built on them against the join-based reads they replace."""

from __future__ import annotations

import zipfile

import pyarrow as pa
import pytest
from conftest import spark_settings, state_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from changelake.spark import native
from changelake.spark.local import local_dataframe
from changelake.spark.private import physical_plan_lines
from changelake.spark.relation import SMALL_INPUT
from changelake.storage import deletion
from changelake.storage.snapshot import FILE, POS, RID, state_relation

NAMES = [f"part-{i}.parquet" for i in range(4)] + ["é-ü.parquet"]
# Interpreted evaluation (no whole-stage code generation, no generated projections) as well as
# the generated code Spark normally runs.
MODES = {
    "compiled": {
        "spark.sql.codegen.wholeStage": "true",
        "spark.sql.codegen.factoryMode": "FALLBACK",
        SMALL_INPUT: "0",  # else changelake plans the tests' few rows interpreted
    },
    "interpreted": {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    },
}


@pytest.fixture(params=sorted(MODES))
def mode(spark, request):
    with spark_settings(spark, MODES[request.param]):
        yield request.param


def test_the_expressions_are_built_and_loaded(spark):
    assert native.jar() is not None
    assert native.available(spark)


positions_strategy = st.dictionaries(
    st.sampled_from(NAMES),
    st.lists(
        st.one_of(st.integers(0, 300), st.integers(2**33, 2**33 + 5)),  # sparse: sorted array
        max_size=40,
    ),
    max_size=len(NAMES),
)
rows_strategy = st.lists(
    st.tuples(st.sampled_from([*NAMES, "other.parquet"]), st.integers(0, 300)), max_size=60
)


# ``mode`` sets Spark configuration once for all the examples, which is what is wanted.
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(positions=positions_strategy, rows=rows_strategy)
def test_in_positions_equals_a_python_model(spark, mode, positions, rows):
    df = local_dataframe(spark, rows, [("name", "string"), ("pos", "bigint")])
    table = {name: pa.array(values, pa.int64()) for name, values in positions.items()}
    flag = native.in_positions(spark, F.col("name"), F.col("pos"), table)
    got = sorted(tuple(r) for r in df.select("name", "pos", flag.alias("hit")).collect())
    model = sorted((n, p, p in set(positions.get(n, []))) for n, p in rows)
    assert got == model


# ``mode`` sets Spark configuration once for all the examples, which is what is wanted.
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    table=st.dictionaries(
        st.sampled_from(NAMES),
        st.tuples(st.none() | st.integers(-(2**63), 2**63 - 1), st.none() | st.integers(0, 9)),
    ),
    rows=rows_strategy,
)
def test_file_values_equal_a_python_model(spark, mode, table, rows):
    df = local_dataframe(spark, rows, [("name", "string"), ("pos", "bigint")])
    first, second = native.file_values(spark, F.col("name"), table, 2)
    got = sorted(tuple(r) for r in df.select("name", "pos", first, second).collect())
    model = sorted((n, p, *table.get(n, (None, None))) for n, p in rows)
    assert got == model


def _history(session) -> None:
    session.sql("CREATE TABLE t AS SELECT id, CAST(id % 7 AS INT) AS v FROM range(0, 400, 1, 4)")
    session.sql("DELETE FROM t WHERE id % 9 = 2")
    session.sql("UPDATE t SET v = v + 100 WHERE id % 5 = 1")
    session.sql("INSERT INTO t SELECT id, 1 FROM range(400, 450)")
    session.sql("DELETE FROM t WHERE id % 11 = 0")


QUERIES = [
    "SELECT id, v FROM t",
    "SELECT id, v, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID"
    " FROM t CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)",
    "SELECT id, v, METADATA$ACTION, METADATA$ROW_ID"
    " FROM t CHANGES (INFORMATION => APPEND_ONLY) AT (VERSION => 0)",
    "SELECT id, v, METADATA$ACTION, METADATA$ISUPDATE, METADATA$ROW_ID, METADATA$COMMIT_VERSION"
    " FROM t CHANGES (INFORMATION => REDO) AT (VERSION => 0)",
]


# The three ways a scan applies deletion vectors and per-file constants: changelake's Parquet
# reader, changelake's expressions over Spark's reader, joins.
READS = {
    # Whole-stage code generation reads batches from the reader; without it (as the suite
    # runs), rows of Spark's batches; without Spark's vectorized reader, rows of parquet-mr.
    "reader, batches": MODES["compiled"],
    "reader, rows": MODES["interpreted"],
    "reader, parquet-mr": {"spark.sql.parquet.enableVectorizedReader": "false"},
    "expressions": {native.READER: "false"},
    "joins": {native.READER: "false", native.ENABLED: "false"},
}


def test_the_three_reads_agree(spark, session):
    _history(session)
    results = {}
    for name, conf in READS.items():
        # the settings back as they were (unset would drop the suite's own, see TEST_CONF)
        with spark_settings(spark, conf):
            plan = "\n".join(physical_plan_lines(session.sql(QUERIES[0])))
            reader = name.startswith("reader")
            assert ("FileScan changelake" in plan) == reader
            assert ("changelake_in_positions" in plan) == (name == "expressions")
            assert ("Join" in plan) == (name == "joins")
            assert ("_metadata" in plan) == (not reader)
            results[name] = [sorted(map(tuple, session.sql(q).collect())) for q in QUERIES]
    assert all(result == results["joins"] for result in results.values())
    assert len(results["joins"][0]) == sum(
        1 for i in range(450) if i % 11 and (i >= 400 or i % 9 != 2)
    )


def test_the_read_paths_agree_on_every_column_type(spark, session):
    """Every type a table stores, NULLs included, read through each path after a DELETE and an
    UPDATE (the row path copies values by type, the batch path selects over Spark's vectors)."""
    session.sql(
        "CREATE TABLE w AS SELECT id, CAST(id % 3 = 0 AS BOOLEAN) AS b, CAST(id AS INT) AS i,"
        " id * 1.5 AS d, CAST(id / 7 AS DECIMAL(12, 3)) AS m, CAST(id AS STRING) AS s,"
        " CAST(CAST(id AS STRING) AS BINARY) AS x, DATE_ADD(DATE'2020-01-01', CAST(id AS INT)) AS dt,"
        " TIMESTAMP_SECONDS(id * 3600) AS ts FROM range(0, 300, 1, 3)"
    )
    session.sql("UPDATE w SET s = NULL, m = NULL, ts = NULL, b = NULL WHERE id % 10 = 4")
    session.sql("DELETE FROM w WHERE id % 7 = 3")
    results = {}
    for name, conf in READS.items():
        with spark_settings(spark, conf):
            results[name] = sorted(map(tuple, session.sql("SELECT * FROM w").collect()))
    assert all(result == results["joins"] for result in results.values())
    assert len(results["joins"]) == sum(1 for i in range(300) if i % 7 != 3)
    assert sum(1 for r in results["joins"] if r[5] is None) == sum(
        1 for i in range(300) if i % 7 != 3 and i % 10 == 4
    )


def test_a_scan_of_as_many_columns_as_whole_stage_codegen_takes(spark, session):
    """100 columns (Spark's limit for whole-stage code generation) and a deletion vector: the
    reader asks Spark's for one column more (the row index); the scan's rows are right whether
    it reads batches or rows (both readers must agree which: Spark's asserts it when the JVM
    runs with assertions on)."""
    limit = int(spark.conf.get("spark.sql.codegen.maxFields", "100"))
    columns = ", ".join(f"id + {i} AS c{i}" for i in range(limit))
    session.sql(f"CREATE TABLE wide AS SELECT {columns} FROM range(0, 50, 1, 2)")
    session.sql("DELETE FROM wide WHERE c0 % 7 = 3")
    for conf in (MODES["compiled"], MODES["interpreted"]):
        with spark_settings(spark, conf):
            got = sorted(r.c0 for r in session.sql("SELECT * FROM wide").collect())
        assert got == [i for i in range(50) if i % 7 != 3]


def test_the_reader_keeps_sparks_pruning_and_pushdown(spark, session):
    """A scan through changelake's reader keeps Spark's column pruning and filter pushdown (the
    pushed filters reach Parquet's row-group statistics) and has no join and no ``_metadata``
    projection. A filter on a virtual column holds (Parquet, were it handed the filter, would find
    no such column in any row group and skip them all)."""
    _history(session)
    df = session.sql("SELECT v FROM t WHERE id > 420")
    plan = "\n".join(physical_plan_lines(df))
    assert "FileScan changelake" in plan
    assert "PushedFilters: [IsNotNull(c1), GreaterThan(c1,420)]" in plan
    assert "ReadSchema: struct<c1:bigint,c2:int>" in plan
    assert "Join" not in plan and "_metadata" not in plan
    assert sorted(r.v for r in df.collect()) == [1] * sum(1 for i in range(421, 450) if i % 11)

    state = state_of(session, session.catalog.table("t"))
    scan = (
        state_relation(spark, session.warehouse, state, identity=True)
        .frame(spark)
        .where(F.col(POS) < 3)
    )
    assert "FileScan changelake" in "\n".join(physical_plan_lines(scan))
    got = scan.select(FILE, POS, RID).collect()
    live = (
        state_relation(spark, session.warehouse, state, identity=True)
        .frame(spark)
        .select(FILE, POS, RID)
    )
    assert sorted(got) == sorted(r for r in live.collect() if r[POS] < 3)
    assert got and all(r[POS] < 3 for r in got)


def test_many_deleted_positions_are_joined_without_a_broadcast(spark, session, monkeypatch):
    """Past BROADCAST_POSITIONS (and DRIVER_POSITIONS) the positions are read by Spark and
    joined by a shuffle: a broadcast of millions of them would not fit in memory."""
    _history(session)
    expected = [sorted(map(tuple, session.sql(q).collect())) for q in QUERIES]
    monkeypatch.setattr(deletion, "DRIVER_POSITIONS", 0)
    monkeypatch.setattr(deletion, "BROADCAST_POSITIONS", 0)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        plan = physical_plan_lines(session.sql(QUERIES[0]))
        (anti,) = [line for line in plan if "LeftAnti" in line]
        assert "SortMergeJoin" in anti
        assert [sorted(map(tuple, session.sql(q).collect())) for q in QUERIES] == expected
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")


def test_a_persisted_read_through_the_expressions_is_reused(spark):
    """Spark finds a cached plan by comparing expressions: two copies of one of ours must be
    equal, or every persisted read (row-level writes persist their matches) is recomputed."""
    df = local_dataframe(spark, [("f", 1), ("f", 2)], [("name", "string"), ("pos", "bigint")])
    hit = native.in_positions(spark, F.col("name"), F.col("pos"), {"f": pa.array([2], pa.int64())})
    (value,) = native.file_values(spark, F.col("name"), {"f": (7,)}, 1)
    cached = df.where(~hit).select("pos", value.alias("v")).persist()
    try:
        assert [tuple(r) for r in cached.collect()] == [(1, 7)]
        plan = "\n".join(physical_plan_lines(cached.select("v")))
        assert "InMemoryTableScan" in plan, plan
    finally:
        cached.unpersist()


def test_the_jar_compiles_from_the_shipped_sources(tmp_path, monkeypatch):
    """A new machine has no cached jar: it is compiled from storage/jvm with javac."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native.jar.cache_clear()
    try:
        built = native.jar()
        assert built is not None and built.parent == tmp_path / "changelake"
        with zipfile.ZipFile(built) as jar:
            names = set(jar.namelist())
        assert {
            "io/changelake/spark/InPositions.class",
            "io/changelake/spark/FileValue.class",
            "io/changelake/spark/PerFile.class",
        } <= names
    finally:
        native.jar.cache_clear()

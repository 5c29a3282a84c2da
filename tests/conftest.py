"""One SparkSession per test run; a fresh warehouse per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))

from support.postgres import create_database, running_postgres  # noqa: E402

import changelake  # noqa: E402
from changelake.clock import ManualClock  # noqa: E402
from changelake.spark.setup import JVM_OPTIONS  # noqa: E402

# The tests' data is a few rows per file. Spark's generated code (whole-stage and per expression)
# is compiled for every new query, and each compiled class makes the JVM compile and deoptimise
# its own code again: interpreted, the statements of a JFR-profiled round ran 20% faster (UPDATE
# 1.4 -> 1.05 s, CHANGES of a join view 2.3 -> 1.8 s). The same expressions in generated code
# are tested in tests/storage/test_native.py, and bench/ and serve run with code generation.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "2g",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


# The worker processes of the multi-process tests start a JVM each and stop it within a minute:
# compiled by C1 alone, a worker that connects and runs a dozen transactions took 38 s instead of
# 47. This process's JVM runs the whole suite and keeps both compilers (C1 alone: 20% slower).
os.environ.setdefault(JVM_OPTIONS, "-XX:TieredStopAtLevel=1")


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from changelake.spark.private import quiet_task_failure_logs
    from changelake.spark.setup import spark_conf

    builder = SparkSession.builder.master("local[2]").appName("changelake-tests")
    for key, value in spark_conf(jvm_options="").items():
        builder = builder.config(key, value)
    for key, value in TEST_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    quiet_task_failure_logs(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    with running_postgres() as url:
        yield url


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def session(spark, tmp_path, clock) -> Iterator[changelake.Session]:
    s = changelake.connect(str(tmp_path / "wh"), spark=spark, clock=clock)
    yield s
    s.close()


# How scans read changelake's data files: its own Parquet file format (deletion vectors and
# per-file constants inside the reader), or Spark's with changelake's expressions over it (the
# fallback of a session without the format).
READ_PATHS = ("changelake-reader", "spark-reader")


@contextmanager
def spark_settings(spark, conf: dict[str, str]) -> Iterator[None]:
    """Spark's configuration set to ``conf`` in the block, and back to what it was after."""
    old = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def read_path(spark, path: str) -> Iterator[str]:
    from changelake.spark import native

    spark.conf.set(native.READER, str(path == READ_PATHS[0]).lower())
    try:
        yield path
    finally:
        spark.conf.unset(native.READER)


# How UPDATE and DELETE read their target (dml/strategy.py): the tests' tables are small, so
# ``auto`` reads them in one pass; the other way is forced to be tested too.
ROW_LEVEL_PLANS = ("one-pass", "two-phase")


@contextmanager
def row_level_plan(spark, plan: str) -> Iterator[str]:
    from changelake.runtime.env import ROW_LEVEL_PLAN

    spark.conf.set(ROW_LEVEL_PLAN, plan)
    try:
        yield plan
    finally:
        spark.conf.unset(ROW_LEVEL_PLAN)


@contextmanager
def older_catalog(session: changelake.Session, clock, version: int, *ddl: str):
    """The warehouse of ``session`` opened again as a catalog of schema ``version`` left it:
    ``ddl`` (what that version lacks) run and the version recorded, then ``session`` closed and
    a new session connected (which migrates it); closed after the block."""
    with session.catalog.engine.begin() as conn:
        for statement in ddl:
            conn.execute(sa.text(statement))
        conn.execute(
            sa.text(f"UPDATE cl_meta SET value = '{version}' WHERE key = 'schema_version'")
        )
    warehouse = session.warehouse.root
    session.close()
    again = changelake.connect(warehouse, spark=session.spark, clock=clock)
    try:
        yield again
    finally:
        again.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/catalog.db"
    server = request.getfixturevalue("pg_server")
    return create_database(server, "t_" + uuid.uuid4().hex[:12])


def state_of(session: changelake.Session, info, version: int | None = None):
    """The table ``info`` at ``version`` (default: now) as a statement of ``session`` reads it."""
    from changelake.txn.context import StatementContext

    return StatementContext(session.catalog, session.clock, session.transaction).state(
        info, version
    )


@contextmanager
def spark_jobs(spark) -> Iterator[Callable[[], int]]:
    """Count the Spark jobs this thread runs in the block, whatever job group they run in (the
    code under test opens groups of its own): a job tag marks them all. The count waits until
    Spark's listener has seen every job submitted so far, so a job just run is never missed."""
    sc = spark.sparkContext
    tag = f"changelake-test-{uuid.uuid4().hex}"

    def count() -> int:
        sc._jsc.sc().listenerBus().waitUntilEmpty()
        return len(sc._jsc.sc().statusTracker().getJobIdsForTag(tag))

    sc.addJobTag(tag)
    try:
        yield count
    finally:
        sc.removeJobTag(tag)


def conflict_of_a_key_not_held(session: changelake.Session, name: str) -> str:
    """The message of the ConflictError that applying a delta which deletes a row key keyed
    table ``name`` (dynamic or external) does not hold raises (``dml.keyed.apply_delta``, as a
    refresh or a follow applies one)."""
    from changelake.dml.common import Target
    from changelake.dml.keyed import apply_delta
    from changelake.errors import ConflictError
    from changelake.spark.relation import Relation

    info = session.catalog.table(name)
    delta = session.spark.createDataFrame(
        [("DELETE", False, '["no such key"]')],
        "`METADATA$ACTION` string, `METADATA$ISUPDATE` boolean, `METADATA$ROW_ID` string",
    )
    target = Target(info, state_of(session, info))
    try:
        apply_delta(
            session.spark, session.warehouse, target, Relation.of_frame(delta), statement_id="t"
        )
    except ConflictError as e:
        return str(e)
    raise AssertionError(f"a delete of a key {name} does not hold was applied")


def rows_read(spark, action) -> int:
    """The rows the scans of every Spark job ``action`` runs read (the stages' input records)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    no_quantiles = spark.sparkContext._gateway.new_array(spark.sparkContext._gateway.jvm.double, 0)

    def stages() -> dict:
        found = store.stageList(None, False, False, no_quantiles, None)
        return {
            (found.apply(i).stageId(), found.apply(i).attemptId()): found.apply(i).inputRecords()
            for i in range(found.size())
        }

    before = stages()
    action()
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return sum(n for key, n in stages().items() if key not in before)


def rows(df) -> list[tuple]:
    """The rows of ``df`` as sorted tuples (None sorts first)."""
    return sorted((tuple(r) for r in df.collect()), key=lambda r: [(v is not None, v) for v in r])


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

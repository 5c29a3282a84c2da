"""The session: one SparkSession, one catalog, one warehouse; SQL and Python entry points."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from changelake.catalog.model import StreamAdvance, TableCommit, TableInfo
from changelake.catalog.store import Catalog
from changelake.clock import Clock, SystemClock
from changelake.errors import JavaNotFoundError, TimeTravelError, TransactionError
from changelake.storage.snapshot import TableState, read_state
from changelake.storage.warehouse import Warehouse
from changelake.transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from changelake.changes.plan import ChangePlan

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    "spark.sql.parquet.enableVectorizedReader": "true",
}
_RUNTIME_CONF = ("spark.sql.parquet.outputTimestampType",)


def check_java() -> None:
    """Raise JavaNotFoundError unless Java 17 or newer can be started."""
    java = (
        os.path.join(os.environ["JAVA_HOME"], "bin", "java")
        if os.environ.get("JAVA_HOME")
        else None
    )
    java = java if java and os.path.exists(java) else shutil.which("java")
    how = (
        "changelake runs on Apache Spark, which needs Java 17 or newer: install it (for example"
        " `sudo apt-get install -y openjdk-17-jre-headless`) or set JAVA_HOME, then try again."
    )
    if java is None:
        raise JavaNotFoundError(f"Java was not found. {how}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except OSError as e:
        raise JavaNotFoundError(f"Java at {java} could not run ({e}). {how}") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(found.group(1)) if found else 0
    if major == 1 and found and found.group(2):
        major = int(found.group(2))
    if major < 17:
        raise JavaNotFoundError(f"Found Java {major or 'of unknown version'} at {java}. {how}")


def _default_spark() -> SparkSession:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    check_java()
    builder = SparkSession.builder.master(os.environ.get("CHANGELAKE_SPARK_MASTER", "local[*]"))
    builder = builder.appName("changelake").config("spark.driver.memory", "4g")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    quiet_task_failure_logs(spark)
    return spark


# Spark loggers that print a Java stack trace when a task fails; the failure itself reaches the
# caller as an exception, which changelake translates (a bad value, a NULL in a NOT NULL column).
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.util.Utils",
)


def quiet_task_failure_logs(spark: SparkSession) -> None:
    """Silence task-failure stack traces in the console of a Spark session changelake started."""
    jvm = spark.sparkContext._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for name in _TASK_FAILURE_LOGGERS:
        configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)


def quiet_query_context_loggers() -> None:
    """Stop PySpark logging a Java stack trace for every analysis error it raises.

    changelake catches those errors and reports them in its own words.
    """
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def new_statement_id() -> str:
    return str(uuid.uuid4())


class Session:
    """A connection to a warehouse. Create it with :func:`changelake.connect`."""

    def __init__(self, spark: SparkSession, catalog: Catalog, warehouse: Warehouse, clock: Clock):
        self.spark = spark
        self.catalog = catalog
        self.warehouse = warehouse
        self.clock = clock
        self.transaction: Transaction | None = None
        self._stream_reads: dict[int, StreamAdvance] = {}
        for key in _RUNTIME_CONF:
            spark.conf.set(key, SPARK_CONF[key])

    # -- public API ---------------------------------------------------------------------------

    def sql(self, text: str) -> DataFrame:
        """Run one SQL statement.

        Queries return a lazy DataFrame; other statements run at once and return a small
        DataFrame saying what they did (statement id, operation, object, version, row counts).
        """
        from changelake.sql.execute import execute

        return execute(self, text)

    def table(self, name: str, *, version: int | None = None) -> DataFrame:
        """The rows of table ``name`` now, or at ``version``."""
        info = self.catalog.table(name)
        return read_state(self.spark, self.warehouse, self.state(info, version))

    def changes(
        self,
        name: str,
        *,
        start: int | dt.datetime | str,
        end: int | dt.datetime | str | None = None,
        information: str = "default",
        before: bool = False,
    ) -> DataFrame:
        """The changes of table ``name`` after ``start`` up to ``end`` (default: now).

        Points are a version (int), a timestamp (datetime) or a statement id (str); ``before``
        starts just before the point. ``information`` is "default" (minimum delta),
        "append_only" or "redo". Same result as the SQL ``CHANGES`` clause.
        """
        from changelake.changes.query import changes

        return changes(self, name, start=start, end=end, information=information, before=before)

    def change_plan(
        self,
        name: str,
        *,
        start: int | dt.datetime | str,
        end: int | dt.datetime | str | None = None,
        information: str = "default",
        before: bool = False,
    ) -> ChangePlan:
        """What :meth:`changes` with the same arguments would read, decided from catalog
        metadata alone: the interval, the plan shape, and the files and rows of each side
        (what ``EXPLAIN`` of the SQL form reports)."""
        from changelake.changes.query import change_plan

        return change_plan(
            self, name, start=start, end=end, information=information, before=before
        )

    def stream_has_data(self, name: str) -> bool:
        """SYSTEM$STREAM_HAS_DATA: whether stream ``name`` has changes to consume."""
        from changelake.streams.frontier import has_data

        return has_data(self, name)

    def append(self, name: str, data: Any) -> DataFrame:
        """Append a Spark DataFrame, pandas DataFrame or PyArrow table to table ``name``.

        Columns are matched by name (case-insensitive); missing nullable columns get NULL.
        Returns the same one-row result DataFrame as INSERT.
        """
        from changelake.dml.append import append

        self.begin_statement()  # streams read by earlier queries are not consumed by this write
        return append(self, name, data)

    def close(self) -> None:
        """Release the catalog connection (the SparkSession stays up for others)."""
        self.catalog.close()

    # -- used by the statement layers ---------------------------------------------------------

    def now(self) -> float:
        return round(self.clock.now(), 6)

    def read_version(self, info: TableInfo) -> int:
        """The version this session reads now: inside a transaction, the version current when
        it began (snapshot isolation), else the latest."""
        txn = self.transaction
        if txn is None:
            return info.current_version
        if info.table_id not in txn.pinned:
            at_begin = self.catalog.version_as_of(info.table_id, txn.started_at, inclusive=True)
            txn.pinned[info.table_id] = info.current_version if at_begin is None else at_begin
        return txn.pinned[info.table_id]

    def begin_statement(self) -> None:
        self._stream_reads = {}

    def note_stream_read(self, advance: StreamAdvance) -> None:
        """Record that the running statement read a stream (consumed if the statement commits)."""
        self._stream_reads.setdefault(advance.stream_id, advance)

    def take_stream_reads(self) -> list[StreamAdvance]:
        reads, self._stream_reads = list(self._stream_reads.values()), {}
        return reads

    def state(self, info: TableInfo, version: int | None = None) -> TableState:
        """The table at ``version`` (default: what this session reads now), checked readable."""
        current = self.read_version(info)
        if version is None:
            version = current
        else:
            self.check_readable(info, version)
        state = TableState(
            table_id=info.table_id,
            name=info.name,
            version=version,
            schema=self.catalog.schema_at(info.table_id, version),
            files=tuple(self.catalog.snapshot_files(info.table_id, version)),
        )
        if self.transaction is not None and version == current:
            state = self.transaction.overlay(state)
        return state

    def check_readable(self, info: TableInfo, version: int) -> None:
        """Raise TimeTravelError unless ``version`` of ``info`` exists and is within retention."""
        latest = self.read_version(info)
        if version < 0:
            raise TimeTravelError(
                f"Table {info.name} did not exist at that point: it was created at"
                f" {format_time(info.created_at)} (version 0). Choose a later point."
            )
        if version > latest:
            raise TimeTravelError(
                f"Table {info.name} has no version {version}; its latest version is {latest}."
            )
        if version == latest:
            return
        retention = info.retention_days()
        horizon = self.now() - retention * 86400.0
        successor = self.catalog.version_info(info.table_id, version + 1)
        if version < info.vacuumed_before_version or (
            successor is not None and successor.committed_at < horizon
        ):
            raise TimeTravelError(
                f"Version {version} of table {info.name} is beyond its retention period"
                f" (DATA_RETENTION_TIME_IN_DAYS = {retention:g}); its data may have been removed."
                " Choose a more recent point, or raise the retention for the future."
            )

    def commit(self, commits: Sequence[TableCommit]) -> dict[int, list[int]]:
        """Commit now, or stage inside an open transaction (then versions are empty).

        Streams the statement read are consumed in the same catalog transaction.
        """
        advances = self.take_stream_reads()
        if self.transaction is not None:
            for c in commits:
                self.transaction.stage(c)
            for a in advances:
                self.transaction.stage_advance(a)
            return {}
        if not commits and not advances:
            return {}
        return self.catalog.commit(commits, now=self.now(), advances=advances)

    def begin(self) -> None:
        if self.transaction is not None:
            raise TransactionError("A transaction is already open; COMMIT or ROLLBACK it first.")
        self.transaction = Transaction(started_at=self.now())

    def end(self, *, commit: bool) -> dict[int, list[int]]:
        txn = self.transaction
        if txn is None:
            raise TransactionError(
                f"{'COMMIT' if commit else 'ROLLBACK'} without BEGIN: no transaction is open."
            )
        self.transaction = None
        if not commit or not (txn.staged or txn.advances):
            return {}
        return self.catalog.commit(txn.staged, now=self.now(), advances=list(txn.advances.values()))

    def require_no_transaction(self, what: str) -> None:
        if self.transaction is not None:
            raise TransactionError(
                f"{what} cannot run inside a transaction; COMMIT or ROLLBACK first."
            )


def format_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="milliseconds")


def connect(
    warehouse: str,
    *,
    catalog: str | None = None,
    spark: SparkSession | None = None,
    clock: Clock | None = None,
) -> Session:
    """Open (creating if needed) the warehouse at ``warehouse``.

    ``catalog`` is a database URL (``postgresql://user@host/db``); by default a SQLite file inside
    the warehouse. ``spark`` is an existing SparkSession (e.g. one pointed at a cluster); by
    default a local one is started. ``clock`` replaces the wall clock (tests).
    """
    wh = Warehouse.at(warehouse)
    if catalog is None:
        if not wh.is_local:
            raise ValueError(
                f"Warehouse {warehouse} is not a local directory, so the default SQLite catalog"
                " cannot live in it; pass catalog='postgresql://...'."
            )
        catalog = f"sqlite:///{wh.root.removeprefix('file://')}/catalog.db"
    quiet_query_context_loggers()
    return Session(spark or _default_spark(), Catalog(catalog), wh, clock or SystemClock())

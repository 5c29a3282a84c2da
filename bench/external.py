"""External tables from PostgreSQL (issue 24 item 9): the initial snapshot, and the follow.

Both run against a PostgreSQL server started for the run (``tests/support/postgres.py``, the
server the tests use: wal_level = logical, fsync off) on this machine; source connections commit
with ``synchronous_commit = on``, so a commit is in the WAL, visible to logical decoding, when it
returns.

``external_snapshot``: the initial load of a source table of ``SNAPSHOT_ROWS`` rows (5M at
scale 1.0) by an external table with SCOPE = DEPENDENTS whose one dependent, a view, filters
~10% of them (``SNAPSHOT_SCOPE``). Timed together: CREATE EXTERNAL TABLE (a publication, a slot,
no rows yet) and CREATE VIEW, which bootstraps the view's rows: a second slot's exported
snapshot, parallel JDBC partitions reading the scope's rows in it (the filter runs on the
source), staging, changelake's data files and the commit. The baseline is a plain Spark JDBC
read with the same filter pushed (a subquery as ``dbtable``) and the same partitions, written
as Parquet, in the same process. The rows transferred (the JDBC scans' output rows) and the rows
written are checked to be the source's rows under the filter on both sides.

``external_follow``: a writer thread commits ``RATE`` changes/s (updates, inserts, deletes,
several per transaction) for ``DURATION_S`` seconds while this process runs the follow step
(``external.follow.follow``, as the scheduler of ``changelake serve`` does) every ``FOLLOW_LAG_S``
(the default FOLLOW_LAG). A transaction's latency runs from the return of its COMMIT to the
return of the step that applied it (its catalog commit and the slot advance): p50 and p95, after
a warm-up; each step reports the Spark jobs it ran. Then a backlog of ``BACKLOG`` changes piles
up with nobody following, and ``ALTER EXTERNAL TABLE … REFRESH`` applies it: changes/s through
the follow. REFRESH is run again while the last transaction is not in: a step's batch counts
every message of the slot, BEGIN and COMMIT too, but the step says "more" only when its row
changes alone fill the batch, so one REFRESH stops early past about 40,000 changes here. There
is no baseline run for the follow: the figure compared against is the follow lag (a constant).
"""

from __future__ import annotations

import math
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pyarrow.parquet as pq
import sqlalchemy as sa

from bench.harness import Context, Result, compared, median_of, medians
from changelake.external.postgresql.follow import Followed, follow, table_state
from changelake.runtime.env import Env
from changelake.storage.snapshot import state_relation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT_ROWS = 5_000_000
SNAPSHOT_SCOPE = "v % 10 = 0"  # ~10% of the rows at every scale (v is id mod 1000003)
SNAPSHOT_TARGET = 1.2
FOLLOW_ROWS = 200_000  # the followed table's rows at scale 1.0
RATE = 1_000  # source changes per second
CHANGES_PER_TRANSACTION = 10
DURATION_S = 120.0
WARMUP_S = 10.0
FOLLOW_LAG_S = 1.0
BACKLOG = 200_000  # changes, at scale 1.0
TARGET_P50_S = 1.0  # issue 40: p50 <= 1 s at FOLLOW_LAG = 1 s (issue 24: 2 s)
TARGET_JOBS = 3  # issue 40: Spark jobs per follow step
TARGET_RATE = 5_000  # issue 24: >= 5,000 changes/s applied
CONNECTION = "bench_pg"
_SOURCE_COLUMNS = (
    "id bigint PRIMARY KEY, v int, s text, d double precision, ts timestamp with time zone"
)
_SOURCE_ROWS = (
    "SELECT g, (g %% 1000003)::int, 'row-' || (g * 7919 %% 1000003), g / 3.0,"
    " timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second'"
    " FROM generate_series(%s::bigint, %s::bigint) g"
)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of this module, as the runner lists them (``NAME``, ``run``)."""

    NAME: str
    run: Callable[[Context], Result]


@dataclass(frozen=True)
class Source:
    """A database on the benchmark's server: its psycopg connection string and where it is."""

    dsn: str
    port: int
    database: str

    def connect(self, **kwargs: object) -> psycopg.Connection:
        return psycopg.connect(self.dsn, options="-c synchronous_commit=on", **kwargs)


@contextmanager
def source_database() -> Iterator[Source]:
    """A PostgreSQL server for the benchmark, with a fresh database on it."""
    tests = str(REPO / "tests")  # the tests' throwaway server; bench has no other
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from support.postgres import create_database, running_postgres

    with running_postgres() as server:
        name = "bench_" + uuid.uuid4().hex[:10]
        url = sa.make_url(create_database(server, name))
        dsn = f"host={url.host} port={url.port} dbname={name} user={url.username}"
        assert url.port is not None
        yield Source(dsn, url.port, name)


def create_source_table(source: Source, table: str, rows: int) -> None:
    with source.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} ({_SOURCE_COLUMNS})")
        for low in range(1, rows + 1, 1_000_000):
            conn.execute(f"INSERT INTO {table} {_SOURCE_ROWS}", (low, min(rows, low + 999_999)))
        conn.execute(f"VACUUM ANALYZE {table}")  # the row estimate sizes the JDBC partitions


@contextmanager
def connected(ctx: Context, source: Source, *, views: tuple[str, ...] = ()) -> Iterator[None]:
    """The session's connection to ``source`` for the block; its external tables are dropped
    after it (with their slots and publications, while the server is up), ``views`` on them
    first."""
    s = ctx.session
    s.sql(
        f"CREATE OR REPLACE CONNECTION {CONNECTION} TYPE = POSTGRES OPTIONS (host => '127.0.0.1',"
        f" port => {source.port}, database => '{source.database}', user => 'postgres')"
    )
    try:
        yield
    finally:
        for view in views:
            s.sql(f"DROP VIEW IF EXISTS {view}")
        for ext in s.catalog.list_external_tables():
            if ext.definition.connection == CONNECTION:
                s.sql(f"DROP EXTERNAL TABLE {ext.name}")
        s.sql(f"DROP CONNECTION {CONNECTION}")


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank ``p`` percentile (0 < p <= 100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def totals(ctx: Context, table: str) -> tuple[int, int]:
    """(rows, sum of v) of changelake table ``table``."""
    found = ctx.session.sql(f"SELECT count(*), coalesce(sum(v), 0) FROM {table}").first()
    assert found is not None
    return int(found[0]), int(found[1])


def source_totals(source: Source, table: str) -> tuple[int, int]:
    with source.connect() as conn:
        found = conn.execute(f"SELECT count(*), coalesce(sum(v), 0) FROM {table}").fetchone()
    assert found is not None
    return int(found[0]), int(found[1])


def source_count(source: Source, table: str, where: str) -> int:
    with source.connect() as conn:
        found = conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()
    assert found is not None
    return int(found[0])


def held(ctx: Context, table: str) -> DataFrame:
    """Every row external table ``table`` holds (read past the check that keeps queries on a
    SCOPE = DEPENDENTS table within its scope)."""
    s = ctx.session
    ext = s.catalog.find_external_table(table)
    assert ext is not None
    return state_relation(ctx.spark, s.warehouse, table_state(s.catalog, ext)).frame(ctx.spark)


class JdbcReads:
    """The rows Spark's JDBC scans returned (their "number of output rows"), summed over the SQL
    executions started after ``mark()``, read from the SQL status store."""

    def __init__(self, spark: SparkSession):
        self._store = spark._jsparkSession.sharedState().statusStore()
        self._seen: set[int] = set()
        self.mark()

    def _execution_ids(self) -> set[int]:
        executions = self._store.executionsList()
        return {executions.apply(i).executionId() for i in range(executions.size())}

    def mark(self) -> None:
        self._seen = self._execution_ids()

    def since(self) -> int:
        """Rows read since ``mark()`` (then marks again)."""
        new = self._execution_ids() - self._seen
        self._seen |= new
        return sum(self._rows_read(execution) for execution in new)

    def _rows_read(self, execution: int) -> int:
        values = self._store.executionMetrics(execution)  # "1,234" by accumulator id
        nodes = self._store.planGraph(execution).allNodes()
        total = 0
        for node in (nodes.apply(i) for i in range(nodes.size())):
            if node.name().startswith("Scan JDBCRelation"):
                metrics = node.metrics()
                for metric in (metrics.apply(k) for k in range(metrics.size())):
                    found = values.get(metric.accumulatorId())
                    if metric.name() == "number of output rows" and found.isDefined():
                        total += int(found.get().replace(",", ""))
        return total


# --- external_snapshot ---------------------------------------------------------------------------


def run_snapshot(ctx: Context) -> Result:
    rows = ctx.rows(SNAPSHOT_ROWS)
    table, view, source_table = "bench_ext_snapshot", "bench_ext_snapshot_v", "snapshot_src"
    output = ctx.path("external_snapshot_baseline")
    with source_database() as source, connected(ctx, source, views=(view,)):
        create_source_table(source, source_table, rows)
        expected = source_count(source, source_table, SNAPSHOT_SCOPE)
        s, spark = ctx.session, ctx.spark
        partitions = max(1, min(spark.sparkContext.defaultParallelism, rows // 50_000 + 1))
        reads = JdbcReads(spark)
        created: list[float] = []

        def changelake() -> None:
            began = time.perf_counter()
            s.sql(
                f"CREATE EXTERNAL TABLE {table} FROM CONNECTION {CONNECTION}"
                f" TABLE 'public.{source_table}' SCOPE = DEPENDENTS"
            )
            created.append(time.perf_counter() - began)
            s.sql(f"CREATE VIEW {view} AS SELECT * FROM {table} WHERE {SNAPSHOT_SCOPE}")

        def baseline() -> None:
            scoped = f"(SELECT * FROM public.{source_table} WHERE {SNAPSHOT_SCOPE}) AS scoped"
            reader = (
                spark.read.format("jdbc")
                .option("url", f"jdbc:postgresql://127.0.0.1:{source.port}/{source.database}")
                .option("dbtable", scoped)
                .option("user", "postgres")
                .option("driver", "org.postgresql.Driver")
                .option("fetchsize", "10000")
                .option("partitionColumn", "id")
                .option("lowerBound", "1")
                .option("upperBound", str(rows + 1))
                .option("numPartitions", str(partitions))
            )
            reader.load().write.mode("overwrite").parquet(output)

        ours, theirs = [], []
        for round_ in range(ctx.repeat + 1):  # the first round warms up, untimed
            s.sql(f"DROP VIEW IF EXISTS {view}")  # (narrows the table's scope to no row)
            s.sql(f"DROP EXTERNAL TABLE IF EXISTS {table}")
            reads.mark()
            a = ctx.clock.measure(changelake)
            ours_read = reads.since()
            b = ctx.clock.measure(baseline)
            theirs_read = reads.since()
            if round_:
                ours.append(a)
                theirs.append(b)
        ours_rows = held(ctx, table).count()
        theirs_rows = pq.ParquetDataset(output).read(columns=["id"]).num_rows
    transferred = (ours_read, ours_rows, theirs_read, theirs_rows)
    if any(n != expected for n in transferred):
        raise AssertionError(
            f"{expected:,} source rows satisfy {SNAPSHOT_SCOPE}, but changelake read"
            f" {ours_read:,} and holds {ours_rows:,}; the baseline read {theirs_read:,} and"
            f" wrote {theirs_rows:,}"
        )
    create_s = median_of(created[1:])
    return compared(
        SNAPSHOT.NAME,
        f"CREATE EXTERNAL TABLE … SCOPE = DEPENDENTS of a {rows:,}-row PostgreSQL table (bigint"
        f" key, int, text, double, timestamptz), then CREATE VIEW … WHERE {SNAPSHOT_SCOPE}"
        f" (~10%): the view's scope bootstrapped (second slot + exported snapshot, parallel"
        " JDBC read of the scope's rows written once as the table's files, commit)",
        medians(ours),
        medians(theirs),
        baseline=f"spark.read.format('jdbc') of (SELECT * … WHERE {SNAPSHOT_SCOPE}), {partitions}"
        " partitions on id, written as Parquet (no slot, no snapshot import, no row keys or"
        " commit)",
        target=SNAPSHOT_TARGET,
        rows=expected,
        notes=f"rows transferred (JDBC scan output): changelake {ours_read:,} (the table then"
        f" holds {ours_rows:,}), baseline {theirs_read:,} (wrote {theirs_rows:,}); the source"
        f" has {expected:,} under the scope, of {rows:,}; CREATE EXTERNAL TABLE alone (no rows"
        f" yet) median {create_s:.2f} s of the changelake time",
    )


# --- external_follow -----------------------------------------------------------------------------


@dataclass
class Writer:
    """Commits random changes to the source table at ``rate`` changes/s, in transactions of
    ``per_transaction`` (at least 4: 60% updates, 25% inserts, the rest deletes); for each
    transaction, the time its COMMIT returned and the WAL position read right after it
    (``after[k]``: transaction ``k`` ends at or before it, the next one after it)."""

    source: Source
    table: str
    ids: int  # the source table holds ids 1..ids
    rate: float
    per_transaction: int = CHANGES_PER_TRANSACTION
    committed: list[float] = field(default_factory=list)
    after: list[int] = field(default_factory=list)
    changes: int = 0
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._random = random.Random(24)
        self._next = self.ids + 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="source-writer")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            with self.source.connect(autocommit=True) as conn:
                began, done = time.perf_counter(), 0
                while not self._stop.is_set():
                    done += self.transaction(conn)
                    pause = began + done / self.rate - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
        except BaseException as e:  # noqa: BLE001 - raised again by stop()
            self.error = e

    def transaction(self, conn: psycopg.Connection) -> int:
        """One transaction of updates, inserts and deletes; how many rows it changed."""
        r, n = self._random, self.per_transaction
        updates, inserts = n * 6 // 10, n * 25 // 100
        deletes = n - updates - inserts
        touched = r.sample(range(1, self._next), updates + deletes)
        new = list(range(self._next, self._next + inserts))
        self._next += inserts
        with conn.transaction():
            changed = conn.execute(
                f"UPDATE {self.table} SET v = v + 1, s = s || '+' WHERE id = ANY(%s)",
                (touched[:updates],),
            ).rowcount
            changed += conn.execute(
                f"INSERT INTO {self.table} {_SOURCE_ROWS}", (new[0], new[-1])
            ).rowcount
            changed += conn.execute(
                f"DELETE FROM {self.table} WHERE id = ANY(%s)", (touched[updates:],)
            ).rowcount
        self.committed.append(time.perf_counter())
        lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert lsn is not None
        self.after.append(_lsn(lsn[0]))
        self.changes += changed
        return changed


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass(frozen=True)
class Step:
    """One follow step: when it returned, the source position it reached, what it did."""

    returned: float
    position: int
    seconds: float
    followed: Followed


def position(ctx: Context, table: str) -> int:
    ext = ctx.session.catalog.find_external_table(table)
    assert ext is not None and ext.position is not None
    return _lsn(ext.position)


def follow_step(ctx: Context, table: str) -> Step:
    s = ctx.session
    ext = s.catalog.find_external_table(table)
    assert ext is not None
    began = time.perf_counter()
    followed = follow(Env.of(s.catalog, s.clock, ctx.spark, s.warehouse), ext)
    returned = time.perf_counter()
    assert followed.source_lsn is not None
    return Step(returned, _lsn(followed.source_lsn), returned - began, followed)


def latencies(writer: Writer, steps: list[Step], *, since: float) -> list[float]:
    """Per transaction committed after ``since``, from its COMMIT to the step that applied it
    (the first whose position passed the WAL position read after the transaction before)."""
    found, k = [], 1
    for step in steps:
        while k < len(writer.after) and writer.after[k - 1] < step.position:
            if writer.committed[k] >= since:
                found.append(step.returned - writer.committed[k])
            k += 1
    return found


def run_follow(ctx: Context) -> Result:
    rows = ctx.rows(FOLLOW_ROWS)
    duration = max(20.0, DURATION_S * ctx.scale)
    backlog = ctx.count(BACKLOG, minimum=10_000)
    table, source_table = "bench_ext_follow", "follow_src"
    with source_database() as source, connected(ctx, source):
        create_source_table(source, source_table, rows)
        ctx.session.sql(
            f"CREATE EXTERNAL TABLE {table} FROM CONNECTION {CONNECTION}"
            f" TABLE 'public.{source_table}'"
        )
        writer = Writer(source, source_table, rows, RATE)
        steps: list[Step] = []
        writer.start()
        try:
            began = time.perf_counter()
            while time.perf_counter() - began < duration:
                # a step starts FOLLOW_LAG after the last one started, at once if it took longer
                started = time.perf_counter()
                steps.append(follow_step(ctx, table))
                while steps[-1].followed.more:
                    steps.append(follow_step(ctx, table))
                time.sleep(max(0.0, started + FOLLOW_LAG_S - time.perf_counter()))
        finally:
            writer.stop()
        steps.append(follow_step(ctx, table))  # what the last tick left
        found = latencies(writer, steps, since=began + WARMUP_S)
        applied = writer.changes

        with source.connect(autocommit=True) as conn:  # nobody follows: a backlog piles up
            before = writer.changes
            while writer.changes - before < backlog:
                writer.transaction(conn)
        piled, refreshes = writer.changes - before, 0

        def catch_up() -> None:  # until the last transaction is in (one REFRESH should do)
            nonlocal refreshes
            while position(ctx, table) <= writer.after[-2]:
                ctx.session.sql(f"ALTER EXTERNAL TABLE {table} REFRESH")
                refreshes += 1

        caught_up = ctx.clock.measure(catch_up)
        held, expected = totals(ctx, table), source_totals(source, source_table)
    if held != expected:
        raise AssertionError(f"{table} holds (rows, sum(v)) {held}, its source {expected}")
    if not found:
        raise AssertionError("no transaction was seen applied after the warm-up")
    p50, p95 = percentile(found, 50), percentile(found, 95)
    busy = [s for s in steps if s.followed.transactions]
    step_s = percentile([s.seconds for s in busy], 50)
    jobs = sorted(s.followed.spark_jobs for s in busy)
    rate = piled / caught_up.wall_s
    return Result(
        name=FOLLOW.NAME,
        description=f"a {rows:,}-row PostgreSQL table taking {RATE:,} changes/s (transactions of"
        f" {CHANGES_PER_TRANSACTION}: 60% updates, 25% inserts, 15% deletes) for {duration:.0f}"
        f" s, followed every {FOLLOW_LAG_S:g} s: source COMMIT -> applied in changelake, p50"
        " (p95 and the rate a backlog is applied at in notes)",
        changelake_s=p50,
        baseline_s=FOLLOW_LAG_S,
        baseline=f"the follow lag, {FOLLOW_LAG_S:g} s (a constant)",
        ratio=p50 / FOLLOW_LAG_S,
        ratio_meaning="p50 latency / follow lag",
        target=f"p50 <= {TARGET_P50_S:g} s, <= {TARGET_JOBS} Spark jobs per step and >="
        f" {TARGET_RATE:,} changes/s applied",
        met=p50 <= TARGET_P50_S and jobs[-1] <= TARGET_JOBS and rate >= TARGET_RATE,
        rows=applied,
        notes=f"latency p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(found):.2f} s over"
        f" {len(found):,} transactions; {applied:,} changes applied in {len(busy)} steps"
        f" (median {step_s:.2f} s), Spark jobs per step: median {percentile(jobs, 50)}, min"
        f" {jobs[0]}, max {jobs[-1]}; a backlog of {piled:,} changes applied in"
        f" {caught_up.wall_s:.2f} s by {refreshes} REFRESH statement(s): {rate:,.0f}"
        " changes/s",
        extra={
            "p50_s": p50,
            "p95_s": p95,
            "max_s": max(found),
            "median_step_s": step_s,
            "spark_jobs_per_step": float(percentile(jobs, 50)),
            "backlog_changes_per_s": rate,
        },
    )


SNAPSHOT = Benchmark("external_snapshot", run_snapshot)
FOLLOW = Benchmark("external_follow", run_follow)

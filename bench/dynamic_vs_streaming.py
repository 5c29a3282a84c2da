"""A GROUP BY dynamic table against Spark Structured Streaming's own stateful GROUP BY (issue 40
item 5: the refresh after an insert-only append in <= 0.8x the time of one micro-batch).

Both keep ``SELECT g, SUM(v) AS total, COUNT(*) AS n FROM fact GROUP BY g`` over 10M rows in 100k
groups: SUM and COUNT(*), which both maintain by adding per-group state (a MIN/MAX or AVG would
send changelake's refresh through its persist-and-count step, section 7 of DESIGN.md). Each
round appends the same 10k rows, spread over the groups (10k groups touched), to both sides
(untimed), then times each side's update, in alternating order; the first round warms up.

- changelake: ``ALTER DYNAMIC TABLE ... REFRESH``, INCREMENTAL (checked on its history row,
  whose Spark jobs the notes give): the appended rows summed per group, combined with the
  stored state of the touched groups, applied as updates.
- Structured Streaming, in the same SparkSession: a query over a Parquet directory (file source,
  schema given, no maxFilesPerTrigger), ``groupBy(g).agg(SUM, COUNT(*))`` in update mode with the
  default state store (HDFS-backed, checkpoint in the scratch directory), ``foreachBatch``
  appending each batch's updated groups, with the batch id, to a Parquet sink. Its shuffle (=
  state store) partitions are the session's ``spark.sql.shuffle.partitions``, 8 in changelake's
  sessions, which is what a user would pick for 2 cores and 100k groups (Spark's default 200
  makes every micro-batch run 200 tiny state store tasks); no setting is changed. Its first
  micro-batch reads the initial 10M rows (untimed). A round's rows are written as one Parquet
  file beside the source directory (untimed); the timed part moves that file into the directory
  (a rename) and waits in ``processAllAvailable`` until the micro-batch that reads it has
  committed and the next trigger found nothing new: the query's default trigger starts a
  micro-batch as soon as the last ends and polls every 10 ms while idle, so the figure is one
  micro-batch plus at most one polling delay and one empty listing (the notes give the
  micro-batch's own ``triggerExecution`` and ``addBatch``).

A running query's polling costs CPU (the notes say how much), which would slow the refresh timed
beside it on a 2-core machine; so the query is stopped while changelake refreshes and started
again from its checkpoint before its own timed micro-batch, untimed, its state loaded into
memory by a micro-batch of an empty file: the timed micro-batch finds the query as a
long-running one would, warm and with its state in memory.

After the last round, the dynamic table's rows of the groups the appends touched must equal the
sink's latest rows of those groups, and the row and group counts and sums over all groups both
sides hold must equal the aggregate computed from the fact.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from bench.harness import Context, Result, Sample, SparkJobClock, compared, medians

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery, StreamingQueryProgress

    from changelake.session import Session

NAME = "dynamic_vs_streaming"
TARGET = 0.8
GROUPS = 100_000
APPENDED = 10_000
FILES = 8
FACT, DT = "bench_dvs_fact", "bench_dvs_dt"
SCHEMA = "id BIGINT, g BIGINT, v INT"
AGGREGATES = ("SUM(v) AS total", "COUNT(*) AS n")


def run(ctx: Context) -> Result:
    s, spark = ctx.session, ctx.spark
    rows = ctx.rows()
    groups = max(100, min(GROUPS, rows // 100))
    appended = ctx.count(APPENDED, minimum=100)

    def select(lo: int, hi: int, files: int, group: str) -> str:
        return (
            f"SELECT id, {group} AS g, CAST(id % 1000003 AS INT) AS v"
            f" FROM range({lo}, {hi}, 1, {files})"
        )

    def new_rows(round_: int) -> str:  # 7919 is prime to the group count: distinct groups
        lo = rows + round_ * appended
        return select(lo, lo + appended, 1, f"id * 7919 % {groups}")

    initial = select(0, rows, FILES, f"id DIV {max(1, rows // groups)}")
    s.sql(f"DROP DYNAMIC TABLE IF EXISTS {DT}")
    s.sql(f"CREATE OR REPLACE TABLE {FACT} AS {initial}")
    s.sql(
        f"CREATE DYNAMIC TABLE {DT} TARGET_LAG = '1 day'"
        f" AS SELECT g, {', '.join(AGGREGATES)} FROM {FACT} GROUP BY g"
    )
    stream = _Stream(ctx, initial)
    refresh_jobs: list[int] = []
    batch_jobs: list[tuple[int, float]] = []

    def refresh() -> Sample:
        stream.stop()  # not polling beside the refresh
        sample = ctx.clock.measure(lambda: s.sql(f"ALTER DYNAMIC TABLE {DT} REFRESH"))
        record = s.catalog.refresh_history(s.catalog.table(DT).table_id, limit=1)[0].record
        assert record.action == "INCREMENTAL", record
        refresh_jobs.append(record.spark_jobs)
        return sample

    def micro_batch() -> Sample:
        stream.resume()
        jobs = SparkJobClock(spark, group=stream.run_id)
        sample = ctx.clock.measure(stream.next_batch)
        batch_jobs.append(jobs.since())
        stream.check_batch(appended)
        return sample

    samples: dict[str, list[Sample]] = {"refresh": [], "micro-batch": []}
    actions = {"refresh": refresh, "micro-batch": micro_batch}
    try:
        for round_ in range(ctx.repeat + 1):  # the first round warms up, untimed
            s.sql(f"INSERT INTO {FACT} {new_rows(round_)}")
            stream.stage(spark.sql(new_rows(round_)))
            for key in list(actions)[round_ % 2 :] + list(actions)[: round_ % 2]:
                sample = actions[key]()
                if round_:
                    samples[key].append(sample)
        stream.resume()
        time.sleep(1.0)
        idle = ctx.clock.measure(lambda: time.sleep(2.0))
        _check_same(s, s.sql(f"SELECT g, total, n FROM {DT}"), stream.latest(), rows=rows)
    finally:
        stream.stop()
    timed = stream.durations[-ctx.repeat :]
    return compared(
        NAME,
        f"GROUP BY dynamic table ({rows} rows, {groups} groups, SUM/COUNT(*)) after an"
        f" insert-only append of {appended} rows to {appended} groups: INCREMENTAL refresh vs one"
        " Structured Streaming micro-batch of the same aggregate",
        medians(samples["refresh"]),
        medians(samples["micro-batch"]),
        baseline="Spark Structured Streaming in the same session: file source, groupBy().agg()"
        " in update mode, HDFS-backed state store, foreachBatch to Parquet; the micro-batch of"
        " the appended file",
        target=TARGET,
        rows=rows,
        notes=f"median of {ctx.repeat}; refresh: INCREMENTAL, {max(refresh_jobs)} Spark jobs;"
        f" micro-batch: {max(n for n, _ in batch_jobs[1:])} Spark jobs"
        f" ({statistics.median(t for _, t in batch_jobs[1:]):.3f} s inside them),"
        f" triggerExecution {_median_ms(timed, 'triggerExecution')} ms, addBatch"
        f" {_median_ms(timed, 'addBatch')} ms (its progress report); streaming shuffle and state"
        f" store partitions: {stream.partitions} (the session's spark.sql.shuffle.partitions),"
        f" {stream.provider.rsplit('.', 1)[-1]}; a running query idle uses"
        f" {idle.cpu_s * 500:.0f} CPU-ms per second, so it is stopped while changelake"
        f" refreshes; starting it again with an empty micro-batch that loads its state (untimed)"
        f" takes {statistics.median(stream.restarts):.3f} s",
    )


class _Stream:
    """The Structured Streaming side: a query over a Parquet directory, its sink and checkpoint,
    started and stopped around changelake's refreshes."""

    def __init__(self, ctx: Context, initial: str):
        spark = self._spark = ctx.spark
        root = Path(ctx.path("bench_dvs_stream"))
        shutil.rmtree(root, ignore_errors=True)
        self._source, self._staging = root / "source", root / "staging"
        self._checkpoint, self._sink = str(root / "checkpoint"), str(root / "sink")
        self.partitions = spark.conf.get("spark.sql.shuffle.partitions")
        self.provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
        self.durations: list[dict[str, int]] = []  # of every micro-batch that read rows
        self.restarts: list[float] = []  # seconds to start again and load the state
        spark.sql(initial).write.parquet(str(self._source))
        spark.createDataFrame([], SCHEMA).coalesce(1).write.parquet(str(self._staging / "empty"))
        (self._empty,) = (self._staging / "empty").glob("part-*.parquet")
        self._staged: Path | None = None
        self._files = 0
        self._query: StreamingQuery | None = None
        self._batch = -1  # the last micro-batch that ran
        self.resume()  # its first micro-batch reads the initial rows

    @property
    def run_id(self) -> str:
        assert self._query is not None
        return str(self._query.runId)

    def resume(self) -> None:
        """Start the query (if stopped) and let it load its state: a started query reads it
        from the checkpoint in its first micro-batch, here one of an empty file."""
        if self._query is not None:
            return
        began = time.perf_counter()
        if self._batch >= 0:
            shutil.copy(self._empty, self._next_name())
        sink = self._sink

        def append(batch: DataFrame, batch_id: int) -> None:
            batch.selectExpr("*", f"{batch_id} AS batch").write.mode("append").parquet(sink)

        self._query = (
            self._spark.readStream.schema(SCHEMA)
            .parquet(str(self._source))
            .groupBy("g")
            .agg(*(F.expr(a) for a in AGGREGATES))
            .writeStream.outputMode("update")
            .option("checkpointLocation", self._checkpoint)
            .foreachBatch(append)
            .start()
        )
        self._query.processAllAvailable()
        progress = self._progress_of(self._batch + 1)
        assert progress is not None, self._query.recentProgress
        self._batch = progress.batchId
        if progress.numInputRows == 0:
            self.restarts.append(time.perf_counter() - began)

    def stage(self, rows: DataFrame) -> None:
        """Write ``rows`` as one Parquet file beside the source directory, for the next batch."""
        out = self._staging / f"appended-{self._files}"
        rows.coalesce(1).write.parquet(str(out))
        (self._staged,) = out.glob("part-*.parquet")

    def next_batch(self) -> None:
        """Move the staged file into the source; wait until the micro-batch that read it ends."""
        assert self._query is not None and self._staged is not None
        os.rename(self._staged, self._next_name())
        self._staged = None
        self._query.processAllAvailable()
        # processAllAvailable returns at once if an empty trigger that listed the directory
        # before the rename reports after it: then wait again, until the batch has run
        while not _ran(self._query.lastProgress, self._batch + 1):
            if self._progress_of(self._batch + 1) is not None:
                break
            self._query.processAllAvailable()

    def check_batch(self, rows: int) -> None:
        """The micro-batch after the last one read ``rows`` rows; keep its durations."""
        progress = self._progress_of(self._batch + 1)
        assert progress is not None and progress.numInputRows == rows, progress
        self._batch = progress.batchId
        self.durations.append(dict(progress.durationMs))

    def latest(self) -> DataFrame:
        """Each group's row as the sink's latest batch left it."""
        return (
            self._spark.read.parquet(self._sink)
            .groupBy("g")
            .agg(F.expr("max_by(total, batch) AS total"), F.expr("max_by(n, batch) AS n"))
        )

    def stop(self) -> None:
        if self._query is not None:
            self._query.stop()
            self._query = None

    def _next_name(self) -> Path:
        self._files += 1
        return self._source / f"appended-{self._files}.parquet"

    def _progress_of(self, batch: int) -> StreamingQueryProgress | None:
        assert self._query is not None
        found = [p for p in self._query.recentProgress if _ran(p, batch)]
        return found[-1] if found else None


def _ran(progress: StreamingQueryProgress | None, batch: int) -> bool:
    """Whether ``progress`` reports micro-batch ``batch`` run (not a trigger that found no data,
    which reports the id of the batch it would have run, without addBatch)."""
    return progress is not None and progress.batchId == batch and "addBatch" in progress.durationMs


def _check_same(s: Session, dynamic: DataFrame, streamed: DataFrame, *, rows: int) -> None:
    """The groups the appends touched hold the same rows on both sides, and both sides' counts
    and sums over all groups equal the aggregate computed from the fact."""
    touched = s.sql(f"SELECT DISTINCT g FROM {FACT} WHERE id >= {rows}")
    mine, theirs = dynamic.join(touched, "g"), streamed.join(touched, "g")
    differ = mine.exceptAll(theirs).count() + theirs.exceptAll(mine).count()
    assert differ == 0 and mine.count() == touched.count(), (differ, touched.count())
    full = s.sql(f"SELECT COUNT(DISTINCT g), SUM(v), COUNT(*) FROM {FACT}").first()
    for side in (dynamic, streamed):
        got = side.selectExpr("COUNT(*)", "SUM(total)", "SUM(n)").first()
        assert tuple(got) == tuple(full), (got, full)


def _median_ms(durations: list[dict[str, int]], key: str) -> int:
    return int(statistics.median(d.get(key, 0) for d in durations))

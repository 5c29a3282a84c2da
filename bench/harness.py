"""What every benchmark shares: the context it runs in, its result, and timing helpers."""

from __future__ import annotations

import datetime as dt
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changelake.session import Session

FULL_ROWS = 10_000_000


@dataclass(frozen=True)
class Context:
    """One benchmark run: a changelake session on a scratch warehouse, and a scratch directory."""

    session: Session
    scale: float
    repeat: int
    scratch: Path
    clock: CpuClock

    @property
    def spark(self) -> SparkSession:
        return self.session.spark

    def rows(self, full: int = FULL_ROWS) -> int:
        """``full`` shrunk by the run's scale (never below 10,000 rows)."""
        return max(10_000, int(full * self.scale))

    def count(self, full: int, *, minimum: int = 20) -> int:
        return max(minimum, round(full * self.scale))

    def path(self, name: str) -> str:
        return str(self.scratch / name)


@dataclass(frozen=True)
class Result:
    """One benchmark's figures. ``ratio`` is changelake time / baseline time unless noted."""

    name: str
    description: str
    changelake_s: float
    baseline_s: float
    baseline: str
    ratio: float
    ratio_meaning: str
    target: str
    met: bool
    rows: int
    changelake_cpu_s: float = 0.0
    baseline_cpu_s: float = 0.0
    cpu_ratio: float = 0.0  # the same ratio over CPU seconds
    notes: str = ""
    extra: dict[str, float] = field(default_factory=dict)


def median_of(samples: list[float]) -> float:
    return statistics.median(samples)


@dataclass(frozen=True)
class Sample:
    """One timed run: wall seconds, and CPU seconds of the Spark JVM plus this Python process."""

    wall_s: float
    cpu_s: float


class CpuClock:
    """Measures wall time and CPU time of one action.

    CPU time is read from ``/proc`` for the JVM (local Spark: driver and executors in one process)
    and from ``time.process_time`` for Python. Unlike wall time it hardly moves when other
    processes compete for the cores, so its ratio is the steadier figure on a busy machine.
    """

    def __init__(self, spark: SparkSession):
        jvm = spark.sparkContext._jvm
        self._stat = f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/stat"
        self._tick = os.sysconf("SC_CLK_TCK")

    def _jvm_cpu(self) -> float:
        try:
            with open(self._stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # no /proc (not Linux) or a remote JVM: wall time only
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self._tick

    def measure(self, action: Callable[[], object]) -> Sample:
        cpu0, py0, wall0 = self._jvm_cpu(), time.process_time(), time.perf_counter()
        action()
        wall = time.perf_counter() - wall0
        return Sample(wall, self._jvm_cpu() - cpu0 + time.process_time() - py0)


def medians(samples: list[Sample]) -> Sample:
    return Sample(median_of([s.wall_s for s in samples]), median_of([s.cpu_s for s in samples]))


def alternate(
    ctx: Context, ours: Callable[[], object], theirs: Callable[[], object]
) -> tuple[Sample, Sample]:
    """Median samples of ``ours`` and ``theirs``: one untimed warm-up each, then ``ctx.repeat``
    alternating timed runs, so background load hits both alike."""
    ours()
    theirs()
    a, b = [], []
    for _ in range(ctx.repeat):
        a.append(ctx.clock.measure(ours))
        b.append(ctx.clock.measure(theirs))
    return medians(a), medians(b)


def rotate(ctx: Context, *actions: Callable[[], object]) -> list[Sample]:
    """A median sample of each of ``actions`` (in their order): one untimed warm-up each, then
    ``ctx.repeat`` rounds running each once, every round starting one action later, so neither
    background load nor what the previous action left behind (e.g. garbage) favours any."""
    for action in actions:
        action()
    samples: list[list[Sample]] = [[] for _ in actions]
    for round_ in range(ctx.repeat):
        for i in range(len(actions)):
            k = (round_ + i) % len(actions)
            samples[k].append(ctx.clock.measure(actions[k]))
    return [medians(taken) for taken in samples]


class SparkJobClock:
    """Time spent inside Spark jobs, read from the driver's status store (works with the UI off).

    ``since()`` returns (number of jobs, seconds inside them) for jobs submitted after the last
    ``mark()``; jobs run one after the other on this driver, so their durations add up. Only the
    jobs of job group ``group`` count: by default those outside any group (a dynamic table's
    refresh runs its jobs in a group of its own, a streaming query in its run id's).
    """

    def __init__(self, spark: SparkSession, *, group: str | None = None):
        self._sc = spark.sparkContext
        self._store = self._sc._jsc.sc().statusStore()
        self._group = group
        self._seen: set[int] = set()
        self.mark()

    def _job_ids(self) -> set[int]:
        return set(self._sc.statusTracker().getJobIdsForGroup(self._group))

    def mark(self) -> None:
        self._seen = self._job_ids()

    def since(self) -> tuple[int, float]:
        new = sorted(self._job_ids() - self._seen)
        total_ms = 0
        for job_id in new:
            job = self._store.job(job_id)
            began, ended = job.submissionTime(), job.completionTime()
            if began.isDefined() and ended.isDefined():
                total_ms += ended.get().getTime() - began.get().getTime()
        return len(new), total_ms / 1000.0


def spark_jobs(spark: SparkSession, action: Callable[[], object]) -> int:
    """How many Spark jobs one run of ``action`` submits (independent of machine load)."""
    clock = SparkJobClock(spark)
    action()
    return clock.since()[0]


def rows_read(spark: SparkSession, action: Callable[[], object]) -> int:
    """The rows the file scans of every Spark job one run of ``action`` submits read, in any
    job group (the stages' input records, from the driver's status store)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    gateway = spark.sparkContext._gateway
    no_quantiles = gateway.new_array(gateway.jvm.double, 0)

    def stage_rows() -> dict[tuple[int, int], int]:
        stages = store.stageList(None, False, False, no_quantiles, None)
        found = {}
        for i in range(stages.size()):
            stage = stages.apply(i)
            found[(stage.stageId(), stage.attemptId())] = stage.inputRecords()
        return found

    before = stage_rows()
    action()
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return sum(n for key, n in stage_rows().items() if key not in before)


class ScannedFiles:
    """The Parquet files Spark's file scans listed, per SQL execution started after ``mark()``,
    read from the SQL status store (the scan nodes' ``Location``, printed in full)."""

    def __init__(self, spark: SparkSession):
        spark.conf.set("spark.sql.maxMetadataStringLength", str(1 << 30))
        self._store = spark._jsparkSession.sharedState().statusStore()
        self._seen: set[int] = set()
        self.mark()

    def _execution_ids(self) -> set[int]:
        executions = self._store.executionsList()
        return {executions.apply(i).executionId() for i in range(executions.size())}

    def mark(self) -> None:
        self._seen = self._execution_ids()

    def since(self) -> list[str]:
        """Every file a scan listed (a file twice if two scans listed it)."""
        files: list[str] = []
        for execution in sorted(self._execution_ids() - self._seen):
            nodes = self._store.planGraph(execution).allNodes()
            for i in range(nodes.size()):
                node = nodes.apply(i)
                if node.name().startswith("Scan "):
                    files.extend(_listed_files(node.desc()))
        return files


def _listed_files(description: str) -> list[str]:
    marker = description.find("InMemoryFileIndex(")
    if marker < 0:
        return []
    start = description.find("[", marker)
    end = description.find("]", start)
    return [f.strip() for f in description[start + 1 : end].split(",") if f.strip()]


def compared(
    name: str,
    description: str,
    ours: Sample,
    theirs: Sample,
    *,
    baseline: str,
    target: float,
    rows: int,
    notes: str,
    faster: bool = False,
    meaning: str | None = None,
) -> Result:
    """The Result of ``ours`` against ``theirs``: the ratio ours / theirs, met at most ``target``;
    or, if ``faster``, the speed-up theirs / ours, met at least ``target``."""
    if faster:
        ratio, cpu = theirs.wall_s / ours.wall_s, theirs.cpu_s / ours.cpu_s
        met, target_text = ratio >= target, f">= {target:g}x faster"
        meaning = meaning or "baseline / changelake (speed-up)"
    else:
        ratio, cpu = ours.wall_s / theirs.wall_s, ours.cpu_s / theirs.cpu_s
        met, target_text = ratio <= target, f"<= {target:g}x"
        meaning = meaning or "changelake / baseline"
    return Result(
        name=name,
        description=description,
        changelake_s=ours.wall_s,
        baseline_s=theirs.wall_s,
        changelake_cpu_s=ours.cpu_s,
        baseline_cpu_s=theirs.cpu_s,
        cpu_ratio=cpu,
        baseline=baseline,
        ratio=ratio,
        ratio_meaning=meaning,
        target=target_text,
        met=met,
        rows=rows,
        notes=notes,
    )


def view_plan(session: Session, query: str) -> str:
    """The plan changelake picks for the CHANGES of a view in ``query`` (INCREMENTAL or
    RECOMPUTE, with its reason), from the ``plan: ...`` line of ``EXPLAIN query``."""
    for row in session.sql(f"EXPLAIN {query}").collect():
        for line in row[0].splitlines():
            if line.strip().startswith("plan: "):
                return line.strip().removeprefix("plan: ")
    return "unknown"


@dataclass(frozen=True)
class ViewChange:
    """A view's DEFAULT changes over one statement, and the two ways to compute them."""

    query: str  # changelake's CHANGES query over the interval
    changelake: Callable[[], None]
    baseline: Callable[[], None]  # the view at both points, both EXCEPT ALLs


def view_change(session: Session, view: str, statement: str) -> ViewChange:
    """Run ``statement`` between two timestamps; the changes of ``view`` between them."""
    start = dt.datetime.now().isoformat(sep=" ")
    session.sql(statement)
    end = dt.datetime.now().isoformat(sep=" ")
    query = (
        f"SELECT * FROM {view} CHANGES (INFORMATION => DEFAULT)"
        f" AT (TIMESTAMP => '{start}') END (TIMESTAMP => '{end}')"
    )

    def changelake() -> None:
        session.sql(query).write.format("noop").mode("overwrite").save()

    def baseline() -> None:
        before = session.sql(f"SELECT * FROM {view} AT (TIMESTAMP => '{start}')")
        after = session.sql(f"SELECT * FROM {view} AT (TIMESTAMP => '{end}')")
        diff = after.exceptAll(before).unionByName(before.exceptAll(after))
        diff.write.format("noop").mode("overwrite").save()

    return ViewChange(query, changelake, baseline)

"""Counting the Spark jobs a piece of work runs (refresh history reports them): the work runs in
a job group of its own, whose jobs the driver's status tracker lists."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from changelake.spark.private import jobs_in_group

_GROUP = "spark.jobGroup.id"
_DESCRIPTION = "spark.job.description"


@contextmanager
def counted_jobs(spark: SparkSession, description: str) -> Iterator[Callable[[], int]]:
    """Run the block's Spark jobs in a new job group (this thread's); yields a function that
    returns how many jobs the group has run so far. The thread's previous group is restored."""
    sc = spark.sparkContext
    before = sc.getLocalProperty(_GROUP), sc.getLocalProperty(_DESCRIPTION)
    group = f"changelake-{uuid.uuid4().hex}"
    sc.setJobGroup(group, description)
    try:
        yield lambda: jobs_in_group(spark, group)
    finally:
        sc.setLocalProperty(_GROUP, before[0])  # type: ignore[arg-type]
        sc.setLocalProperty(_DESCRIPTION, before[1])  # type: ignore[arg-type]


@contextmanager
def cancelled_after(spark: SparkSession, seconds: float) -> Iterator[Callable[[], bool]]:
    """Cancel the Spark jobs this thread starts in the block from ``seconds`` from now until
    the block ends (a job started after the deadline is cancelled too; so are the jobs of a job
    group opened inside, e.g. a refresh's: they carry the block's job tag); yields a function
    saying whether the deadline passed."""
    sc = spark.sparkContext
    tag = f"changelake-deadline-{uuid.uuid4().hex}"
    late, done = threading.Event(), threading.Event()

    def watch() -> None:
        if done.wait(seconds):
            return
        late.set()
        while not done.wait(0.1):
            sc.cancelJobsWithTag(tag)

    sc.addJobTag(tag)
    watcher = threading.Thread(target=watch, name="changelake-timeout", daemon=True)
    watcher.start()
    try:
        yield late.is_set
    finally:
        done.set()
        sc.removeJobTag(tag)

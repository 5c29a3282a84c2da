"""Counting the Spark jobs a piece of work runs (refresh history reports them): the work runs in
a job group of its own, whose jobs the driver's status tracker lists."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

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
        yield lambda: len(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty(_GROUP, before[0])  # type: ignore[arg-type]
        sc.setLocalProperty(_DESCRIPTION, before[1])  # type: ignore[arg-type]

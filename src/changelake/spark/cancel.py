"""A statement's Spark jobs, tagged so that another thread can cancel them (Ctrl-C in the shell,
``POST /v1/sql/cancel``).

A statement may run several jobs one after another, so a cancel repeats until the statement's
thread is done: a job that starts after the first cancel is cancelled too. The commit comes
after a statement's last job, so a statement whose job was cancelled commits nothing; one whose
jobs had all finished may still commit, and then it reports its result as usual.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from changelake.errors import StatementCancelledError

# How often a cancel is repeated while the statement still runs.
RECANCEL_SECONDS = 0.05


class Cancellable:
    """One statement's run: made (and registered where ``cancel`` can find it) before the
    statement starts, ``running(spark)`` around it in the thread that runs it, ``finish()``
    when that thread is done with it, ``cancel()`` from any other thread."""

    def __init__(self, label: str):
        self.label = label
        self._tag = f"changelake-{uuid.uuid4().hex}"
        self._spark: SparkSession | None = None
        self._done = threading.Event()
        self.cancelled = False  # a cancel was asked for
        self.stopped = False  # ... and stopped the statement (it raised StatementCancelledError)

    @contextmanager
    def running(self, spark: SparkSession) -> Iterator[None]:
        if self.cancelled:
            self.stopped = True
            raise StatementCancelledError(f"{self.label} was cancelled; nothing was committed.")
        self._spark = spark
        context = spark.sparkContext
        context.addJobTag(self._tag)
        try:
            yield
        except Exception as e:
            if self.cancelled:
                self.stopped = True
                raise StatementCancelledError(
                    f"{self.label} was cancelled; nothing was committed."
                ) from e
            raise
        finally:
            context.removeJobTag(self._tag)

    def finish(self) -> None:
        self._done.set()

    def cancel(self, *, wait: float = 600.0) -> None:
        """Cancel the statement's jobs until it is finished (at most ``wait`` seconds)."""
        self.cancelled = True
        waited = 0.0
        while not self._done.is_set() and waited < wait:
            if self._spark is not None:
                self._spark.sparkContext.cancelJobsWithTag(self._tag)
            self._done.wait(RECANCEL_SECONDS)
            waited += RECANCEL_SECONDS

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
    """One statement's run: ``running()`` around it in the thread that runs it, ``cancel()``
    from any other."""

    def __init__(self, spark: SparkSession, label: str):
        self._spark = spark
        self._label = label
        self._tag = f"changelake-{uuid.uuid4().hex}"
        self._done = threading.Event()
        self.cancelled = False

    @contextmanager
    def running(self) -> Iterator[None]:
        context = self._spark.sparkContext
        context.addJobTag(self._tag)
        try:
            yield
        except Exception as e:
            if self.cancelled:
                raise StatementCancelledError(
                    f"{self._label} was cancelled; nothing was committed."
                ) from e
            raise
        finally:
            context.removeJobTag(self._tag)
            self._done.set()

    def cancel(self, *, wait: float = 600.0) -> None:
        """Cancel the statement's jobs until it ends (at most ``wait`` seconds)."""
        self.cancelled = True
        context = self._spark.sparkContext
        waited = 0.0
        while not self._done.is_set() and waited < wait:
            context.cancelJobsWithTag(self._tag)
            self._done.wait(RECANCEL_SECONDS)
            waited += RECANCEL_SECONDS

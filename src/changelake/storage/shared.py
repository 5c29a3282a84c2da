"""Reads that several plans of one piece of work share: a scheduler's round, whose refreshes of
the tables that read base table T over the same interval read T's changes once.

The work says beforehand which reads it will make more than once (``wanted``: keys such as
``("changes", table id, start, end, information)``); the first plan to ask for one builds it and
persists it (lazily: the first job that reads it computes it, as part of that job), the others
read the persisted rows, and ``release`` unpersists them all when the work ends. A read not
wanted twice is built as always, for the plan that asked, and not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from changelake.storage.relation import Relation


class SharedReads:
    """The reads ``wanted`` by more than one plan of a piece of work, each built once and kept
    until ``release``; safe to ask from several threads (a round's concurrent refreshes)."""

    def __init__(self, spark: SparkSession, wanted: Collection[Hashable]):
        self._spark = spark
        self._wanted = frozenset(wanted)
        self._kept: dict[Hashable, Relation] = {}
        self._frames: list[DataFrame] = []
        self._lock = threading.Lock()

    def relation(self, key: Hashable, build: Callable[[], Relation]) -> Relation:
        """The read ``key``, built by ``build``: kept and shared if it is wanted more than once."""
        if key not in self._wanted:
            return build()
        with self._lock:  # two plans asking at once get the one read
            found = self._kept.get(key)
            if found is None:
                rel = build()
                frame = rel.frame(self._spark).persist(StorageLevel.MEMORY_AND_DISK)
                found = Relation.of_frame(frame, rel.columns)
                self._kept[key] = found
                self._frames.append(frame)
            return found

    def release(self) -> None:
        """Unpersist every kept read (the work is over)."""
        with self._lock:
            for frame in self._frames:
                frame.unpersist()
            self._frames.clear()
            self._kept.clear()

"""Reads that several plans of one piece of work share: a scheduler's round, whose refreshes of
the tables that read base table T over the same interval read T's changes once, and whose
refreshes of a table's readers read its refresh's result instead of its changes.

The work says beforehand which reads it will make more than once (``wanted``: keys such as
``("changes", table id, start, end, information)``); the first plan to ask for one builds it and
persists it (lazily: the first job that reads it computes it, as part of that job), the others
read the persisted rows, and ``release`` unpersists them all when the work ends. A read not
wanted twice is built as always, for the plan that asked, and not kept. A result one plan
computed (``keep``) is handed to the plans that ask for it by key later (``hand``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from changelake.spark.relation import Relation


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
        """The read ``key``: handed (``hand``), or built by ``build``, kept and shared if it is
        wanted more than once."""
        with self._lock:  # two plans asking at once get the one read
            found = self._kept.get(key)
            if found is None and key in self._wanted:
                found = self._persisted(build())
                self._kept[key] = found
        return found if found is not None else build()

    def wants(self, key: Hashable) -> bool:
        return key in self._wanted

    def keep(self, rel: Relation) -> Relation:
        """``rel`` persisted until ``release`` (at its first use: a result that plans of this
        work read after the one that computes it)."""
        with self._lock:
            return self._persisted(rel)

    def hand(self, key: Hashable, rel: Relation) -> None:
        """Hand ``rel`` (over rows ``keep`` persisted) to the plans that ask for ``key``."""
        with self._lock:
            self._kept[key] = rel

    def _persisted(self, rel: Relation) -> Relation:
        frame = rel.frame(self._spark).persist(StorageLevel.MEMORY_AND_DISK)
        self._frames.append(frame)
        return Relation.of_frame(frame, rel.columns)

    def release(self) -> None:
        """Unpersist every kept read (the work is over)."""
        with self._lock:
            for frame in self._frames:
                frame.unpersist()
            self._frames.clear()
            self._kept.clear()

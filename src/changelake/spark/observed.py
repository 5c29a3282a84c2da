"""Counts taken by a write's own job: ``DataFrame.observe`` metrics instead of a count job before
the write.

An observation is delivered by the session its action runs in: observe a DataFrame of
``Relation.frame`` (its plan's own session, in which ``native.write_parquet`` also writes), and
read the counts only after an action on the observed DataFrame succeeded (before, ``get`` would
wait for ever).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

_names = itertools.count()


class Counted:
    """``df`` with counts of its rows that satisfy conditions (SQL text), taken by the first
    action on ``frame``."""

    def __init__(self, df: DataFrame, conditions: Mapping[str, str]):
        self._observation = Observation(f"changelake_counts_{next(_names)}")
        # one metric, a struct of the counts: one expression to build, whatever their number
        counts = ", ".join(f"count_if({c}) AS {name}" for name, c in conditions.items())
        self.frame = df.observe(self._observation, F.expr(f"struct({counts}) AS _counts"))

    def counts(self) -> dict[str, int]:
        """The counts, by condition name (after an action on ``frame`` ran)."""
        found = self._observation.get["_counts"].asDict()
        return {name: int(n or 0) for name, n in found.items()}

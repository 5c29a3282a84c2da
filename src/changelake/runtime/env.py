"""The environment statements, refreshes, follows and task runs work in (the catalog, the clock,
Spark, the warehouse and the settings a statement reads), and one statement's context in it.

``Env`` is one value, made by whoever owns the four (the session, the service), passed down
instead of the parts; work outside a statement (an external table's follow, the scheduler's
leases) takes it. A statement's work takes one ``Context``, made by ``Env.context`` alone: what
the statement reads of the catalog and where its commit goes (``StatementContext``) together
with the Env it runs in, so a function needs no second argument for Spark or the warehouse."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property

from pyspark.sql import SparkSession

from changelake.catalog import Catalog
from changelake.clock import Clock
from changelake.storage.shared import SharedReads
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext
from changelake.txn.transaction import Transaction

# Spark conf keys of changelake's statement settings (``SET`` them on the session's Spark).
ROW_LEVEL_PLAN = "spark.changelake.rowLevelPlan"
VIEW_CHANGES_PLAN = "spark.changelake.viewChangesPlan"


class Settings:
    """What the Spark conf says, each setting read when a statement first asks for it (a py4j
    call: a statement pays only for those it uses) and then kept for the Env's life; checked
    where a statement uses it.

    ``row_level_plan``: ``auto`` | ``one-pass`` | ``two-phase`` (UPDATE/DELETE/MERGE, dml/strategy.py);
    ``view_changes_plan``: ``AUTO`` | ``INCREMENTAL`` | ``RECOMPUTE`` (changes of views,
    plan/views.py).
    """

    def __init__(self, spark: SparkSession):
        self._conf = spark.conf

    @staticmethod
    def of(spark: SparkSession) -> Settings:
        return Settings(spark)

    @cached_property
    def row_level_plan(self) -> str:
        return str(self._conf.get(ROW_LEVEL_PLAN, "auto")).lower()

    @cached_property
    def view_changes_plan(self) -> str:
        return str(self._conf.get(VIEW_CHANGES_PLAN, "AUTO")).upper()


@dataclass(frozen=True)
class Env:
    """Where work runs: the catalog and clock (which a StatementContext also holds), Spark, the
    warehouse and the settings. Make one with ``Env.of``; ``shared``: the reads this work shares
    with the other work of its scheduler round (``with_shared``), else None."""

    catalog: Catalog
    clock: Clock
    spark: SparkSession
    warehouse: Warehouse
    shared: SharedReads | None = None

    @staticmethod
    def of(catalog: Catalog, clock: Clock, spark: SparkSession, warehouse: Warehouse) -> Env:
        return Env(catalog, clock, spark, warehouse)

    def with_shared(self, shared: SharedReads | None) -> Env:
        """This Env, its work sharing the reads ``shared`` (a round's change scans)."""
        return Env(self.catalog, self.clock, self.spark, self.warehouse, shared)

    @cached_property
    def settings(self) -> Settings:
        """Spark's conf when first asked: a statement that reads no setting makes no call into
        the JVM for them (an Env is made per statement, so a SET is seen by the next one)."""
        return Settings.of(self.spark)

    def context(self, transaction: Transaction | None = None) -> Context:
        """A fresh statement context in this Env (in ``transaction`` if open): the one place
        a statement's context is made."""
        return Context(self.catalog, self.clock, transaction, env=self)


@dataclass
class Context(StatementContext):
    """One statement's context: its reads of the catalog (``catalog`` is the statement's
    ``StatementReads``; the Env's own catalog is ``env.catalog``), its clock, where its commit
    goes, and the Env it runs in (Spark, the warehouse, the settings, a round's shared reads)."""

    env: Env = field(kw_only=True)

    @property
    def spark(self) -> SparkSession:
        return self.env.spark

    @property
    def warehouse(self) -> Warehouse:
        return self.env.warehouse

    @property
    def settings(self) -> Settings:
        return self.env.settings

    @property
    def shared(self) -> SharedReads | None:
        return self.env.shared

    def sharing(self, shared: SharedReads) -> Context:
        """This statement (its snapshot, pinned versions, id), its work sharing the reads
        ``shared`` (a scheduler round's)."""
        same = copy.copy(self)
        same.env = self.env.with_shared(shared)
        return same

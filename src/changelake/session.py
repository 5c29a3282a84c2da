"""The session: a thin facade owning the SparkSession, catalog, warehouse, clock and the open
transaction; every statement runs in a fresh statement context."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Row, SparkSession

from changelake.catalog import Catalog
from changelake.catalog.model import TableInfo
from changelake.changelog.apply import ApplyOptions, apply_python
from changelake.changelog.export import ExportResult, export_sql
from changelake.changelog.files import read_changelog
from changelake.changes.formats import Commit, Format, Rendering, render
from changelake.changes.plan import ChangePlan, Information
from changelake.changes.query import changes_between, plan_interval, resolve_interval
from changelake.clock import Clock, SystemClock
from changelake.dml.append import append
from changelake.dynamic.create import alter_dynamic_table
from changelake.ingest.spark_sink import SparkSink
from changelake.plan.streams import has_data
from changelake.plan.views import view_changes
from changelake.runtime.env import Context, Env
from changelake.spark.errors import spark_errors
from changelake.spark.setup import default_spark, prepare, quiet_query_context_loggers
from changelake.sql import tasks
from changelake.sql.dynamic import HISTORY_COLUMNS, history_rows, show_dynamic_tables
from changelake.sql.execute import execute
from changelake.storage.snapshot import state_relation
from changelake.storage.warehouse import Warehouse
from changelake.txn.context import StatementContext
from changelake.txn.points import Edge, point_from_python
from changelake.txn.transaction import Transaction, TransactionSlot

if TYPE_CHECKING:
    from typing import Unpack

Point = int | dt.datetime | str


@dataclass(frozen=True)
class Fetched:
    """A statement run to its end: its columns as (name, Spark type) pairs, its first rows, and
    ``total`` when it has more rows than were fetched (None: ``rows`` is all of it)."""

    columns: tuple[tuple[str, str], ...]
    rows: list[Row]
    total: int | None


class Session:
    """A connection to a warehouse. Create it with :func:`changelake.connect`."""

    def __init__(self, spark: SparkSession, catalog: Catalog, warehouse: Warehouse, clock: Clock):
        self.spark = prepare(spark)
        self.catalog = catalog
        self.warehouse = warehouse
        self.clock = clock
        self._transactions = TransactionSlot()

    def sql(self, text: str) -> DataFrame:
        """Run one SQL statement.

        Queries return a lazy DataFrame; other statements run at once and return a small
        DataFrame saying what they did (statement id, operation, object, version, row counts).
        """
        return execute(self._env(), text, transactions=self._transactions)

    def fetch(self, text: str, *, max_rows: int) -> Fetched:
        """Run one SQL statement to its end and collect at most ``max_rows`` of its rows; a
        query's failing expression (a division by zero) raises a ChangelakeError, not Spark's."""
        return _fetched(self.sql(text), text, max_rows)

    @property
    def transaction(self) -> Transaction | None:
        """The transaction BEGIN opened, until COMMIT or ROLLBACK."""
        return self._transactions.current

    def table(self, name: str, *, version: int | None = None) -> DataFrame:
        """The rows of table ``name`` now, or at ``version``."""
        ctx = self._context()
        state = ctx.state(ctx.table(name), version)
        return state_relation(self.spark, self.warehouse, state).frame(self.spark)

    def changes(
        self,
        name: str,
        *,
        start: Point,
        end: Point | None = None,
        information: str = "default",
        before: bool = False,
        format: str | None = None,
        keys: Sequence[str] = (),
    ) -> DataFrame:
        """The changes of table or view ``name`` after ``start`` up to ``end`` (default: now).

        Points are a version (int), a timestamp (datetime) or a statement id (str); ``before``
        starts just before the point. ``information`` is "default" (minimum delta),
        "append_only" or "redo"; ``format`` ("odf", "flink", "debezium", "retract", "upsert"
        with ``keys``) renders them as a changelog. Same result as the SQL ``CHANGES`` clause.
        """
        ctx = self._context()
        rendering = Rendering(Format.parse(format), tuple(keys)) if format else None
        if self.catalog.view_sql(name) is not None:
            df, _ = view_changes(
                ctx,
                name,
                start=point_from_python(start, Edge.BEFORE if before else Edge.AT),
                end=point_from_python(end, Edge.END) if end is not None else None,
                information=Information.parse(information),
            )
            df = df.frame(self.spark)
            return render(df, rendering, Commit(name.lower())) if rendering else df
        info, first, last, kind = _interval(self._context(), name, start, end, information, before)
        between = {"start": first, "end": last, "information": kind, "rendering": rendering}
        return changes_between(self._context(), info, **between).frame(self.spark)

    def change_plan(
        self,
        name: str,
        *,
        start: Point,
        end: Point | None = None,
        information: str = "default",
        before: bool = False,
    ) -> ChangePlan:
        """What :meth:`changes` with the same arguments would read, decided from catalog
        metadata alone: the interval, the plan shape, and the files and rows of each side
        (what ``EXPLAIN`` of the SQL form reports)."""
        info, first, last, kind = _interval(self._context(), name, start, end, information, before)
        return plan_interval(self.catalog, info, start=first, end=last, information=kind)

    def stream_has_data(self, name: str) -> bool:
        """SYSTEM$STREAM_HAS_DATA: whether stream ``name`` has changes to consume."""
        return has_data(self._context(), name)

    def append(self, name: str, data: Any) -> DataFrame:
        """Append a Spark DataFrame, pandas DataFrame or PyArrow table to table ``name``.

        Columns are matched by name (case-insensitive); missing nullable columns get NULL.
        Returns the same one-row result DataFrame as INSERT.
        """
        result = append(self._context(), name, data)
        return result.to_dataframe(self.spark)

    def sink(self, table: str, *, channel: str) -> SparkSink:
        """A ``foreachBatch`` sink landing each micro-batch in ``table`` exactly once, through
        ingest channel ``channel`` (one per checkpoint location; opening it fences older sinks)."""
        return SparkSink(self.catalog, self.warehouse, self.clock, table=table, channel=channel)

    def export(self, query: str, path: str, *, file_format: str = "parquet") -> ExportResult:
        """COPY INTO ``path`` FROM (``query``): its rows as ``file_format`` ("parquet" or "json")
        files in a new directory under ``path``, consuming the streams it reads exactly once."""
        return export_sql(self._context(), query, path=path, file_format=file_format)

    def apply_changes(self, target: str, source: Any, **options: Unpack[ApplyOptions]) -> DataFrame:
        """APPLY CHANGES INTO ``target`` FROM ``source`` (a DataFrame, a table, view or stream
        name, or a query); ``options`` as in ``changelake.changelog.apply.apply_python``."""
        done = apply_python(self._context(), target, source, **options)
        return done.to_dataframe(self.spark)

    def read_changelog(
        self, path: str, *, format: str = "odf", table: str | None = None
    ) -> DataFrame:
        """The changelog files at ``path`` (Parquet or JSON lines, e.g. a directory COPY INTO
        wrote) in ``format`` (odf, flink, retract, upsert, debezium), to hand to
        ``apply_changes``; JSON values are read with the types of ``table``'s columns."""
        return read_changelog(self._context(), path, format=format, table=table)

    def refresh(self, name: str) -> DataFrame:
        """ALTER DYNAMIC TABLE ``name`` REFRESH: now, its upstreams first at one data timestamp."""
        done = alter_dynamic_table(self._context(), name, "REFRESH", {})
        return done.to_dataframe(self.spark)

    def dynamic_tables(self, name: str | None = None, *, history: bool = False) -> DataFrame:
        """SHOW DYNAMIC TABLES; with ``history``, the refresh history (of ``name``, or all)."""
        if history:
            return self.spark.createDataFrame(history_rows(self._context(), name), HISTORY_COLUMNS)
        return show_dynamic_tables(self._context())

    def tasks(self, name: str | None = None, *, history: bool = False) -> DataFrame:
        """SHOW TASKS; with ``history``, TASK_HISTORY (of task ``name``, or of all)."""
        if history:
            rows = tasks.history_rows(self._context(), name, None)
            return self.spark.createDataFrame(rows, tasks.HISTORY_COLUMNS)
        return tasks.show_tasks(self._context())

    def close(self) -> None:
        """Release the catalog connection (the SparkSession stays up for others)."""
        self.catalog.close()

    def _env(self) -> Env:
        """The session's Env, with the settings its Spark conf holds now."""
        return Env.of(self.catalog, self.clock, self.spark, self.warehouse)

    def _context(self) -> Context:
        return self._env().context(self.transaction)


def _fetched(df: DataFrame, text: str, max_rows: int) -> Fetched:
    with spark_errors(text.split(maxsplit=1)[0].upper() if text.strip() else "SQL"):
        rows = df.limit(max_rows + 1).collect()
        total = df.count() if len(rows) > max_rows else None
    columns = tuple((f.name, f.dataType.simpleString()) for f in df.schema)
    return Fetched(columns, rows[:max_rows], total)


def _interval(
    ctx: StatementContext,
    name: str,
    start: Point,
    end: Point | None,
    information: str,
    before: bool,
) -> tuple[TableInfo, int, int, Information]:
    """The table, the versions and the kind of a change query the Python API asks for."""
    info = ctx.table(name)
    first, last = resolve_interval(
        ctx,
        info,
        start=point_from_python(start, Edge.BEFORE if before else Edge.AT),
        end=point_from_python(end, Edge.END) if end is not None else None,
    )
    return info, first, last, Information.parse(information)


def connect(
    warehouse: str,
    *,
    catalog: str | None = None,
    spark: SparkSession | None = None,
    clock: Clock | None = None,
) -> Session:
    """Open (creating if needed) the warehouse at ``warehouse``.

    ``catalog`` is a database URL (``postgresql://user@host/db``); by default a SQLite file inside
    the warehouse. ``spark`` is an existing SparkSession (e.g. one pointed at a cluster); by
    default a local one is started. ``clock`` replaces the wall clock (tests).
    """
    wh = Warehouse.at(warehouse)
    url = wh.catalog_url(catalog)
    quiet_query_context_loggers()
    return Session(spark or default_spark(), Catalog(url), wh, clock or SystemClock())

"""Pieces every write statement shares: targets, planned row-level writes, deletion bookkeeping,
the commit request."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from changelake.catalog.internal import check_user_may_change
from changelake.catalog.model import DataFile, NewDeletes, TableInfo
from changelake.catalog.requests import AdvanceStream, FrontierAt, Update
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.dml.result import StatementResult
from changelake.dml.strategy import SMALL_INPUT_ROWS, Strategy
from changelake.errors import DuplicateTargetRowError
from changelake.plan.bind import Binder
from changelake.runtime.env import Context
from changelake.schema import TableSchema
from changelake.spark.relation import plan_lines
from changelake.storage.snapshot import file_name
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import write_data, write_deletes
from changelake.streams.frontier import StreamRead
from changelake.txn.context import StatementContext
from changelake.txn.snapshot import TableState


@dataclass(frozen=True)
class Target:
    """The table a write statement changes, as read by this statement."""

    info: TableInfo
    state: TableState

    @staticmethod
    def of(ctx: StatementContext, name: str) -> Target:
        """The table a user statement names; InternalTableError for an internal table."""
        info = ctx.table(name)
        check_user_may_change(ctx.catalog, info, action="change")
        return Target(info, ctx.state(info))

    @staticmethod
    def for_append(ctx: StatementContext, name: str) -> Target:
        """A target for a blind append: its schema, without listing its files (appends never
        read or conflict with existing rows, so their cost must not grow with the table)."""
        info = ctx.table(name)
        check_user_may_change(ctx.catalog, info, action="change")
        return Target(info, ctx.schema_state(info))

    def write(self, kind: WriteKind, **written: Any) -> TableWrite:
        """A write to this table as read (``written``: ``TableWrite``'s files and counts)."""
        return TableWrite(self.info.table_id, self.info.name, self.state.version, kind, **written)


@dataclass(frozen=True)
class Planned:
    """A row-level write's target, how it reads it, and its phase 1 query (or its one pass)."""

    binder: Binder
    target: Target
    strategy: Strategy
    found: DataFrame

    def explain(self, operation: str) -> list[str]:
        """EXPLAIN of the write: how it reads its target, then Spark's plan of the read (phase
        1's query, or the one pass)."""
        line = self.strategy.describe(operation, self.target.info.name)
        return [line, *plan_lines(self.found)]


def write_rows(
    ctx: Context,
    df: DataFrame,
    *,
    schema: TableSchema,
    table: str,
    row_id: str | None = None,
    row_version: str | None = None,
    partitions: int | None = None,
) -> list[DataFile]:
    """Write ``df`` as data files of ``table`` in this statement's data directory, not yet
    committed (the arguments as ``write_data`` takes them)."""
    return write_data(
        ctx.warehouse,
        df,
        schema=schema,
        table=table,
        directory=ctx.warehouse.data_dir(ctx.statement_id),
        row_id=row_id,
        row_version=row_version,
        partitions=partitions,
    )


def small_input(target: Target) -> bool:
    """Whether ``target``'s candidate rows are few enough for one task (``SMALL_INPUT_ROWS``)."""
    return sum(f.live_rows for f in target.state.files) <= SMALL_INPUT_ROWS


def record_deletes(
    warehouse: Warehouse,
    target: Target,
    deleted: DataFrame,
    *,
    counts: Mapping[str, int] | None,
    statement_id: str,
    small: bool = False,
    unique: str | None = None,
) -> tuple[tuple[str, ...], tuple[NewDeletes, ...], int]:
    """Write the deleted positions as a DV file; returns (removed paths, DV deletes, row count).

    ``deleted`` has the positions and, unless the table's BEFORE_IMAGES property is FALSE, the
    rows' old values and identity (see ``write_deletes``), kept as before-images; ``counts`` has
    the deleted rows per data file name, or None to count what was written (``small``: see
    ``write_deletes``). ``unique``: the statement, if a position written twice means a target
    row matched several source rows (DuplicateTargetRowError). Files that lose all their live
    rows are removed outright instead of carrying a DV.
    """
    by_name, repeated = write_deletes(
        warehouse,
        deleted,
        counts=counts,
        directory=warehouse.dv_dir(statement_id),
        table=target.info.name,
        images=target.state.schema if target.info.before_images() else None,
        small=small,
    )
    if repeated and unique is not None:
        raise duplicate_target_row(unique, target.info.name)
    return split_deletes(target.state, by_name)


def duplicate_target_row(operation: str, table: str) -> DuplicateTargetRowError:
    return DuplicateTargetRowError(
        f"{operation} on {table}: a target row matched more than one source row, so the result"
        " would depend on row order. Make the join condition match at most one source row per"
        " target row (e.g. deduplicate the source)."
    )


def split_deletes(
    state: TableState, by_name: Mapping[str, NewDeletes]
) -> tuple[tuple[str, ...], tuple[NewDeletes, ...], int]:
    removed, kept, total = [], [], 0
    for live in state.files:
        d = by_name.get(file_name(live.file.path))
        if d is None:
            continue
        total += d.row_count
        if d.row_count >= live.live_rows:
            removed.append(live.file.path)
        else:
            kept.append(
                NewDeletes(file_path=live.file.path, dv_path=d.dv_path, row_count=d.row_count)
            )
    return tuple(removed), tuple(kept), total


def stream_consumption(
    reads: Iterable[StreamRead],
) -> tuple[tuple[AdvanceStream, ...], tuple[FrontierAt, ...]]:
    """The frontier moves of the streams a statement read, and the frontiers they require."""
    reads = list(reads)
    return tuple(r.advance for r in reads), tuple(r.requirement for r in reads)


def commit_write(
    ctx: StatementContext,
    operation: str,
    write: TableWrite,
    *,
    stream_reads: Iterable[StreamRead] = (),
    beside: Sequence[TableWrite] = (),
    updates: Sequence[Update] = (),
) -> StatementResult:
    """Commit (or stage, inside a transaction) one statement's write to one table, with the
    writes of its internal tables (``beside``) and other ``updates``, consuming the streams it
    read; the result reports ``write``."""
    advances, frontiers = stream_consumption(stream_reads)
    request = write_request(
        ctx.statement_id,
        operation,
        [write, *beside],
        updates=(*updates, *advances),
        requirements=frontiers,
    )
    made = ctx.commit(request).version_of(write.table_id)
    return StatementResult(
        statement_id=ctx.statement_id,
        operation=operation,
        object=write.name,
        version=made,
        rows_inserted=write.inserted,
        rows_updated=write.updated,
        rows_deleted=write.deleted,
        message=outcome(ctx, made),
    )


def outcome(ctx: StatementContext, made: int | None) -> str:
    """What a write statement's result says it did with its commit."""
    if made is not None:
        return "committed"
    return "staged in the open transaction" if ctx.transaction is not None else "no rows changed"


def remove_all_rows(ctx: StatementContext, target: Target, *, operation: str) -> StatementResult:
    """Remove every file of ``target`` (TRUNCATE, DELETE without a condition): no Spark job."""
    removed = tuple(f.file.path for f in target.state.files)
    write = target.write(WriteKind.CHANGE, removed=removed, deleted=target.state.live_rows)
    return commit_write(ctx, operation, write)

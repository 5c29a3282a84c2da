"""Pieces every write statement shares: targets, deletion bookkeeping, the commit request."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame

from changelake.catalog.internal import check_user_may_change
from changelake.catalog.model import DataFile, NewDeletes, TableInfo
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    AdvanceStream,
    CommitRequest,
    FilesUntouched,
    FrontierAt,
    RemoveFiles,
    Requirement,
    RowCounts,
    SchemaUnchanged,
    TableLive,
    Update,
)
from changelake.dml.result import StatementResult
from changelake.schema import TableSchema
from changelake.storage.snapshot import RID, file_name
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import partitions_for, write_data, write_deletes
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


def record_deletes(
    warehouse: Warehouse,
    target: Target,
    deleted: DataFrame,
    *,
    counts: Mapping[str, int],
    statement_id: str,
) -> tuple[tuple[str, ...], tuple[NewDeletes, ...], int]:
    """Write the deleted positions as a DV file; returns (removed paths, DV deletes, row count).

    ``deleted`` has the positions and, unless the table's BEFORE_IMAGES property is FALSE, the
    rows' old values and identity (see ``write_deletes``), kept as before-images; ``counts`` has
    the deleted rows per data file name. Files that lose all their live rows are removed outright
    instead of carrying a DV.
    """
    by_name = write_deletes(
        warehouse,
        deleted,
        counts=counts,
        directory=warehouse.dv_dir(statement_id),
        table=target.info.name,
        images=target.state.schema if target.info.before_images() else None,
    )
    return split_deletes(target.state, by_name)


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


def commit_one(
    ctx: StatementContext,
    target: Target,
    *,
    operation: str,
    added: tuple[DataFile, ...] = (),
    removed_paths: tuple[str, ...] = (),
    deletes: tuple[NewDeletes, ...] = (),
    rows_inserted: int = 0,
    rows_updated: int = 0,
    rows_deleted: int = 0,
    stream_reads: Iterable[StreamRead] = (),
) -> StatementResult:
    """Commit (or stage, inside a transaction) one statement's change to one table, consuming
    the streams it read."""
    table_id, name = target.info.table_id, target.info.name
    updates: list[Update] = []
    if added:
        updates.append(AddFiles(table_id, added))
    if removed_paths:
        updates.append(RemoveFiles(table_id, removed_paths))
    if deletes:
        updates.append(AddDeletes(table_id, deletes))
    touched = removed_paths + tuple(d.file_path for d in deletes)
    requirements: list[Requirement] = (
        [TableLive(table_id, name), SchemaUnchanged(table_id, name, target.state.version)]
        if updates
        else []
    )
    if touched:
        requirements.append(FilesUntouched(table_id, name, touched, target.state.version))
    advances, frontiers = stream_consumption(stream_reads)
    result = ctx.commit(
        CommitRequest(
            ctx.statement_id,
            operation,
            updates=tuple(updates) + advances,
            requirements=tuple(requirements) + frontiers,
            row_counts=(RowCounts(table_id, rows_inserted, rows_updated, rows_deleted),),
        )
    )
    made = result.version_of(table_id)
    return StatementResult(
        statement_id=ctx.statement_id,
        operation=operation,
        object=name,
        version=made,
        rows_inserted=rows_inserted,
        rows_updated=rows_updated,
        rows_deleted=rows_deleted,
        message=outcome(ctx, made),
    )


def outcome(ctx: StatementContext, made: int | None) -> str:
    """What a write statement's result says it did with its commit."""
    if made is not None:
        return "committed"
    return "staged in the open transaction" if ctx.transaction is not None else "no rows changed"


def write_rows(
    warehouse: Warehouse,
    parts: list[DataFrame],
    *,
    schema: TableSchema,
    table: str,
    directory: str,
    rows: int,
) -> list[DataFile]:
    """Write the union of ``parts`` (the table's columns, then RID: the identity a rewritten row
    keeps, NULL for a new row) as new data files of ``table``; ``rows`` sizes the files."""
    if not parts:
        return []
    return write_data(
        warehouse,
        functools.reduce(DataFrame.unionByName, parts),
        schema=schema,
        table=table,
        directory=directory,
        row_id=RID,
        partitions=partitions_for(rows),
    )


def remove_all_rows(ctx: StatementContext, target: Target, *, operation: str) -> StatementResult:
    """Remove every file of ``target`` (TRUNCATE, DELETE without a condition): no Spark job."""
    return commit_one(
        ctx,
        target,
        operation=operation,
        removed_paths=tuple(f.file.path for f in target.state.files),
        rows_deleted=target.state.live_rows,
    )

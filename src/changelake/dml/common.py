"""Pieces every write statement shares: targets, deletion bookkeeping, committing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from changelake.catalog.model import DataFile, NewDeletes, TableCommit, TableInfo
from changelake.sql.results import StatementResult
from changelake.storage.snapshot import TableState, file_name, read_state
from changelake.storage.writer import write_deletes

if TYPE_CHECKING:
    from changelake.session import Session


@dataclass(frozen=True)
class Target:
    """The table a write statement changes, as read by this statement."""

    info: TableInfo
    state: TableState

    @staticmethod
    def of(session: Session, name: str) -> Target:
        info = session.catalog.table(name)
        return Target(info, session.state(info))

    @staticmethod
    def for_append(session: Session, name: str) -> Target:
        """A target for a blind append: its schema, without listing its files (appends never
        read or conflict with existing rows, so their cost must not grow with the table)."""
        info = session.catalog.table(name)
        version = session.read_version(info)
        schema = session.catalog.schema_at(info.table_id, version)
        return Target(info, TableState(info.table_id, info.name, version, schema, ()))

    def with_identity(self, session: Session, state: TableState | None = None) -> DataFrame:
        return read_state(session.spark, session.warehouse, state or self.state, identity=True)


def record_deletes(
    session: Session,
    target: Target,
    positions: DataFrame,
    *,
    statement_id: str,
    what: str,
) -> tuple[tuple[str, ...], tuple[NewDeletes, ...], int]:
    """Write the deleted positions as a DV file; returns (removed paths, DV deletes, row count).

    Files that lose all their live rows are removed outright instead of carrying a DV.
    """
    by_name = write_deletes(
        session.warehouse,
        positions,
        directory=session.warehouse.dv_dir(statement_id),
        table=target.info.name,
        operation=what,
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


def commit_one(
    session: Session,
    target: Target,
    *,
    operation: str,
    statement_id: str,
    added: tuple[DataFile, ...] = (),
    removed_paths: tuple[str, ...] = (),
    deletes: tuple[NewDeletes, ...] = (),
    rows_inserted: int = 0,
    rows_updated: int = 0,
    rows_deleted: int = 0,
) -> StatementResult:
    """Commit (or stage, inside a transaction) one statement's change to one table."""
    commit = TableCommit(
        table_id=target.info.table_id,
        table_name=target.info.name,
        read_version=target.state.version,
        operation=operation,
        statement_id=statement_id,
        added=added,
        removed_paths=removed_paths,
        deletes=deletes,
        rows_inserted=rows_inserted,
        rows_updated=rows_updated,
        rows_deleted=rows_deleted,
    )
    changed = bool(added or removed_paths or deletes)
    if session.transaction is not None and added:
        base = session.catalog.allocate_row_ids(
            target.info.table_id, sum(f.row_count for f in added)
        )
        commit = _with_bases(commit, base)
    versions = session.commit([commit] if changed else [])
    made = versions.get(target.info.table_id)
    return StatementResult(
        statement_id=statement_id,
        operation=operation,
        object=target.info.name,
        version=made[-1] if made else None,
        rows_inserted=rows_inserted,
        rows_updated=rows_updated,
        rows_deleted=rows_deleted,
        message=(
            "committed"
            if made
            else "staged in the open transaction"
            if session.transaction is not None
            else "no rows changed"
        ),
    )


def remove_all_rows(
    session: Session, target: Target, *, operation: str, statement_id: str
) -> StatementResult:
    """Remove every file of ``target`` (TRUNCATE, DELETE without a condition): no Spark job."""
    return commit_one(
        session,
        target,
        operation=operation,
        statement_id=statement_id,
        removed_paths=tuple(f.file.path for f in target.state.files),
        rows_deleted=target.state.live_rows,
    )


def _with_bases(commit: TableCommit, base: int) -> TableCommit:
    from dataclasses import replace

    files = []
    for f in commit.added:
        files.append(replace(f, base_row_id=base))
        base += f.row_count
    return replace(commit, added=tuple(files))

"""Reading STREAMs: the changes from a stream's frontier to now, staleness, and consumption.

A read records how the frontier would move; a DML statement that commits moves it in the same
catalog transaction (compare-and-set), a plain query does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from changelake.catalog.model import StreamAdvance, StreamInfo, TableInfo
from changelake.changes.plan import ChangePlan, Information, plan_changes
from changelake.changes.scan import execute_plan
from changelake.errors import StaleStreamError

if TYPE_CHECKING:
    from changelake.session import Session

DAY = 86400.0


def extended_retention_days(info: TableInfo) -> float:
    """How long a stream keeps its table's history readable: retention, extended up to the max."""
    return max(info.retention_days(), info.max_extension_days())


def stale_after(session: Session, stream: StreamInfo, info: TableInfo) -> float | None:
    """When the stream becomes (or became) stale; None if nothing is pending to expire."""
    successor = session.catalog.version_info(info.table_id, stream.frontier_version + 1)
    if successor is None:
        return None
    return successor.committed_at + extended_retention_days(info) * DAY


def table_replaced(session: Session, info: TableInfo) -> bool:
    """Whether the stream's table was replaced (CREATE OR REPLACE TABLE) since it was created."""
    current = session.catalog.find_table(info.name)
    return current is None or current.table_id != info.table_id


def is_stale(session: Session, stream: StreamInfo, info: TableInfo) -> bool:
    if stream.frontier_version < info.vacuumed_before_version or table_replaced(session, info):
        return True
    deadline = stale_after(session, stream, info)
    return deadline is not None and deadline < session.now()


def check_not_stale(session: Session, stream: StreamInfo, info: TableInfo) -> None:
    if table_replaced(session, info):
        raise StaleStreamError(
            f"Stream {stream.name} is stale: table {info.name} was replaced after the stream was"
            f" created, so its changes no longer follow from the stream's position. Recreate it"
            f" with CREATE OR REPLACE STREAM {stream.name} ON TABLE {info.name}"
            " (add SHOW_INITIAL_ROWS = TRUE to start from the table's current rows)."
        )
    if is_stale(session, stream, info):
        raise StaleStreamError(
            f"Stream {stream.name} is stale: its unconsumed changes on table {info.name} fell out"
            f" of retention (DATA_RETENTION_TIME_IN_DAYS = {info.retention_days():g}, extended up"
            f" to MAX_DATA_EXTENSION_TIME_IN_DAYS = {info.max_extension_days():g}). Recreate it"
            f" with CREATE OR REPLACE STREAM {stream.name} ON TABLE {info.name}"
            " (add SHOW_INITIAL_ROWS = TRUE to start from the table's current rows)."
        )


def pinned_stream(session: Session, name: str) -> StreamInfo:
    """The stream as this session sees it: fixed for the rest of an open transaction."""
    txn = session.transaction
    if txn is not None and name.lower() in txn.streams:
        return txn.streams[name.lower()]
    stream = session.catalog.stream(name)
    if txn is not None:
        txn.streams[name.lower()] = stream
    return stream


def stream_plan(session: Session, name: str) -> tuple[StreamInfo, TableInfo, ChangePlan]:
    stream = pinned_stream(session, name)
    info = session.catalog.table_by_id(stream.table_id)
    check_not_stale(session, stream, info)
    end = max(session.read_version(info), stream.frontier_version)
    information = Information.APPEND_ONLY if stream.append_only else Information.DEFAULT
    # The first read of SHOW_INITIAL_ROWS returns every row at the end: all files up to it.
    touched = session.catalog.files_changed_between(
        info.table_id,
        start_exclusive=-1 if stream.pending_initial_rows else stream.frontier_version,
        end_inclusive=end,
    )
    plan = plan_changes(
        table_id=info.table_id,
        table_name=info.name,
        start_version=stream.frontier_version,
        end_version=end,
        information=information,
        touched=touched,
        initial_rows=stream.pending_initial_rows,
    )
    return stream, info, plan


def read_stream(session: Session, name: str) -> DataFrame:
    """The stream's pending changes; notes the frontier move a committing DML would make."""
    stream, info, plan = stream_plan(session, name)
    schema = session.catalog.schema_at(info.table_id, plan.end_version)
    session.note_stream_read(
        StreamAdvance(
            stream_id=stream.stream_id,
            stream_name=stream.name,
            expected_frontier=stream.frontier_version,
            expected_initial_consumed=stream.initial_consumed,
            new_frontier=plan.end_version,
        )
    )
    return execute_plan(session, plan, schema)


def has_data(session: Session, name: str) -> bool:
    """SYSTEM$STREAM_HAS_DATA: whether the stream has changes to consume (from metadata only).

    Like Snowflake's, it may say TRUE for changes that cancel out (e.g. compaction).
    """
    stream, _, plan = stream_plan(session, name)
    if stream.pending_initial_rows:
        return plan.end_version >= 0 and bool(
            session.catalog.snapshot_files(plan.table_id, plan.end_version)
        )
    return plan.shape.value != "EMPTY"


def stream_start_version(session: Session, info: TableInfo, name: str) -> int:
    """The start of ``CHANGES ... AT (STREAM => 'name')``: the stream's frontier."""
    stream = pinned_stream(session, name)
    if stream.table_id != info.table_id:
        other = session.catalog.table_by_id(stream.table_id)
        check_not_stale(session, stream, other)
        from changelake.errors import InvalidStatementError

        raise InvalidStatementError(
            f"Stream {stream.name} is on table {other.name}, not {info.name}."
        )
    check_not_stale(session, stream, info)
    return stream.frontier_version

"""Connections and external tables as objects: create and drop connections, drop, suspend,
resume and refresh external tables (the follow itself is in ``follow``, the refresh of a FILES
table in ``files``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import psycopg

from changelake.catalog.alters import AlterExternalTable
from changelake.catalog.model import ConnectionInfo, ExternalTableInfo, ExternalTableState
from changelake.catalog.requests import (
    CommitRequest,
    CreateConnection,
    DropConnection,
    DropTable,
    Requirement,
)
from changelake.dml.result import StatementResult
from changelake.errors import (
    ChangelakeError,
    ExternalTableError,
    ObjectNotFoundError,
    did_you_mean,
)
from changelake.external.directory import files
from changelake.external.postgresql import postgres, replication
from changelake.external.postgresql.follow import Followed, follow
from changelake.external.postgresql.pgoutput import Decoder, format_lsn, parse_lsn
from changelake.external.postgresql.pgtable import connection_of, drop_source_objects
from changelake.runtime.env import Context, Env
from changelake.txn.context import StatementContext


def create_connection(
    ctx: StatementContext,
    name: str,
    kind: str,
    options: dict[str, str],
    *,
    replace: bool,
    if_not_exists: bool,
) -> StatementResult:
    """CREATE CONNECTION: the options are checked, and so is connecting with them."""
    operation = "CREATE CONNECTION"
    ctx.require_no_transaction(operation)
    if if_not_exists and ctx.catalog.find_connection(name) is not None:
        return StatementResult(ctx.statement_id, operation, name.lower(), message="exists")
    info = ConnectionInfo(name.lower(), kind, postgres.check_options(name, options), 0.0)
    with postgres.connect(info) as conn:
        postgres.check_server(info, conn)
    ctx.commit(CommitRequest(ctx.statement_id, operation, (CreateConnection(info, replace),)))
    return StatementResult(
        ctx.statement_id, operation, info.name, message=f"Connection {info.name} created."
    )


def drop_connection(ctx: StatementContext, name: str, *, if_exists: bool) -> StatementResult:
    operation = "DROP CONNECTION"
    ctx.require_no_transaction(operation)
    if if_exists and ctx.catalog.find_connection(name) is None:
        return StatementResult(ctx.statement_id, operation, name.lower(), message="did not exist")
    ctx.commit(CommitRequest(ctx.statement_id, operation, (DropConnection(name),)))
    return StatementResult(
        ctx.statement_id, operation, name.lower(), message=f"Connection {name.lower()} dropped."
    )


def external_table(ctx: StatementContext, name: str) -> ExternalTableInfo:
    """External table ``name``; a clear error if it is missing or another kind of table."""
    found = ctx.catalog.find_external_table(name)
    if found is not None:
        return found
    if ctx.catalog.find_table(name) is not None:
        raise ExternalTableError(f"Table {name} is not an external table.")
    known = [e.name for e in ctx.catalog.list_external_tables()]
    raise ObjectNotFoundError(f"External table {name} does not exist.{did_you_mean(name, known)}")


def drop_external_table(ctx: StatementContext, name: str, *, if_exists: bool) -> StatementResult:
    """Drop the table (and the streams on it), then its slot and publication on the source
    (a FILES table has none: its files are the user's)."""
    operation = "DROP EXTERNAL TABLE"
    ctx.require_no_transaction(operation)
    if if_exists and ctx.catalog.find_table(name) is None:
        return StatementResult(ctx.statement_id, operation, name.lower(), message="did not exist")
    ext = external_table(ctx, name)
    ctx.commit(CommitRequest(ctx.statement_id, operation, (DropTable(ext.table_id),)))
    drop_source_objects(ctx, ext.definition)
    return StatementResult(
        ctx.statement_id, operation, ext.name, message=f"External table {ext.name} dropped."
    )


def set_state(ctx: StatementContext, name: str, action: str) -> StatementResult:
    """ALTER EXTERNAL TABLE … SUSPEND | RESUME: whether the service follows it."""
    ext = external_table(ctx, name)
    if action == "RESUME":
        update = AlterExternalTable(ext.table_id, state=ExternalTableState.ACTIVE, error="")
    else:
        update = AlterExternalTable(ext.table_id, state=ExternalTableState.SUSPENDED)
    operation = f"ALTER EXTERNAL TABLE {action}"
    ctx.commit(CommitRequest(ctx.statement_id, operation, (update,)))
    return StatementResult(ctx.statement_id, operation, ext.name, message=f"{ext.name}: {action}.")


def set_options(ctx: StatementContext, name: str, follow_lag: float) -> StatementResult:
    ext = external_table(ctx, name)
    operation = "ALTER EXTERNAL TABLE SET"
    update = AlterExternalTable(ext.table_id, follow_lag=follow_lag)
    ctx.commit(CommitRequest(ctx.statement_id, operation, (update,)))
    return StatementResult(ctx.statement_id, operation, ext.name, message="set")


def follow_once(
    env: Env,
    ext: ExternalTableInfo,
    *,
    requirements: Sequence[Requirement] = (),
) -> Followed:
    """One step of following ``ext``: a FILES table reads its new files, a PostgreSQL table one
    batch of its slot (``more`` says whether another batch waits)."""
    if ext.definition.kind == files.KIND:
        return files.refresh(env, ext, requirements=requirements)
    return follow(env, ext, requirements=requirements)


def refresh(ctx: Context, name: str) -> StatementResult:
    """ALTER EXTERNAL TABLE … REFRESH: follow until what the source had committed when the
    statement began is in (several commits if it is more than one batch); a FILES table reads
    the files it has not read yet, in one commit."""
    operation = "ALTER EXTERNAL TABLE REFRESH"
    ctx.require_no_transaction(operation)
    ext = external_table(ctx, name)
    if ext.definition.kind == files.KIND:
        return files.refresh_statement(ctx, ext)
    connection_of(ctx, ext.definition.connection or "")
    total = Followed()
    while True:
        step = follow(ctx.env, ext)
        total = Followed(
            transactions=total.transactions + step.transactions,
            changes=total.changes + step.changes,
            inserted=total.inserted + step.inserted,
            updated=total.updated + step.updated,
            deleted=total.deleted + step.deleted,
            source_lsn=step.source_lsn,
            version=step.version if step.version is not None else total.version,
        )
        if not step.more:
            break
        ext = external_table(ctx, name)
    return StatementResult(
        ctx.statement_id,
        operation,
        ext.name,
        total.version,
        rows_inserted=total.inserted,
        rows_updated=total.updated,
        rows_deleted=total.deleted,
        message=f"{total.transactions} source transaction(s) applied; at source position"
        f" {total.source_lsn}.",
    )


def source_state(ctx: StatementContext, ext: ExternalTableInfo) -> dict[str, object]:
    """What the source says of the table's slot (for DESCRIBE); the error if it cannot say."""
    d = ext.definition
    if d.kind == files.KIND:
        return files.source_state(ctx.catalog, ext)
    found: dict[str, object] = {"slot": d.slot, "publication": d.publication}
    if d.slot is None or d.connection is None:
        return found
    try:
        info = connection_of(ctx, d.connection)
        with postgres.connect(info) as conn:
            slot = replication.slot_state(conn, d.slot)
            head = format_lsn(replication.current_position(conn))
            pending = _oldest_pending(conn, ext) if slot is not None else None
    except (ChangelakeError, psycopg.Error) as e:
        found["source_error"] = str(e).strip()
        return found
    found["source_head_position"] = head
    # how far behind the source it is: since the oldest source commit not applied yet
    lag = 0.0 if pending is None else max(0.0, ctx.clock.now() - pending.timestamp())
    found["follow_lag_seconds"] = round(lag, 3)
    if slot is None:
        found["source_error"] = f"replication slot {d.slot} is missing on the source"
    else:
        found["slot_confirmed_position"] = slot.confirmed
        found["slot_retained_bytes"] = slot.retained_bytes
    return found


def _oldest_pending(conn: psycopg.Connection, ext: ExternalTableInfo) -> dt.datetime | None:
    """The commit time of the oldest source transaction the table has not applied."""
    d = ext.definition
    done = parse_lsn(ext.position or "0/0")
    decoder = Decoder()
    for changes in (1, None):  # usually the first transaction; else all (a crash left some)
        messages = replication.peek(conn, d.slot or "", d.publication or "", changes=changes)
        for transaction in decoder.feed(messages):
            if transaction.end_lsn > done:
                return transaction.commit_time
        if changes is not None and len(messages) < changes:
            return None
        decoder = Decoder()
    return None

"""The one commit path: check a list of commit requests' requirements, then apply their updates,
inside one database transaction (the caller's ``conn``), numbered and stamped by the warehouse's
commit clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection

from changelake.catalog import (
    channel_repo,
    clock_repo,
    commit_dynamic,
    commit_external,
    commit_tasks,
    file_repo,
    stream_repo,
    table_repo,
    view_repo,
)
from changelake.catalog.commit_state import CommitState, Version
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    AdvanceChannel,
    AdvanceStream,
    ChannelHeld,
    ColumnsWritable,
    CommitRequest,
    CommitResult,
    CreateStream,
    CreateTable,
    CreateView,
    DropChannel,
    DropStream,
    DropTable,
    DropView,
    FilesUntouched,
    ForgetFiles,
    FrontierAt,
    IfExists,
    OpenChannel,
    RemoveFiles,
    RenameTable,
    ReserveRowIds,
    SchemaUnchanged,
    SetProperties,
    SetSchema,
    TableLive,
)
from changelake.clock import Clock
from changelake.errors import (
    ChannelNotFoundError,
    StreamNotFoundError,
    TableNotFoundError,
    did_you_mean,
)

# A test hook: concurrency tests stall commits at ``fault_point("stamped")``, while they hold
# the commit clock. None in normal use.
fault_hook: Callable[[str], None] | None = None


def fault_point(name: str) -> None:
    if fault_hook is not None:
        fault_hook(name)


def commit(
    conn: Connection, requests: Sequence[CommitRequest], *, clock: Clock, postgres: bool
) -> CommitResult:
    """Check every requirement of ``requests``, then apply them in order. Raises (and the caller's
    transaction rolls back) if a requirement or an update fails."""
    state = CommitState(conn, postgres, round(clock.now(), 6))
    requests = [r for r in requests if not _kept(state, r)]
    if not requests:
        return CommitResult(applied=False, tables=_infos(state))
    # Locks in one order (table ids ascending), so concurrent commits cannot deadlock.
    for table_id in sorted(_tables_of(requests)):
        state.lock(table_id)
    # A frontier is read under its stream's row lock: two transactions that consume one stream
    # queue here and the second sees the first one's advance (PostgreSQL reads committed rows).
    for stream_id in sorted(_streams_of(requests)):
        stream_repo.lock(conn, stream_id, for_update=postgres)
    for request in requests:
        for requirement in request.requirements:
            _CHECKS[type(requirement)](state, requirement)
    made = []
    for request in requests:
        state.request, state.pending = request, {}
        for update in request.updates:
            _APPLY[type(update)](state, update)
        made.append((request, state.pending))
    # a table this commit makes a version of gets its counter with the version (one write)
    versioned = {table_id for _, versions in made for table_id in versions}
    for table_id, next_row_id in state.next_row_ids.items():
        if table_id not in versioned:
            table_repo.set_counters(conn, table_id, next_row_id=next_row_id)
    # Numbered and stamped last, just before the versions are recorded: the clock row, which
    # serializes all commits, is held only for these few writes and the database commit. No
    # commit holding it waits for a lock of another: it writes only its own versions and tables.
    definitions = clock_repo.new_definitions() if any(r.redefines for r in requests) else None
    state.stamp = clock_repo.advance(conn, clock, postgres=postgres, definitions=definitions)
    fault_point("stamped")
    for request, versions in made:
        _record_versions(state, request, versions)
    stream_repo.mark_consumed(conn, state.consumed, now=state.stamp.committed_at)
    commit_dynamic.record_history(state)
    commit_external.record_scopes(state)
    commit_tasks.record_runs(state)
    return CommitResult(
        applied=True,
        commit=state.stamp,
        versions=state.versions,
        tables=_infos(state),
        row_id_bases=state.row_id_bases,
        channels=state.channels,
    )


def _infos(state: CommitState) -> dict[str, Any]:
    return {
        name: table_repo.table_info(table_repo.by_id(state.conn, i))
        for name, i in state.tables.items()
    }


def _tables_of(requests: Sequence[CommitRequest]) -> set[int]:
    found = set()
    for request in requests:
        for item in (*request.updates, *request.requirements):
            table_id = getattr(item, "table_id", None)
            if table_id is not None:
                found.add(table_id)
            if isinstance(item, CreateStream):
                found.update(t for t, _ in item.frontiers)
    return found


def _streams_of(requests: Sequence[CommitRequest]) -> set[int]:
    return {
        r.stream_id
        for request in requests
        for r in request.requirements
        if isinstance(r, FrontierAt)
    }


def _kept(state: CommitState, request: CommitRequest) -> bool:
    """Whether ``request`` creates, IF NOT EXISTS, an object that exists: then none of it
    applies (a kept table is still reported, as it is)."""
    for u in request.updates:
        if not isinstance(u, CreateTable | CreateView | CreateStream):
            continue
        if u.if_exists is not IfExists.KEEP:
            continue
        if isinstance(u, CreateTable):
            row = table_repo.find_live(state.conn, u.name)
            if row is not None:
                state.tables[row.name] = row.table_id
                return True
        elif isinstance(u, CreateView) and view_repo.sql_of(state.conn, u.name) is not None:
            return True
        elif isinstance(u, CreateStream) and stream_repo.find_live(state.conn, u.name):
            return True
    return False


def _record_versions(
    state: CommitState, request: CommitRequest, versions: dict[int, Version]
) -> None:
    assert state.stamp is not None
    counts = {c.table_id: c for c in request.row_counts}
    for table_id, made in sorted(versions.items()):
        c = counts.get(table_id)
        inserted = made.rows_inserted if made.rows_inserted is not None else c.inserted if c else 0
        table_repo.insert_version(
            state.conn,
            table_id,
            made.version,
            committed_at=state.now,
            commit_number=state.stamp.commit_number,
            operation=request.operation,
            statement_id=request.statement_id,
            rows_inserted=inserted,
            rows_updated=c.updated if c else 0,
            rows_deleted=c.deleted if c else 0,
            files_added=made.files_added,
            files_removed=made.files_removed,
        )
        counters = {"current_version": made.version, "current_commit": state.stamp.commit_number}
        if table_id in state.next_row_ids:
            counters["next_row_id"] = state.next_row_ids[table_id]
        table_repo.set_counters(state.conn, table_id, **counters)
        if made.version == 0:  # created: at its first version's time, as time travel sees it
            table_repo.set_created_at(state.conn, table_id, state.now)
        state.versions.setdefault(table_id, []).append(made.version)


# -- requirements ---------------------------------------------------------------------------------


def _table_live(state: CommitState, r: TableLive) -> None:
    state.lock(r.table_id)


def _schema_unchanged(state: CommitState, r: SchemaUnchanged) -> None:
    table_repo.check_schema_unchanged(state.conn, r.table_id, r.name, since_version=r.since_version)


def _columns_writable(state: CommitState, r: ColumnsWritable) -> None:
    row = state.lock(r.table_id)
    table_repo.check_columns_writable(
        state.conn, r.table_id, r.name, r.columns, version=row.current_version
    )


def _files_untouched(state: CommitState, r: FilesUntouched) -> None:
    if r.paths:
        file_repo.check_untouched(
            state.conn, r.table_id, r.name, r.paths, since_version=r.since_version
        )


def _frontier_at(state: CommitState, r: FrontierAt) -> None:
    stream_repo.check_frontier(
        state.conn, r.stream_id, r.name, r.frontiers, initial_consumed=r.initial_consumed
    )


def _channel_held(state: CommitState, r: ChannelHeld) -> None:
    channel_repo.check_held(state.conn, r.table_id, r.table, r.name, r.epoch, r.offset_token)


_CHECKS: dict[type, Callable[[CommitState, Any], None]] = {
    **commit_dynamic.CHECKS,
    **commit_external.CHECKS,
    **commit_tasks.CHECKS,
    TableLive: _table_live,
    SchemaUnchanged: _schema_unchanged,
    ColumnsWritable: _columns_writable,
    FilesUntouched: _files_untouched,
    FrontierAt: _frontier_at,
    ChannelHeld: _channel_held,
}

# -- updates --------------------------------------------------------------------------------------


def _create_table(state: CommitState, u: CreateTable) -> None:
    conn, name, request = state.conn, u.name.lower(), state.request
    assert request is not None
    existing = table_repo.find_live(conn, name)
    if existing is not None and u.if_exists is IfExists.REPLACE:
        table_repo.check_no_dependents(conn, name, action="replace")
        table_repo.drop(conn, existing.table_id, now=state.now)
        state.changed(existing.table_id)
    else:
        table_repo.check_name_free(conn, name, kind="TABLE")
    table_id = table_repo.insert(conn, name, dict(u.properties), now=state.now)
    table_repo.set_schema(conn, table_id, u.schema, version=0)
    next_row_id = file_repo.add_files(conn, table_id, u.files, version=0, next_row_id=0)
    table_repo.set_counters(conn, table_id, next_row_id=next_row_id)
    state.pending[table_id] = Version(
        0, files_added=len(u.files), rows_inserted=sum(f.row_count for f in u.files)
    )
    state.made[table_id] = 0
    state.tables[name] = table_id


def _drop_table(state: CommitState, u: DropTable) -> None:
    row = state.lock(u.table_id)
    table_repo.check_no_dependents(state.conn, row.name, action="drop")
    table_repo.drop(state.conn, u.table_id, now=state.now)
    state.changed(u.table_id)
    stream_repo.drop_on_table(state.conn, u.table_id, now=state.now)
    channel_repo.drop_on_table(state.conn, u.table_id)


def _rename_table(state: CommitState, u: RenameTable) -> None:
    row = state.lock(u.table_id)
    new_name = u.new_name.lower()
    table_repo.check_no_dependents(state.conn, row.name, action="rename")
    table_repo.check_name_free(state.conn, new_name, kind="TABLE")
    table_repo.rename(state.conn, u.table_id, new_name)
    state.changed(u.table_id)


def _set_properties(state: CommitState, u: SetProperties) -> None:
    state.lock(u.table_id)
    table_repo.set_properties(state.conn, u.table_id, dict(u.properties))
    state.changed(u.table_id)


def _set_schema(state: CommitState, u: SetSchema) -> None:
    row = state.lock(u.table_id)
    before = table_repo.schema_at(state.conn, u.table_id, row.current_version)
    kept = {(c.column_id, c.name, c.type) for c in u.schema.columns}
    if any((c.column_id, c.name, c.type) not in kept for c in before.columns):
        # a dynamic table reading a dropped, renamed or retyped column would fail to refresh
        table_repo.check_no_dynamic_dependents(state.conn, row.name, action="alter the columns of")
    table_repo.set_schema(
        state.conn, u.table_id, u.schema, version=state.version_of(u.table_id).version
    )


def _add_files(state: CommitState, u: AddFiles) -> None:
    made = state.version_of(u.table_id)
    state.next_row_ids[u.table_id] = file_repo.add_files(
        state.conn,
        u.table_id,
        u.files,
        version=made.version,
        next_row_id=state.next_row_id(u.table_id),
    )
    made.files_added += len(u.files)


def _remove_files(state: CommitState, u: RemoveFiles) -> None:
    made = state.version_of(u.table_id)
    file_repo.remove_files(state.conn, u.table_id, u.paths, version=made.version, moved=u.moved)
    made.files_removed += len(u.paths)


def _add_deletes(state: CommitState, u: AddDeletes) -> None:
    if u.deletes:
        made = state.version_of(u.table_id)
        file_repo.add_deletes(state.conn, u.table_id, u.deletes, version=made.version)


def _reserve_row_ids(state: CommitState, u: ReserveRowIds) -> None:
    base = state.next_row_id(u.table_id)
    state.next_row_ids[u.table_id] = base + u.count
    state.row_id_bases[u.table_id] = base


def _forget_files(state: CommitState, u: ForgetFiles) -> None:
    file_repo.forget_files(state.conn, u.table_id, u.paths)
    table_repo.set_vacuumed_before(
        state.conn, u.table_id, u.vacuumed_before, postgres=state.postgres
    )
    state.changed(u.table_id)


def _make_room(
    state: CommitState, name: str, if_exists: IfExists, kind: str, drop_named: Callable[..., int]
) -> None:
    """Free ``name`` for a new object of ``kind``: OR REPLACE drops the live one of that kind
    (by its repository's ``drop_named``); otherwise, or if there was none, no object may have
    the name."""
    replaced = if_exists is IfExists.REPLACE and drop_named(state.conn, name, now=state.now) > 0
    if not replaced:
        table_repo.check_name_free(state.conn, name, kind=kind)


def _create_view(state: CommitState, u: CreateView) -> None:
    name = u.name.lower()
    _make_room(state, name, u.if_exists, "VIEW", view_repo.drop_named)
    view_repo.insert(state.conn, name, u.sql, u.depends_on, now=state.now)


def _drop_view(state: CommitState, u: DropView) -> None:
    conn, name = state.conn, u.name.lower()
    if view_repo.sql_of(conn, name) is None:
        known = table_repo.live_names(conn) + view_repo.live_names(conn)
        raise TableNotFoundError(f"View {name!r} does not exist.{did_you_mean(name, known)}")
    table_repo.check_no_dependents(conn, name, action="drop")
    view_repo.drop_named(conn, name, now=state.now)


def _create_stream(state: CommitState, u: CreateStream) -> None:
    name = u.name.lower()
    _make_room(state, name, u.if_exists, "STREAM", stream_repo.drop_named)
    stream_repo.insert(
        state.conn,
        table_id=u.table_id or 0,
        frontiers=u.frontiers,
        now=state.now,
        name=name,
        view_name=u.view,
        view_definition=u.view_definition,
        append_only=u.append_only,
        show_initial_rows=u.show_initial_rows,
        comment=u.comment,
    )


def _drop_stream(state: CommitState, u: DropStream) -> None:
    if not stream_repo.drop_named(state.conn, u.name, now=state.now):
        known = stream_repo.live_names(state.conn)
        raise StreamNotFoundError(
            f"Stream {u.name.lower()!r} does not exist.{did_you_mean(u.name, known)}"
        )


def _advance_stream(state: CommitState, u: AdvanceStream) -> None:
    stream_repo.advance(state.conn, u.stream_id, u.frontiers)
    state.consumed.add(u.stream_id)


def _open_channel(state: CommitState, u: OpenChannel) -> None:
    state.lock(u.table_id)
    state.channels[(u.table_id, u.name)] = channel_repo.open_(
        state.conn,
        u.table_id,
        u.name,
        now=state.now,
        offset_token=u.offset_token,
        reset_token=u.reset_token,
    )


def _advance_channel(state: CommitState, u: AdvanceChannel) -> None:
    assert state.request is not None
    adds_files = any(
        isinstance(x, AddFiles) and x.table_id == u.table_id and x.files
        for x in state.request.updates
    )
    # The token is committed by the version this request makes, if it makes one.
    made = state.version_of(u.table_id) if adds_files else state.pending.get(u.table_id)
    channel_repo.advance(
        state.conn,
        u.table_id,
        u.name,
        u.offset_token,
        version=made.version if made else None,
        now=state.now,
    )


def _drop_channel(state: CommitState, u: DropChannel) -> None:
    row = state.lock(u.table_id)
    if not channel_repo.drop(state.conn, u.table_id, u.name):
        known = [c.name for c in channel_repo.list_on(state.conn, u.table_id)]
        raise ChannelNotFoundError(
            f"Ingest channel {u.name!r} does not exist on table {row.name}."
            f"{did_you_mean(u.name, known)}"
        )


_APPLY: dict[type, Callable[[CommitState, Any], None]] = {
    **commit_dynamic.APPLY,
    **commit_external.APPLY,
    **commit_tasks.APPLY,
    CreateTable: _create_table,
    DropTable: _drop_table,
    RenameTable: _rename_table,
    SetProperties: _set_properties,
    SetSchema: _set_schema,
    AddFiles: _add_files,
    RemoveFiles: _remove_files,
    AddDeletes: _add_deletes,
    ReserveRowIds: _reserve_row_ids,
    ForgetFiles: _forget_files,
    CreateView: _create_view,
    DropView: _drop_view,
    CreateStream: _create_stream,
    DropStream: _drop_stream,
    AdvanceStream: _advance_stream,
    OpenChannel: _open_channel,
    AdvanceChannel: _advance_channel,
    DropChannel: _drop_channel,
}

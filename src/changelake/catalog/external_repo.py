"""Connections and external tables: reads, and the updates that define and change them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, delete, select, update

from changelake.catalog import tables as t
from changelake.catalog.alters import AlterExternalTable, values_set
from changelake.catalog.model import (
    ConnectionInfo,
    ExternalDefinition,
    ExternalFile,
    ExternalTableInfo,
    ExternalTableState,
    ScopeRecord,
)
from changelake.catalog.table_repo import table_info
from changelake.errors import ConflictError

_C, _E, _T, _F = t.connections.c, t.external_tables.c, t.tables.c, t.external_files.c
_S, _V = t.external_scopes.c, t.versions.c


def _connection(row: Any) -> ConnectionInfo:
    return ConnectionInfo(
        name=row.name, kind=row.kind, options=json.loads(row.options), created_at=row.created_at
    )


def find_connection(conn: Connection, name: str) -> ConnectionInfo | None:
    row = conn.execute(select(t.connections).where(_C.name == name.lower())).first()
    return None if row is None else _connection(row)


def list_connections(conn: Connection) -> list[ConnectionInfo]:
    return [_connection(r) for r in conn.execute(select(t.connections).order_by(_C.name))]


def put_connection(conn: Connection, info: ConnectionInfo) -> None:
    """Insert the connection, or replace one of the same name."""
    conn.execute(delete(t.connections).where(_C.name == info.name))
    conn.execute(
        t.connections.insert().values(
            name=info.name,
            kind=info.kind,
            options=json.dumps(info.options, sort_keys=True),
            created_at=info.created_at,
        )
    )


def drop_connection(conn: Connection, name: str) -> bool:
    return conn.execute(delete(t.connections).where(_C.name == name)).rowcount > 0


def _info(row: Any) -> ExternalTableInfo:
    return ExternalTableInfo(
        info=table_info(row),
        definition=ExternalDefinition(
            kind=row.kind,
            connection=row.connection,
            source=row.source,
            spec=json.loads(row.spec),
            scope_mode=row.scope_mode,
            follow_lag=row.follow_lag,
            slot=row.slot,
            publication=row.publication,
        ),
        scope=row.scope,
        state=row.state,
        error=row.error,
        followed_at=row.followed_at,
        position=row.position,
        bootstrap=row.bootstrap,
    )


def _live() -> Any:
    return (
        select(t.tables, t.external_tables.c)
        .join(t.external_tables, _E.table_id == _T.table_id)
        .where(_T.dropped_at.is_(None))
    )


def find(conn: Connection, name: str) -> ExternalTableInfo | None:
    row = conn.execute(_live().where(_T.name == name.lower())).first()
    return None if row is None else _info(row)


def by_id(conn: Connection, table_id: int) -> ExternalTableInfo | None:
    row = conn.execute(_live().where(_T.table_id == table_id)).first()
    return None if row is None else _info(row)


def list_live(conn: Connection) -> list[ExternalTableInfo]:
    return [_info(r) for r in conn.execute(_live().order_by(_T.name))]


def any_live(conn: Connection) -> bool:
    return conn.execute(_live().limit(1)).first() is not None


def check_position(
    conn: Connection,
    table_id: int,
    name: str,
    position: str | None,
    scope: str | None,
    *,
    rescoping: bool,
) -> None:
    """The table's rows still reflect ``position`` under ``scope`` (no other follow or change
    of scope committed since); only the rescope that fenced it commits while it is RESCOPING."""
    found = conn.execute(
        select(_E.position, _E.scope, _E.state).where(_E.table_id == table_id)
    ).first()
    if found is not None and (found.state == ExternalTableState.RESCOPING) != rescoping:
        raise ConflictError(
            f"External table {name} is having its scope changed (a dependent was created or"
            " dropped); its follow waits for that and goes on after it."
            if not rescoping
            else f"External table {name} is no longer being rescoped; nothing was written."
        )
    if found is None or found.position != position:
        raise ConflictError(
            f"External table {name} was brought to source position"
            f" {found.position if found else None} by another follow since this one read"
            f" {position}; nothing was written (the next follow goes on from there)."
        )
    if found.scope != scope:
        raise ConflictError(
            f"External table {name}'s scope changed to {found.scope} since this follow read"
            f" {scope}; nothing was written (the next follow goes on from there)."
        )


def users_of(conn: Connection, connection: str) -> list[str]:
    """The live external tables that read through ``connection``."""
    query = _live().where(_E.connection == connection).order_by(_T.name)
    return [r.name for r in conn.execute(query)]


def insert(
    conn: Connection,
    table_id: int,
    definition: ExternalDefinition,
    *,
    scope: str | None,
    position: str | None,
) -> None:
    conn.execute(
        t.external_tables.insert().values(
            table_id=table_id,
            kind=definition.kind,
            connection=definition.connection,
            source=definition.source,
            spec=json.dumps(definition.spec, sort_keys=True),
            scope_mode=definition.scope_mode,
            scope=scope,
            follow_lag=definition.follow_lag,
            state=ExternalTableState.ACTIVE,
            error="",
            slot=definition.slot,
            publication=definition.publication,
            followed_at=None,
            position=position,
        )
    )


def alter(conn: Connection, u: AlterExternalTable) -> None:
    """Set the columns of the table's row that ``u`` sets."""
    columns = {
        _E.scope: u.scope,
        _E.state: u.state,
        _E.error: u.error,
        _E.follow_lag: u.follow_lag,
        _E.followed_at: u.followed_at,
        _E.position: u.position,
        _E.bootstrap: u.bootstrap,
    }
    query = update(t.external_tables).where(_E.table_id == u.table_id)
    conn.execute(query.values(values_set(columns)))


def record_scope(conn: Connection, table_id: int, commit_number: int, scope: str | None) -> None:
    conn.execute(
        t.external_scopes.insert().values(
            table_id=table_id, begin_commit=commit_number, scope=scope
        )
    )


def scope_of_version(conn: Connection, table_id: int, version: int) -> ScopeRecord | None:
    """The last scope the table had while ``version`` was its current version (before the
    commit of the next version, if there is one); None if none was recorded."""
    following = conn.execute(
        select(_V.commit_number).where(_V.table_id == table_id, _V.version == version + 1)
    ).scalar()
    query = select(_S.begin_commit, _S.scope).where(_S.table_id == table_id)
    if following is not None:
        query = query.where(_S.begin_commit < following)
    row = conn.execute(query.order_by(_S.begin_commit.desc()).limit(1)).first()
    return None if row is None else ScopeRecord(row.begin_commit, row.scope)


def files(conn: Connection, table_id: int) -> list[ExternalFile]:
    rows = conn.execute(select(t.external_files).where(_F.table_id == table_id).order_by(_F.path))
    return [ExternalFile(r.path, r.size, r.modified) for r in rows]


def register_files(conn: Connection, table_id: int, found: Iterable[ExternalFile]) -> None:
    values = [
        {"table_id": table_id, "path": f.path, "size": f.size, "modified": f.modified}
        for f in found
    ]
    if values:
        conn.execute(t.external_files.insert(), values)

"""The commit path's updates of connections and external tables (registered by commit.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from changelake.catalog import external_repo
from changelake.catalog.alters import AlterExternalTable, Unset
from changelake.catalog.commit_state import CommitState
from changelake.catalog.requests import (
    CreateConnection,
    DefineExternalTable,
    DropConnection,
    FollowedFrom,
    RegisterFiles,
)
from changelake.errors import DependencyError, ObjectExistsError, ObjectNotFoundError, did_you_mean


def _known(state: CommitState) -> list[str]:
    return [c.name for c in external_repo.list_connections(state.conn)]


def _create_connection(state: CommitState, u: CreateConnection) -> None:
    name = u.connection.name.lower()
    if not u.replace and external_repo.find_connection(state.conn, name) is not None:
        raise ObjectExistsError(
            f"Connection {name} already exists; use CREATE OR REPLACE CONNECTION to change it."
        )
    external_repo.put_connection(state.conn, replace(u.connection, name=name, created_at=state.now))


def _drop_connection(state: CommitState, u: DropConnection) -> None:
    name = u.name.lower()
    users = external_repo.users_of(state.conn, name)
    if users:
        raise DependencyError(
            f"Cannot drop connection {name}: external tables {', '.join(users)} read through it;"
            " drop them first."
        )
    if not external_repo.drop_connection(state.conn, name):
        raise ObjectNotFoundError(
            f"Connection {name} does not exist.{did_you_mean(name, _known(state))}"
        )


def _define(state: CommitState, u: DefineExternalTable) -> None:
    connection = u.definition.connection
    if connection is not None and external_repo.find_connection(state.conn, connection) is None:
        raise ObjectNotFoundError(
            f"Connection {connection} does not exist (dropped while the external table was being"
            f" created?).{did_you_mean(connection, _known(state))}"
        )
    table_id = state.tables[u.name.lower()]
    external_repo.insert(state.conn, table_id, u.definition, scope=u.scope, position=u.position)
    state.scopes[table_id] = u.scope
    external_repo.register_files(state.conn, table_id, u.files)


def _alter(state: CommitState, u: AlterExternalTable) -> None:
    state.lock(u.table_id)
    external_repo.alter(state.conn, u)
    if not isinstance(u.scope, Unset):
        state.scopes[u.table_id] = u.scope


def _register(state: CommitState, u: RegisterFiles) -> None:
    state.lock(u.table_id)
    external_repo.register_files(state.conn, u.table_id, u.files)


APPLY: dict[type, Callable[[CommitState, Any], None]] = {
    CreateConnection: _create_connection,
    DropConnection: _drop_connection,
    DefineExternalTable: _define,
    AlterExternalTable: _alter,
    RegisterFiles: _register,
}


def _followed_from(state: CommitState, r: FollowedFrom) -> None:
    state.lock(r.table_id)  # raises if the table was dropped or replaced
    external_repo.check_position(
        state.conn, r.table_id, r.table, r.position, r.scope, rescoping=r.rescoping
    )


CHECKS: dict[type, Callable[[CommitState, Any], None]] = {FollowedFrom: _followed_from}


def record_scopes(state: CommitState) -> None:
    """Record the scopes this commit set, from its number on (after its stamp)."""
    assert state.stamp is not None
    for table_id, scope in state.scopes.items():
        external_repo.record_scope(state.conn, table_id, state.stamp.commit_number, scope)

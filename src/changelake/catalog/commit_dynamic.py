"""The commit path's updates and requirements of dynamic tables (registered by commit.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from changelake.catalog import dynamic_repo, lease_repo
from changelake.catalog.alters import AlterDynamicTable
from changelake.catalog.commit_state import CommitState
from changelake.catalog.model import RefreshState
from changelake.catalog.requests import (
    DefineDynamicTable,
    LeaseHeld,
    RecordRefresh,
    RefreshedFrom,
)


def _define(state: CommitState, u: DefineDynamicTable) -> None:
    dynamic_repo.insert(state.conn, state.tables[u.name.lower()], u.definition)


def _record(state: CommitState, u: RecordRefresh) -> None:
    table_id = u.table if isinstance(u.table, int) else state.tables[u.table.lower()]
    if u.refresh.state == RefreshState.SUCCEEDED:
        dynamic_repo.reached(state.conn, table_id, u.refresh)
    # written once the commit is stamped: the history row names the commit and the version
    state.refreshes.append((table_id, u.refresh))


def _alter(state: CommitState, u: AlterDynamicTable) -> None:
    dynamic_repo.alter(state.conn, u)


def record_history(state: CommitState) -> None:
    """Write the history rows of the refreshes this commit recorded (after its stamp)."""
    assert state.stamp is not None
    if not state.refreshes:
        return
    versions = {}
    for table_id, _ in state.refreshes:
        made = state.versions.get(table_id)
        versions[table_id] = made[-1] if made else state.lock(table_id).current_version
    dynamic_repo.record(
        state.conn,
        [(table_id, refresh, versions[table_id]) for table_id, refresh in state.refreshes],
        ended_at=state.stamp.committed_at,
        commit_number=state.stamp.commit_number,
    )


def _refreshed_from(state: CommitState, r: RefreshedFrom) -> None:
    state.lock(r.table_id)  # raises if the table was dropped or replaced
    dynamic_repo.check_refreshed_from(
        state.conn, r.table_id, r.name, r.frontiers, data_timestamp=r.data_timestamp
    )


APPLY: dict[type, Callable[[CommitState, Any], None]] = {
    DefineDynamicTable: _define,
    RecordRefresh: _record,
    AlterDynamicTable: _alter,
}


def _lease_held(state: CommitState, r: LeaseHeld) -> None:
    lease_repo.check_held(state.conn, r.name, r.epoch, postgres=state.postgres)


CHECKS: dict[type, Callable[[CommitState, Any], None]] = {
    RefreshedFrom: _refreshed_from,
    LeaseHeld: _lease_held,
}

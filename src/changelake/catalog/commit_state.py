"""The state of one commit while the commit path applies its requests (commit.py): the locks
it took, the versions it makes, and its stamp once it has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from changelake.catalog import table_repo
from changelake.catalog.alters import FinishTaskRun
from changelake.catalog.model import RefreshRecord, Snapshot
from changelake.catalog.requests import CommitRequest


@dataclass
class Version:
    """A table version being made by one request."""

    version: int
    files_added: int = 0
    files_removed: int = 0
    rows_inserted: int | None = None  # None: as the request's row counts say


@dataclass
class CommitState:
    conn: Connection
    postgres: bool
    reading: float  # the clock when the commit began: the time of creations and drops
    stamp: Snapshot | None = None  # this commit's number and time, taken last
    versions: dict[int, list[int]] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    row_id_bases: dict[int, int] = field(default_factory=dict)
    channels: dict[tuple[int, str], Any] = field(default_factory=dict)
    request: CommitRequest | None = None  # being applied
    pending: dict[int, Version] = field(default_factory=dict)  # versions it makes
    next_row_ids: dict[int, int] = field(default_factory=dict)  # the one row-id counter per table
    made: dict[int, int] = field(default_factory=dict)  # the last version started per table
    consumed: set[int] = field(default_factory=set)  # streams it advances
    refreshes: list[tuple[int, RefreshRecord]] = field(default_factory=list)  # recorded at the end
    finished_runs: list[FinishTaskRun] = field(default_factory=list)  # task runs it ends
    scopes: dict[int, str | None] = field(default_factory=dict)  # external tables' new scopes
    # table rows as locked; an update that changes one (drop, rename, properties) forgets it
    locked: dict[int, Any] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.reading if self.stamp is None else self.stamp.committed_at

    def lock(self, table_id: int) -> Any:
        """The table's row, locked; read once per commit until ``changed`` (the commit moves
        versions and counters itself, in ``pending``, ``made`` and ``next_row_ids``)."""
        if table_id not in self.locked:
            self.locked[table_id] = table_repo.lock(self.conn, table_id, for_update=self.postgres)
        return self.locked[table_id]

    def changed(self, table_id: int) -> None:
        """This commit wrote the table's row: the next ``lock`` reads it again."""
        self.locked.pop(table_id, None)

    def version_of(self, table_id: int) -> Version:
        """The version the current request makes of ``table_id`` (started at first use)."""
        if table_id not in self.pending:
            # An earlier request of this commit may have made a version already (versions are
            # recorded at the end, once the commit is stamped).
            last = self.made.get(table_id)
            if last is None:
                last = self.lock(table_id).current_version
            self.pending[table_id] = Version(last + 1)
            self.made[table_id] = last + 1
        return self.pending[table_id]

    def next_row_id(self, table_id: int) -> int:
        """The table's next free row id as this commit has moved it so far."""
        if table_id not in self.next_row_ids:
            self.next_row_ids[table_id] = self.lock(table_id).next_row_id
        return self.next_row_ids[table_id]

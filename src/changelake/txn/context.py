"""The statement context: one statement's id, the versions it reads, and where its commit goes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from changelake.catalog import Catalog
from changelake.catalog.model import Snapshot, StreamInfo, TableInfo
from changelake.catalog.requests import (
    AddFiles,
    CommitRequest,
    CommitResult,
    ReserveRowIds,
)
from changelake.clock import Clock
from changelake.errors import TransactionError
from changelake.txn.reads import StatementReads
from changelake.txn.retention import check_readable
from changelake.txn.snapshot import TableState
from changelake.txn.transaction import Transaction, version_in


def new_statement_id() -> str:
    return str(uuid.uuid4())


@dataclass
class StatementContext:
    """Everything a statement needs to know about the catalog besides its own text.

    A statement reads every table at one point of the warehouse's commit order: outside a
    transaction, the last commit when the statement began (before it looked up any table);
    inside one, the last commit when the transaction began, plus what the transaction staged.
    """

    catalog: Catalog
    clock: Clock
    transaction: Transaction | None = None
    statement_id: str = field(default_factory=new_statement_id)
    _pinned: dict[int, int] = field(default_factory=dict)
    _snapshot: Snapshot | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.catalog, StatementReads):
            # a Catalog by delegation (see StatementReads)
            self.catalog = StatementReads(  # type: ignore[assignment]
                self.catalog, self._definitions_token
            )
        # Taken before any table is looked up: a TableInfo read later is never older than the
        # snapshot, so a table whose current version is in it needs no further read.
        if self.transaction is None:
            self._snapshot = self.catalog.snapshot()
            self.catalog.definitions()  # known now, with the snapshot

    def now(self) -> float:
        return round(self.clock.now(), 6)

    def table(self, name: str) -> TableInfo:
        return self.catalog.table(name)

    def snapshot(self) -> Snapshot:
        """The commit point this statement reads at."""
        if self.transaction is not None:
            return self.transaction.snapshot
        assert self._snapshot is not None
        return self._snapshot

    def _definitions_token(self) -> str | None:
        """The definitions token this statement binds under. A statement reads names and view
        texts as they are now, and tables' columns at its read versions: in a transaction that
        is one token only while no DDL committed since BEGIN (one small read to know)."""
        if self.transaction is None:
            return self.snapshot().definitions
        began = self.transaction.snapshot.definitions
        return began if self.catalog.snapshot().definitions == began else None

    def read_version(self, info: TableInfo) -> int:
        if self.transaction is not None:
            return self.transaction.read_version(self.catalog, info)
        if info.table_id not in self._pinned:
            self._pinned[info.table_id] = version_in(self.catalog, info, self.snapshot())
        return self._pinned[info.table_id]

    def check_readable(self, info: TableInfo, version: int) -> None:
        """Raise TimeTravelError unless ``version`` of ``info`` exists and is within retention.
        A version committed after this statement's snapshot exists too (a time or statement
        point may name one)."""
        latest = self.read_version(info)
        if version > latest and self.catalog.version_info(info.table_id, version) is not None:
            latest = version
        check_readable(self.catalog, info, version, latest=latest, now=self.now())

    def state(self, info: TableInfo, version: int | None = None) -> TableState:
        """The table at ``version`` (default: what this statement reads), checked readable."""
        current = self.read_version(info)
        if version is None:
            version = current
        else:
            self.check_readable(info, version)
        state = TableState(
            table_id=info.table_id,
            name=info.name,
            version=version,
            schema=self.catalog.schema_at(info.table_id, version),
            files=tuple(self.catalog.snapshot_files(info.table_id, version)),
        )
        if self.transaction is not None and version == current:
            state = self.transaction.overlay(state)
        return state

    def schema_state(self, info: TableInfo) -> TableState:
        """The table's schema at the read version without its files: what a blind append needs,
        so that its cost does not grow with the table."""
        version = self.read_version(info)
        return TableState(
            info.table_id, info.name, version, self.catalog.schema_at(info.table_id, version), ()
        )

    def stream(self, name: str) -> StreamInfo:
        """The stream as this statement sees it: fixed for the rest of an open transaction."""
        txn = self.transaction
        if txn is not None and name.lower() in txn.streams:
            return txn.streams[name.lower()]
        stream = self.catalog.stream(name)
        if txn is not None:
            txn.streams[name.lower()] = stream
        return stream

    def commit(self, request: CommitRequest) -> CommitResult:
        """Commit ``request`` now, or stage it in the open transaction (then no versions yet)."""
        if self.transaction is None:
            if request.empty:
                return CommitResult(applied=False)
            return self.catalog.commit([request], clock=self.clock)
        self.transaction.stage(self._with_row_ids(request))
        return CommitResult(applied=False)

    def _with_row_ids(self, request: CommitRequest) -> CommitRequest:
        """Files staged in a transaction get their row ids now: later statements of the same
        transaction may rewrite their rows and must carry those ids along."""
        updates = []
        for u in request.updates:
            if isinstance(u, AddFiles) and any(f.base_row_id is None for f in u.files):
                count = sum(f.row_count for f in u.files)
                reserved = self.catalog.commit(
                    [
                        CommitRequest(
                            self.statement_id,
                            "RESERVE ROW IDS",
                            (ReserveRowIds(u.table_id, count),),
                        )
                    ],
                    clock=self.clock,
                )
                base = reserved.row_id_bases[u.table_id]
                files = []
                for f in u.files:
                    files.append(replace(f, base_row_id=base))
                    base += f.row_count
                u = replace(u, files=tuple(files))
            updates.append(u)
        return replace(request, updates=tuple(updates))

    def require_no_transaction(self, what: str) -> None:
        if self.transaction is not None:
            raise TransactionError(
                f"{what} cannot run inside a transaction; COMMIT or ROLLBACK first."
            )

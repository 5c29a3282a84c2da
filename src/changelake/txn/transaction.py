"""An open BEGIN ... COMMIT transaction: pinned read versions and staged commit requests."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from changelake.catalog import Catalog
from changelake.catalog.model import LiveFile, Snapshot, StreamInfo, TableInfo
from changelake.catalog.requests import (
    AddDeletes,
    AddFiles,
    AdvanceStream,
    CommitRequest,
    FrontierAt,
    RemoveFiles,
)
from changelake.txn.snapshot import TableState


@dataclass
class Transaction:
    """Statements inside BEGIN ... COMMIT read every table at the commit point where it began
    (snapshot isolation), however late they first touch it, plus their own staged writes, and
    commit together in one catalog transaction."""

    snapshot: Snapshot
    pinned: dict[int, int] = field(default_factory=dict)
    staged: list[CommitRequest] = field(default_factory=list)
    streams: dict[str, StreamInfo] = field(default_factory=dict)  # as first read

    def read_version(self, catalog: Catalog, info: TableInfo) -> int:
        if info.table_id not in self.pinned:
            self.pinned[info.table_id] = version_in(catalog, info, self.snapshot)
        return self.pinned[info.table_id]

    def stage(self, request: CommitRequest) -> None:
        """Keep ``request`` for COMMIT. A stream read again by a later statement was consumed
        by the first one: its frontier moves once."""
        advanced = {
            u.stream_id for r in self.staged for u in r.updates if isinstance(u, AdvanceStream)
        }
        if advanced:
            request = replace(
                request,
                updates=tuple(
                    u
                    for u in request.updates
                    if not (isinstance(u, AdvanceStream) and u.stream_id in advanced)
                ),
                requirements=tuple(
                    r
                    for r in request.requirements
                    if not (isinstance(r, FrontierAt) and r.stream_id in advanced)
                ),
            )
        if request.updates:
            self.staged.append(request)

    def overlay(self, state: TableState) -> TableState:
        """``state`` with this transaction's staged changes to the same table applied."""
        updates = [
            u
            for r in self.staged
            for u in r.updates
            if isinstance(u, AddFiles | RemoveFiles | AddDeletes) and u.table_id == state.table_id
        ]
        if not updates:
            return state
        files = {f.file.path: f for f in state.files}
        for u in updates:
            if isinstance(u, AddFiles):
                for added in u.files:
                    files[added.path] = LiveFile(added)
            elif isinstance(u, RemoveFiles):
                for path in u.paths:
                    files.pop(path, None)
            else:
                for d in u.deletes:
                    live = files[d.file_path]
                    files[d.file_path] = replace(
                        live,
                        dv_paths=live.dv_paths + (d.dv_path,),
                        deleted_rows=live.deleted_rows + d.row_count,
                    )
        return state.with_files(list(files.values()))


def version_in(catalog: Catalog, info: TableInfo, snapshot: Snapshot) -> int:
    """The version of ``info`` that ``snapshot`` holds: its current one unless a later commit
    made that (then one indexed lookup). A table created after the snapshot (DDL is not
    transactional) is read at its current version."""
    if info.current_commit <= snapshot.commit_number:
        return info.current_version
    found = catalog.version_at(info.table_id, snapshot.commit_number)
    return info.current_version if found is None else found


@dataclass
class TransactionSlot:
    """Where a session keeps its open transaction: BEGIN fills it, COMMIT and ROLLBACK empty
    it (before committing, so a failed COMMIT ends the transaction too)."""

    current: Transaction | None = None

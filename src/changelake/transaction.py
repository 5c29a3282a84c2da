"""An open BEGIN ... COMMIT transaction: pinned read versions and staged statement commits."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from changelake.catalog.model import LiveFile, StreamAdvance, StreamInfo, TableCommit
from changelake.storage.snapshot import TableState


@dataclass
class Transaction:
    """Statements inside BEGIN ... COMMIT read the versions pinned at first use plus their own
    staged writes, and commit together in one catalog transaction."""

    started_at: float
    pinned: dict[int, int] = field(default_factory=dict)
    staged: list[TableCommit] = field(default_factory=list)
    streams: dict[str, StreamInfo] = field(default_factory=dict)  # as first read
    advances: dict[int, StreamAdvance] = field(default_factory=dict)

    def stage(self, commit: TableCommit) -> None:
        self.staged.append(commit)

    def stage_advance(self, advance: StreamAdvance) -> None:
        self.advances.setdefault(advance.stream_id, advance)

    def overlay(self, state: TableState) -> TableState:
        """``state`` with this transaction's staged changes to the same table applied."""
        commits = [c for c in self.staged if c.table_id == state.table_id]
        if not commits:
            return state
        files = {f.file.path: f for f in state.files}
        for c in commits:
            for added in c.added:
                files[added.path] = LiveFile(added)
            for path in c.removed_paths:
                files.pop(path, None)
            for d in c.deletes:
                live = files[d.file_path]
                files[d.file_path] = replace(
                    live,
                    dv_paths=live.dv_paths + (d.dv_path,),
                    deleted_rows=live.deleted_rows + d.row_count,
                )
        return state.with_files(list(files.values()))
